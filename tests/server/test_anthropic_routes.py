"""``/v1/messages`` over real HTTP against the scripted backend: the raw SSE sequence,
what the official client accumulates from it, failures, auth and the listing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.server import RunningServer, config_from_yaml, serve
from tests.support.sse import named_events

anthropic = pytest.importorskip("anthropic", reason="the test extra installs the official anthropic client")

TOOLS = [{"name": n, "input_schema": {"type": "object"}} for n in ("get_weather", "get_time")]


def ask(script: str, **fields: Any) -> dict[str, Any]:
    return {"model": "scripted", "max_tokens": 64, "messages": [{"role": "user", "content": f"script:{script}"}]} | fields


def sse(server: RunningServer, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The stream exactly as sent: (event name, data) per SSE event."""
    with httpx.stream("POST", server.url + "/v1/messages?beta=true", json=body | {"stream": True}) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        raw = reply.read().decode()
    return named_events(raw)


@pytest.fixture(scope="module")
def client(scripted_server: RunningServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=scripted_server.url, api_key="x", max_retries=0)


def test_raw_sequence_thinking_then_text(scripted_server: RunningServer) -> None:
    events = sse(scripted_server, ask("think"))
    assert [name for name, _ in events] == [
        "message_start", "ping",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    assert [d["delta"]["type"] for n, d in events if n == "content_block_delta"] == [
        "thinking_delta", "signature_delta", "text_delta",
    ]  # fmt: skip
    assert events[-2][1]["usage"] == {"output_tokens": 3, "input_tokens": 7, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def test_client_accumulates_thinking_and_signature(client: anthropic.Anthropic) -> None:
    with client.messages.stream(**ask("think")) as stream:
        final = stream.get_final_message()
    thinking, text = final.content
    assert (thinking.type, thinking.thinking, text.text) == ("thinking", "Let me think. ", "Done.")
    assert thinking.signature  # clients hand it back in the next turn
    whole = client.messages.create(**ask("think"))
    assert whole.content[0].signature == thinking.signature
    # ...and it is accepted back in history
    again = client.messages.create(**ask("hi") | {"messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": whole.content}, {"role": "user", "content": "hi"},
    ]})  # fmt: skip
    assert again.content[0].text == "Hello, world"


@pytest.mark.parametrize("script", ["tools", "fragments"])
def test_tool_calls_whole_or_fragmented(client: anthropic.Anthropic, scripted_server: RunningServer, script: str) -> None:
    with client.messages.stream(**ask(script, tools=TOOLS)) as stream:
        final = stream.get_final_message()
    calls = [(b.name, b.input) for b in final.content if b.type == "tool_use"]
    expected = {"tools": [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})],
                "fragments": [("get_weather", {"city": "Oslo"}), ("get_time", {"tz": "UTC"})]}[script]  # fmt: skip
    assert calls == expected and final.stop_reason == "tool_use"
    assert all(b.id.startswith("toolu_") for b in final.content)
    whole = client.messages.create(**ask(script, tools=TOOLS))
    assert [(b.name, b.input) for b in whole.content] == expected
    if script == "fragments":  # the pieces arrive as partial JSON, as from Anthropic
        partial = [d["delta"]["partial_json"] for n, d in sse(scripted_server, ask(script, tools=TOOLS)) if n == "content_block_delta"]
        assert partial == ['{"ci', 'ty": "Oslo"}', '{"tz": ', '"UTC"}']


def test_error_after_the_stream_began(scripted_server: RunningServer, client: anthropic.Anthropic) -> None:
    events = sse(scripted_server, ask("fail-midstream"))
    assert events[-1] == ("error", {"type": "error", "error": {"type": "api_error", "message": "scripted failure after streaming began"}})
    assert "message_stop" not in [n for n, _ in events]
    with pytest.raises(anthropic.APIStatusError, match="scripted crash"):
        with client.messages.stream(**ask("crash-midstream")) as stream:
            stream.get_final_message()


