"""The real default model through ``/v1/messages`` over HTTP with the official
``anthropic`` client: whole and streamed replies, a forced tool call, token counts,
the model listing and errors as the client types them."""

from __future__ import annotations

import httpx
import jsonschema
import pytest

from tests.support.server import RunningServer
from tests.support.sse import named_events

anthropic = pytest.importorskip("anthropic", reason="the test extra installs the official anthropic client")

MODEL = "smollm2:135m"
GREEDY = {"top_k": 1}  # the SDK no longer has sampling arguments; the API still takes them
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def prompt_tokens(usage: anthropic.types.Usage) -> int:
    """The whole prompt: Anthropic's ``input_tokens`` leave out what was read from the
    prompt cache (an earlier test may have sent the same prompt)."""
    return usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)


@pytest.fixture(scope="module")
def client(real_server: RunningServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=real_server.url, api_key="unused", max_retries=0)


def test_create_answers(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model=MODEL, max_tokens=24, messages=QUESTION, extra_body=GREEDY)
    assert message.id.startswith("msg_") and message.role == "assistant" and message.model == MODEL
    assert [block.type for block in message.content] == ["text"]
    assert "Paris" in message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert prompt_tokens(message.usage) > 10 and 0 < message.usage.output_tokens <= 24


def test_stream_accumulates_to_the_whole_reply(client: anthropic.Anthropic) -> None:
    whole = client.messages.create(model=MODEL, max_tokens=24, messages=QUESTION, extra_body=GREEDY)
    with client.messages.stream(model=MODEL, max_tokens=24, messages=QUESTION, extra_body=GREEDY) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1  # it did stream
    assert final.content[0].text == "".join(pieces) == whole.content[0].text
    assert (final.stop_reason, prompt_tokens(final.usage), final.usage.output_tokens) == (
        whole.stop_reason, prompt_tokens(whole.usage), whole.usage.output_tokens,
    )  # fmt: skip


def test_message_start_carries_the_prompts_input_tokens(client: anthropic.Anthropic, real_server: RunningServer) -> None:
    """Anthropic reports the prompt's input_tokens in message_start (Claude Code reads it
    there, as did SDKs before 0.49); message_delta repeats it with output_tokens."""
    counted = client.messages.count_tokens(model=MODEL, messages=QUESTION).input_tokens
    ask = {"model": MODEL, "max_tokens": 8, "messages": QUESTION, "stream": True, **GREEDY}
    with httpx.stream("POST", real_server.url + "/v1/messages", json=ask, timeout=60) as reply:
        events = named_events(reply.read().decode())
    (name, start), *_ = events
    # The whole prompt: input_tokens plus what came from the prompt cache (Anthropic's split).
    def whole(usage: dict[str, int]) -> int:
        return usage["input_tokens"] + (usage.get("cache_read_input_tokens") or 0)

    assert name == "message_start" and whole(start["message"]["usage"]) == counted > 10
    assert start["message"]["usage"]["output_tokens"] == 0
    delta = next(data for name, data in events if name == "message_delta")
    assert whole(delta["usage"]) == counted and delta["usage"]["output_tokens"] > 0
    # What the SDK accumulates: message_start's count, kept through message_delta.
    with client.messages.stream(model=MODEL, max_tokens=8, messages=QUESTION, extra_body=GREEDY) as stream:
        first = next(iter(stream))
        assert first.type == "message_start" and whole(first.message.usage.model_dump()) == counted
        final = stream.get_final_message()
    assert whole(final.usage.model_dump()) == counted and final.usage.output_tokens == delta["usage"]["output_tokens"]


def test_max_tokens_far_beyond_the_context_is_clamped(client: anthropic.Anthropic) -> None:
    """Claude Code asks for 32000; the model gives what its context allows."""
    ask = {"model": MODEL, "max_tokens": 32000, "messages": QUESTION, "stop_sequences": ["."], "extra_body": GREEDY}
    with client.messages.stream(**ask) as stream:  # the client insists on streaming for 32000
        message = stream.get_final_message()
    assert message.stop_reason in ("stop_sequence", "end_turn")
    if message.stop_reason == "stop_sequence":
        assert message.stop_sequence == "." and not message.content[0].text.endswith(".")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_tool_choice_any_gives_a_valid_tool_use(client: anthropic.Anthropic, stream: bool) -> None:
    ask = {"model": MODEL, "max_tokens": 64, "tools": [WEATHER], "tool_choice": {"type": "any"},
           "messages": [{"role": "user", "content": "What's the weather in Paris?"}]}  # fmt: skip
    if stream:
        with client.messages.stream(**ask) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**ask)
    calls = [block for block in message.content if block.type == "tool_use"]
    assert message.stop_reason == "tool_use" and len(calls) == 1
    assert calls[0].id.startswith("toolu_") and calls[0].name == "get_weather"
    jsonschema.validate(calls[0].input, WEATHER["input_schema"])
    # The result goes back and the model answers in words.
    follow = client.messages.create(
        model=MODEL, max_tokens=24, tools=[WEATHER], extra_body=GREEDY,
        messages=[*ask["messages"], {"role": "assistant", "content": message.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id, "content": "Sunny, 21C"}]}],
    )  # fmt: skip
    assert follow.content and prompt_tokens(follow.usage) > prompt_tokens(message.usage)


