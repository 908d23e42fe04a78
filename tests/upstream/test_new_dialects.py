"""The anthropic backend and the openai backend with ``api: responses``, against recorded
transcripts on real HTTP: every client dialect gets text, thinking and tool calls, and
the upstream gets a request in its own dialect."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.support.clients import ANTHROPIC_TOOLS, CLIENTS, TOOL_FINISH, TOOLS
from tests.support.replay import ReplayServer
from tests.support.server import RunningServer
from tests.upstream.conftest import user

CALLS = [("get_weather", {"city": "Paris", "unit": "celsius"}), ("get_time", {"tz": "Europe/Paris"})]
THINKING = {
    "an-tools": "The user wants weather and time for Paris: two tools.",
    "rs-tools": "**Checking two things**\n\nWeather and time for Paris.",
}
TEXT = {"an-tools": "Let me check both.", "rs-tools": ""}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("model", ["an-tools", "rs-tools"])
def test_every_client_gets_thinking_text_and_calls(gateway: RunningServer, model: str, client: str, stream: bool) -> None:
    got = CLIENTS[client](gateway, model, "hi", stream)
    assert got == {"text": TEXT[model], "thinking": THINKING[model], "calls": CALLS, "finish": TOOL_FINISH[client]}


@pytest.mark.parametrize("model", ["an-text", "rs-text"])
def test_text_and_usage(gateway: RunningServer, model: str) -> None:
    reply = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0).chat.completions.create(
        model=model, messages=user()
    )
    assert reply.choices[0].message.content == "The capital of France is Paris."
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == ((25, 9) if model == "an-text" else (21, 9))


def test_stop_sequence_and_limits_reach_each_dialect(gateway: RunningServer) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0)
    stopped = client.messages.create(model="an-stop", max_tokens=64, messages=user(), stop_sequences=["4"])
    assert (stopped.stop_reason, stopped.stop_sequence, stopped.content[0].text) == ("stop_sequence", "4", "1, 2, 3")
    oa = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
    assert oa.chat.completions.create(model="an-max", messages=user()).choices[0].finish_reason == "length"
    assert oa.chat.completions.create(model="rs-incomplete", messages=user()).choices[0].finish_reason == "length"
    incomplete = oa.responses.create(model="an-max", input="hi")
    assert incomplete.status == "incomplete" and incomplete.output_text == "Once upon"


def test_upstream_failures(gateway: RunningServer) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0)
    with pytest.raises(anthropic.OverloadedError):
        client.messages.create(model="an-529", max_tokens=8, messages=user())
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        with client.messages.stream(model="an-midstream", max_tokens=8, messages=user()) as events:
            events.get_final_message()
    r = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "an-400", "messages": user()})
    assert r.status_code == 400 and r.json()["error"]["message"] == "temperature: range: 0..1"
    oa = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="not supported with this model"):
        oa.chat.completions.create(model="rs-400", messages=user())
    with pytest.raises(openai.APIError, match="server had an error"):
        list(oa.chat.completions.create(model="rs-failed", messages=user(), stream=True))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("model", ["an-deep", "an-deep-whole", "rs-deep", "rs-deep-whole"])
def test_a_reply_nested_past_the_decoder_is_the_upstreams_502(gateway: RunningServer, model: str, stream: bool) -> None:
    """Was a RecursionError out of the parser, answered as the client's own body nested too deeply (400)."""
    r = httpx.post(gateway.url + "/v1/chat/completions", json={"model": model, "messages": user(), "stream": stream}, timeout=30)
    if r.status_code == 200:  # the stream had begun: its last event says so
        assert stream and "upstream sent" in r.text and "nested too deeply" in r.text, r.text[-300:]
        return
    assert r.status_code == 502, r.text[:300]
    assert "upstream sent" in r.json()["error"]["message"] and "nested too deeply" in r.json()["error"]["message"]