def test_overloaded_is_529(client: anthropic.Anthropic, scripted_server: RunningServer) -> None:
    with pytest.raises(anthropic.OverloadedError) as info:
        client.messages.create(**ask("busy"))
    assert info.value.status_code == 529 and info.value.response.headers["retry-after"] == "2"
    assert info.value.body["error"]["type"] == "overloaded_error"


def test_failure_before_output_is_a_real_status(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.InternalServerError) as info:
        client.messages.create(**ask("fail-before"))
    assert info.value.status_code == 502 and info.value.body["error"]["type"] == "api_error"


def test_length_is_max_tokens(client: anthropic.Anthropic) -> None:
    assert client.messages.create(**ask("length")).stop_reason == "max_tokens"


def test_count_tokens_needs_a_tokenizer(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="cannot count tokens"):
        client.messages.count_tokens(model="scripted", messages=[{"role": "user", "content": "hi"}])


def test_refusals_in_anthropic_shape(scripted_server: RunningServer) -> None:
    r = httpx.post(scripted_server.url + "/v1/messages", json=ask("hi", tools=TOOLS) | {"model": "no-tools"})
    assert r.status_code == 400 and r.json()["error"] == {"type": "invalid_request_error", "message": "model 'no-tools' does not support tools"}
    r = httpx.post(scripted_server.url + "/v1/messages", content=b"{not json")
    assert r.status_code == 400 and r.json()["type"] == "error" and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.get(scripted_server.url + "/v1/messages/nowhere")
    assert r.status_code in (404, 405) and r.json()["type"] == "error"
    r = httpx.get(scripted_server.url + "/v1/nowhere", headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.get(scripted_server.url + "/v1/nowhere")  # without the header, OpenAI's shape
    assert r.status_code == 404 and "type" not in r.json()


def test_openai_listing_without_anthropic_version(scripted_server: RunningServer) -> None:
    listing = httpx.get(scripted_server.url + "/v1/models").json()
    assert listing["object"] == "list" and "scripted" in [m["id"] for m in listing["data"]]
    anthropic_listing = httpx.get(scripted_server.url + "/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert set(anthropic_listing) == {"data", "has_more", "first_id", "last_id"}
    assert httpx.get(scripted_server.url + "/v1/models?limit=0", headers={"anthropic-version": "2023-06-01"}).status_code == 400


@pytest.fixture(scope="module")
def guarded() -> Iterator[RunningServer]:
    config = config_from_yaml(
        """\
        server:
          api_keys: "key-a"
        models:
          - name: scripted
            backend: tests.support.scripted:ScriptedBackend
        """
    )
    with serve(config) as server:
        yield server


def test_x_api_key_is_accepted_on_every_route(guarded: RunningServer) -> None:
    good = anthropic.Anthropic(base_url=guarded.url, api_key="key-a", max_retries=0)
    assert good.messages.create(**ask("hi")).content[0].text == "Hello, world"
    assert good.models.list().data[0].id == "scripted"
    bearer = anthropic.Anthropic(base_url=guarded.url, auth_token="key-a", max_retries=0)
    assert bearer.messages.create(**ask("hi")).content[0].text == "Hello, world"
    with pytest.raises(anthropic.AuthenticationError) as info:
        anthropic.Anthropic(base_url=guarded.url, api_key="wrong", max_retries=0).messages.create(**ask("hi"))
    assert info.value.body == {"type": "error", "error": {"type": "authentication_error", "message": "invalid API key"}}
    # The key is read one way on every route (llama-server's clients send x-api-key too).
    chat = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(guarded.url + "/v1/chat/completions", headers={"x-api-key": "key-a"}, json=chat)
    assert r.status_code == 200
    r = httpx.post(guarded.url + "/v1/chat/completions", headers={"x-api-key": "wrong"}, json=chat)
    assert r.status_code == 401 and r.json()["error"]["message"] == "invalid API key"
