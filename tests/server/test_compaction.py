"""Compaction against the real model: ``client.responses.compact`` (user messages kept,
the rest one ``compaction`` item, a summary the model wrote that the next turn reads),
and openai-agents' ``OpenAIResponsesCompactionSession`` compacting its history between
turns. The model name is ``gpt-4o-mini`` (real_server's alias of the local model): the
Agents SDK refuses to compact for a name that is not an OpenAI model's."""

from __future__ import annotations

import asyncio
import time

import httpx

import openai
import pytest
from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, SQLiteSession, set_tracing_disabled
from agents.memory import OpenAIResponsesCompactionSession

from dragoman.adapters.responses.ids import decode_compaction
from tests.support.server import RunningServer

MODEL = "gpt-4o-mini"
HISTORY = [
    {"type": "message", "role": "user", "content": "My name is Ada and I live in Paris."},
    {"type": "message", "role": "assistant", "content": "Nice to meet you, Ada."},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"},
    {"type": "message", "role": "assistant", "content": "It is sunny in Paris."},
    {"type": "message", "role": "user", "content": "Thanks."},
]


@pytest.fixture(scope="module")
def client(real_server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)


def test_compact_keeps_user_messages_and_summarizes_the_rest(client: openai.OpenAI) -> None:
    compacted = client.responses.compact(model=MODEL, input=HISTORY)
    assert compacted.object == "response.compaction"
    kinds = [item.type for item in compacted.output]
    assert kinds == ["message", "message", "compaction"]
    assert [item.content[0].text for item in compacted.output[:2]] == [HISTORY[0]["content"], "Thanks."]
    compaction = compacted.output[-1]
    summary = decode_compaction(compaction.encrypted_content)
    assert summary and compaction.id.startswith("cmp_")
    assert compacted.usage.input_tokens > 50 and 0 < compacted.usage.output_tokens <= 256
    # The next turn takes the compacted items as its input; the summary is in its prompt.
    full = client.responses.input_tokens.count(model=MODEL, input=[*HISTORY, {"role": "user", "content": "Bye."}])
    items = [item.model_dump(exclude_none=True, warnings=False) for item in compacted.output]
    short = client.responses.input_tokens.count(model=MODEL, input=[*items, {"role": "user", "content": "Bye."}])
    bare = client.responses.input_tokens.count(model=MODEL, input=[*items[:-1], {"role": "user", "content": "Bye."}])
    assert short.input_tokens > bare.input_tokens and short.input_tokens != full.input_tokens
    reply = client.responses.create(model=MODEL, input=[*items, {"role": "user", "content": "Say hello."}], max_output_tokens=16)
    assert reply.status in ("completed", "incomplete") and reply.output_text


def test_compact_from_a_stored_response(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="Say hello.", max_output_tokens=16, temperature=0)
    compacted = client.responses.compact(model=MODEL, previous_response_id=first.id, input=[{"role": "user", "content": "And?"}])
    assert [item.type for item in compacted.output] == ["message", "message", "compaction"]


def test_a_foreign_compaction_item_is_refused_by_name(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input=[{"type": "compaction", "encrypted_content": "gAAAAB-openai"}, {"role": "user", "content": "hi"}])
    assert refused.value.param == "input[0].encrypted_content"


def test_compaction_session_over_several_turns(real_server: RunningServer) -> None:
    set_tracing_disabled(True)  # traces would go to api.openai.com

    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)
        agent = Agent(
            name="greeter", model=OpenAIResponsesModel(model=MODEL, openai_client=client),
            model_settings=ModelSettings(temperature=0, max_tokens=200),
        )  # fmt: skip
        session = OpenAIResponsesCompactionSession(
            session_id="compacted", underlying_session=SQLiteSession("compacted"), client=client, model=MODEL,
            # After the third turn: a 135M model's summary is poor, and a turn after it can loop to the limit.
            should_trigger_compaction=lambda context: len(context["compaction_candidate_items"]) >= 3,
        )  # fmt: skip
        for turn in ("Say hello.", "Say hello.", "Say hello."):
            result = await Runner.run(agent, turn, session=session, max_turns=1)
            assert isinstance(result.final_output, str) and result.final_output
        items = await session.get_items()
        assert [item.get("type", "message") for item in items] == ["message"] * 3 + ["compaction"]
        assert [item.get("role") for item in items[:3]] == ["user"] * 3
        # What the next turn would send is taken: the compaction item reads back here.
        counted = await client.responses.input_tokens.count(model=MODEL, input=[*items, {"role": "user", "content": "Hi"}])
        assert counted.input_tokens > 30

    asyncio.run(run())


def _responses_requests(server: RunningServer) -> float:
    """dragoman_requests_total of the Responses dialect, all series."""
    lines = httpx.get(server.url + "/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("dragoman_requests_total{") and 'dialect="responses"' in line)


def test_a_compaction_before_the_turn_is_logged_and_counted_apart(client: openai.OpenAI, real_server: RunningServer) -> None:
    before = _responses_requests(real_server)
    reply = client.responses.create(
        model=MODEL, input=[*HISTORY, {"role": "user", "content": "Say hello."}], max_output_tokens=8,
        context_management=[{"type": "compaction", "compact_threshold": 20}],
    )  # fmt: skip
    assert reply.output[0].type == "compaction"
    deadline = time.monotonic() + 5
    while _responses_requests(real_server) < before + 2:  # the turn and its compaction, each its own record
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_context_management_compacts_past_the_threshold(client: openai.OpenAI, stream: bool) -> None:
    ask = {"model": MODEL, "input": [*HISTORY, {"role": "user", "content": "Say hello."}], "max_output_tokens": 16, "temperature": 0}
    full = client.responses.input_tokens.count(model=MODEL, input=ask["input"]).input_tokens
    under = client.responses.create(**ask, context_management=[{"type": "compaction", "compact_threshold": full + 1}])
    assert [item.type for item in under.output] == ["message"]
    compacting = {**ask, "context_management": [{"type": "compaction", "compact_threshold": 20}]}
    if stream:
        events = list(client.responses.create(**compacting, stream=True))
        added = [e for e in events if e.type == "response.output_item.added"]
        assert added[0].item.type == "compaction" and added[0].output_index == 0 and added[1].output_index == 1
        reply = events[-1].response
    else:
        reply = client.responses.create(**compacting)
    assert [item.type for item in reply.output][:2] == ["compaction", "message"] and reply.output_text
    assert reply.usage is not None and reply.usage.input_tokens != under.usage.input_tokens
    # What the next turn continues from is the compacted conversation (no second compaction item).
    seen = client.responses.input_items.list(reply.id, order="asc").data
    assert [item.type for item in seen] == ["message"] * 3 + ["compaction"]
    after = client.responses.input_tokens.count(model=MODEL, previous_response_id=reply.id, input="Bye.")
    assert after.input_tokens > 0


def test_context_management_errors_name_the_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as kind:
        client.responses.create(model=MODEL, input="hi", context_management=[{"type": "clear_tool_uses"}])
    assert kind.value.param == "context_management[0].type"
    with pytest.raises(openai.BadRequestError) as threshold:
        client.responses.create(model=MODEL, input="hi", context_management=[{"type": "compaction", "compact_threshold": 0}])
    assert threshold.value.param == "context_management[0].compact_threshold"
