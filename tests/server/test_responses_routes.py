"""``/v1/responses`` over real HTTP against the scripted backend: the raw typed stream,
what the official client accumulates, failures, built-in tools and the stored state."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer
from tests.support.sse import named_events

TOOLS = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in ("get_weather", "get_time")]


def ask(script: str, **fields: Any) -> dict[str, Any]:
    return {"model": "scripted", "input": f"script:{script}"} | fields


def sse(server: RunningServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", server.url + "/v1/responses", json=body | {"stream": True}) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        raw = reply.read().decode()
    return [data for _, data in named_events(raw)]


@pytest.fixture(scope="module")
def client(scripted_server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=scripted_server.url + "/v1", api_key="x", max_retries=0)


def test_raw_stream_of_thinking_and_text(scripted_server: RunningServer) -> None:
    events = sse(scripted_server, ask("think"))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["usage"]["input_tokens"] == 7


@pytest.mark.parametrize("script", ["tools", "fragments"])
def test_function_calls_accumulate(client: openai.OpenAI, script: str) -> None:
    with client.responses.stream(**ask(script, tools=TOOLS)) as stream:
        argument_deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    calls = [(i.name, json.loads(i.arguments)) for i in final.output if i.type == "function_call"]
    expected = {"tools": [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})],
                "fragments": [("get_weather", {"city": "Oslo"}), ("get_time", {"tz": "UTC"})]}[script]  # fmt: skip
    assert calls == expected
    if script == "fragments":
        assert argument_deltas == ['{"ci', 'ty": "Oslo"}', '{"tz": ', '"UTC"}']
    whole = client.responses.create(**ask(script, tools=TOOLS))
    assert [(i.name, json.loads(i.arguments)) for i in whole.output] == expected


def test_thinking_round_trips_through_encrypted_content(client: openai.OpenAI, scripted_server: RunningServer) -> None:
    """Codex's way: store false, the reasoning handed back as it came."""
    first = client.responses.create(**ask("think", store=False, include=["reasoning.encrypted_content"]))
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    history = [reasoning.model_dump(exclude_none=True, exclude={"content"}), first.output[1].model_dump(exclude_none=True)]
    client.responses.create(model="scripted", store=False, input=[{"role": "user", "content": "q"}, *history, {"role": "user", "content": "hi"}])
    # the scripted backend saw the thinking again, read from the token alone
    assistant = ScriptedBackend.last_request.messages[1]
    assert (assistant.role, assistant.thinking, assistant.text) == ("assistant", "Let me think. ", "Done.")


def test_failure_mid_stream_is_response_failed(scripted_server: RunningServer) -> None:
    events = sse(scripted_server, ask("fail-midstream"))
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "scripted failure after streaming began"}
    assert events[-1]["sequence_number"] == len(events) - 1


def test_failures_before_output_are_statuses(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as before:
        client.responses.create(**ask("fail-before"))
    assert before.value.status_code == 502
    with pytest.raises(openai.APIStatusError) as busy:
        client.responses.create(**ask("busy"))
    assert busy.value.status_code == 503 and busy.value.response.headers["retry-after"] == "2"


def test_builtin_tools_are_left_out_but_cannot_be_forced(client: openai.OpenAI) -> None:
    web = {"type": "web_search"}
    assert client.responses.create(**ask("hi", tools=[*TOOLS, web])).output_text == "Hello, world"
    assert [t.name for t in ScriptedBackend.last_request.tools] == ["get_weather", "get_time"]
    with pytest.raises(openai.BadRequestError, match="built-in tool 'web_search'"):
        client.responses.create(**ask("hi", tools=[web], tool_choice={"type": "web_search"}))


def test_store_and_input_items(client: openai.OpenAI, scripted_server: RunningServer) -> None:
    first = client.responses.create(**ask("hi"))
    second = client.responses.create(model="scripted", input="script:hi", previous_response_id=first.id)
    listed = client.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in listed.data] == ["message", "message", "message"]
    ids = [item.id for item in listed.data]
    assert len(set(ids)) == 3 and all(ids)
    after = client.responses.input_items.list(second.id, order="asc", after=ids[0])
    assert [item.id for item in after.data] == ids[1:]
    assert httpx.get(scripted_server.url + f"/v1/responses/{second.id}/input_items?limit=500").status_code == 400
    deleted = httpx.delete(scripted_server.url + f"/v1/responses/{first.id}")
    assert deleted.json() == {"id": first.id, "object": "response", "deleted": True}
    missing = httpx.delete(scripted_server.url + f"/v1/responses/{first.id}")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "response_not_found"
    assert httpx.get(scripted_server.url + f"/v1/responses/{second.id}?stream=true").status_code == 400