def test_count_tokens_is_the_prompt_the_model_reads(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(model=MODEL, messages=QUESTION)
    message = client.messages.create(model=MODEL, max_tokens=1, messages=QUESTION)
    assert counted.input_tokens == prompt_tokens(message.usage) > 10
    with_tools = client.messages.count_tokens(model=MODEL, messages=QUESTION, tools=[WEATHER], system="Be brief.")
    assert with_tools.input_tokens > counted.input_tokens
    long = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "word " * 3000}])
    assert long.input_tokens > 2048  # counting is not bounded by the context


def test_models_listing_in_anthropic_shape(client: anthropic.Anthropic) -> None:
    listed = list(client.models.list())
    assert MODEL in [m.id for m in listed] and all(m.type == "model" for m in listed)
    one = client.models.retrieve(MODEL)
    assert (one.id, one.display_name) == (MODEL, MODEL)
    page = client.models.list(limit=1)
    assert len(page.data) == 1 and page.has_more and page.last_id == page.data[0].id
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("no-such-model")


def test_errors_are_typed_by_the_client(client: anthropic.Anthropic, real_server: RunningServer) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="no-such-model", max_tokens=8, messages=QUESTION)
    assert missing.value.body == {"type": "error", "error": {"type": "not_found_error", "message": "model 'no-such-model' not found"}}
    with pytest.raises(anthropic.BadRequestError) as long:
        client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "word " * 3000}])
    assert long.value.body["error"]["type"] == "invalid_request_error"
    assert long.value.body["error"]["message"].startswith("prompt is too long: ")
    assert long.value.body["error"]["message"].endswith(" tokens > 2048 maximum")
    with pytest.raises(anthropic.BadRequestError, match=r"messages\[0\]\.content\[0\]\.type"):
        client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}])
    bare = httpx.post(real_server.url + "/v1/messages", json={"model": MODEL, "messages": QUESTION})
    assert bare.status_code == 400
    assert bare.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: field required"}}


# -- what agents send in 2026 (issue 27) ---------------------------------------------------

CITY = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"], "additionalProperties": False}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_output_config_format_is_enforced_by_the_grammar(client: anthropic.Anthropic, stream: bool) -> None:
    """The small model left to itself answers prose; the schema makes it JSON that fits."""
    body = {"output_config": {"format": {"type": "json_schema", "schema": CITY}, "effort": "low"}, "cache_control": {"type": "ephemeral"}, **GREEDY}
    if stream:
        with client.messages.stream(model=MODEL, max_tokens=64, messages=QUESTION, extra_body=body) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(model=MODEL, max_tokens=64, messages=QUESTION, extra_body=body)
    assert message.stop_reason == "end_turn", message
    import json

    jsonschema.validate(json.loads(message.content[0].text), CITY)  # type: ignore[union-attr]


def test_context_edits_and_tool_search_are_accepted(client: anthropic.Anthropic) -> None:
    """Claude Code-style history with a tool search tool, deferred tools and edits that
    clear old tool results and thinking: the model reads the edited conversation."""
    history: list[dict] = [{"role": "user", "content": "What is the weather in Paris?"}]
    for i in range(3):
        history += [
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "I should look.", "signature": "x"},
                                              {"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "Sunny, 21 C, light wind from the west. " * 8}]},
        ]  # fmt: skip
    edits = [{"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 1}, "keep": {"type": "tool_uses", "value": 1}},
             {"type": "clear_thinking_20251015"}]  # fmt: skip
    tools = [{"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}, {**WEATHER, "defer_loading": True}]
    message = client.messages.create(
        model=MODEL, max_tokens=16, messages=history, tools=tools,  # type: ignore[arg-type]
        extra_body={"context_management": {"edits": edits}, **GREEDY},
    )
    edited = client.messages.count_tokens(model=MODEL, messages=history, tools=tools)  # type: ignore[arg-type]
    assert prompt_tokens(message.usage) < edited.input_tokens - 100  # two results fewer
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=MODEL, max_tokens=8, messages=QUESTION,
                               extra_body={"context_management": {"edits": [{"type": "compact_20260112"}]}})  # fmt: skip
    assert "context_management.edits[0].type" in str(info.value)