def test_a_count_nested_past_the_decoder_is_the_upstreams_502(gateway: RunningServer) -> None:
    r = httpx.post(gateway.url + "/v1/messages/count_tokens", json={"model": "an-count-deep", "messages": user()}, timeout=30)
    assert r.status_code == 502, r.text[:300]
    assert "sent a count nested too deeply to decode" in r.json()["error"]["message"]


def test_anthropic_upstream_request(gateway: RunningServer, anthropic_upstream: ReplayServer) -> None:
    """An OpenAI client's conversation with a tool round trip, as Anthropic wants it."""
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    ]  # fmt: skip
    httpx.post(gateway.url + "/v1/chat/completions", json={
        "model": "an-text", "messages": messages, "tools": TOOLS, "tool_choice": "required",
        "parallel_tool_calls": False, "reasoning_effort": "low", "temperature": 0.5, "seed": 3,
    }).raise_for_status()  # fmt: skip
    sent = anthropic_upstream.requests_for("an-text")[-1]
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.headers["anthropic-version"] == "2023-06-01" and "authorization" not in sent.headers
    body = sent.json()
    assert body["system"] == "Be brief." and body["max_tokens"] == 4096 and body["temperature"] == 0.5
    assert "seed" not in body  # Anthropic has no seed: dropped and logged
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": [{"type": "text", "text": "Sunny"}]}]},
    ]  # fmt: skip
    assert body["tools"][0] == {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048} and body["stream"] is False


def test_anthropic_signatures_go_back_only_when_anthropic_made_them(gateway: RunningServer, anthropic_upstream: ReplayServer) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0)
    first = client.messages.create(model="an-tools", max_tokens=1024, messages=user(), tools=ANTHROPIC_TOOLS)
    results = [{"type": "tool_result", "tool_use_id": b.id, "content": "ok"} for b in first.content if b.type == "tool_use"]
    history = [*user(), {"role": "assistant", "content": first.content}, {"role": "user", "content": results}]
    client.messages.create(model="an-text", max_tokens=64, messages=history, tools=ANTHROPIC_TOOLS)
    assistant = anthropic_upstream.requests_for("an-text")[-1].json()["messages"][1]["content"]
    assert assistant[0]["type"] == "thinking" and assistant[0]["signature"] == first.content[0].signature
    assert [b["id"] for b in assistant if b["type"] == "tool_use"] == [r["tool_use_id"] for r in results]


def test_responses_upstream_request(gateway: RunningServer, responses_upstream: ReplayServer) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0)
    client.messages.create(
        model="rs-text", max_tokens=100, system="Be brief.", tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "tool", "name": "get_time"},
        messages=[{"role": "user", "content": "time?"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "noon"}]}],
    )  # fmt: skip
    sent = responses_upstream.requests_for("rs-text")[-1]
    assert sent.path == "/v1/responses"
    body = sent.json()
    assert body["instructions"] == "Be brief." and body["store"] is False and body["max_output_tokens"] == 100
    assert body["input"] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "time?"}]},
        {"type": "function_call", "call_id": "toolu_1", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "noon"},
    ]
    assert body["tool_choice"] == {"type": "function", "name": "get_time"}
    assert body["tools"][1] == {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}


def test_stop_sequences_cannot_reach_a_responses_upstream(gateway: RunningServer) -> None:
    r = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "rs-text", "messages": user(), "stop": ["x"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop"


def test_count_tokens_is_asked_of_the_upstream(gateway: RunningServer, anthropic_upstream: ReplayServer) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0)
    assert client.messages.count_tokens(model="an-count", messages=user(), system="S").input_tokens == 2095
    sent = anthropic_upstream.requests_for("an-count")[-1]
    assert sent.path == "/v1/messages/count_tokens" and sent.json() == {
        "model": "an-count", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "system": "S",
    }  # fmt: skip


def test_logprobs_are_refused_for_an_anthropic_upstream(gateway: RunningServer) -> None:
    r = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "an-text", "messages": user(), "logprobs": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
