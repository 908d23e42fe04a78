"""``tool_choice: required`` or a named function through an Ollama upstream, which has
no such field: forwarded as an extension (a dragoman upstream honours it), and the
reply checked, so that it never silently becomes ``auto``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest

from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    RoleStart,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    ToolChoice,
)
from dragoman.backends.upstream.tool_choice import ToolChoiceNotHonoured, require_tool_call
from tests.support.replay import ReplayServer
from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer, config_from_yaml, serve

WEATHER = ToolCallDone(ToolCall(name="get_weather", arguments={"city": "Paris"}))
REQUIRED, NAMED = ToolChoice(mode="required"), ToolChoice(mode="function", name="get_weather")


async def run(events: list[Event], choice: ToolChoice) -> list[Event]:
    async def source() -> AsyncIterator[Event]:
        for event in events:
            yield event

    return [event async for event in require_tool_call(source(), choice, "upstream u (ollama)")]


PASSES = [
    ("a call releases what was held", REQUIRED, [RoleStart(), ContentDelta("ok"), WEATHER, Finish()]),
    ("the named call", NAMED, [RoleStart(), WEATHER, Finish()]),
    ("a fragment counts once its name is right", NAMED,
     [RoleStart(), ToolCallFragment(0, "", name="get_weather"), ToolCallFragment(0, "{}"), Finish()]),
    ("an upstream error passes through", REQUIRED, [RoleStart(), ErrorEvent("boom", status=500)]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "choice", "events"), PASSES, ids=[c[0] for c in PASSES])
async def test_replies_that_honour_tool_choice_pass_unchanged(name: str, choice: ToolChoice, events: list[Event]) -> None:
    assert await run(events, choice) == events


REFUSALS = [
    ("no call at all", REQUIRED, [RoleStart(), ContentDelta("It is sunny."), Finish()], "without calling a tool"),
    ("another function", NAMED, [RoleStart(), ToolCallDone(ToolCall(name="get_time")), Finish()], "called 'get_time'"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "choice", "events", "words"), REFUSALS, ids=[c[0] for c in REFUSALS])
async def test_replies_against_tool_choice_are_an_error_before_anything_is_sent(
    name: str, choice: ToolChoice, events: list[Event], words: str
) -> None:
    with pytest.raises(ToolChoiceNotHonoured) as info:
        await run(events, choice)
    assert info.value.status == 502 and words in info.value.message and "upstream u (ollama)" in info.value.message


async def test_a_wrong_call_after_the_right_one_is_an_error_event() -> None:
    events = await run([RoleStart(), WEATHER, ToolCallDone(ToolCall(name="get_time")), Finish()], NAMED)
    assert events[:2] == [RoleStart(), WEATHER]
    assert isinstance(events[2], ErrorEvent) and "called 'get_time'" in events[2].message and len(events) == 3


# -- over HTTP, against recorded Ollama replies and a dragoman upstream ----------------------


@pytest.fixture(scope="module")
def gateway(ollama_upstream: ReplayServer, scripted_server: RunningServer) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - {{name: prose, backend: ollama, base_url: "{ollama_upstream.url}", model: ol-thinking}}
          - {{name: calls, backend: ollama, base_url: "{ollama_upstream.url}", model: ol-tools}}
          - {{name: dragoman, backend: ollama, base_url: "{scripted_server.url}", model: scripted}}
        """
    )
    with serve(config) as server:
        yield server


TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
         for n in ("get_weather", "get_time")]  # fmt: skip


def ask(model: str, tool_choice: Any, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS,
            "tool_choice": tool_choice, **extra}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_ollama_upstream_answering_in_prose_is_502_naming_it(
    gateway: RunningServer, ollama_upstream: ReplayServer, stream: bool
) -> None:
    before = len(ollama_upstream.received)
    reply = httpx.post(gateway.url + "/v1/chat/completions", json=ask("prose", "required", stream=stream), timeout=10)
    assert reply.status_code == 502
    message = reply.json()["error"]["message"]
    assert "(ollama) answered without calling a tool although tool_choice is 'required'" in message
    assert ollama_upstream.url.removeprefix("http://") in message
    assert ollama_upstream.received[before].json()["tool_choice"] == "required"  # forwarded all the same


def test_a_named_function_the_upstream_did_not_call_is_502(gateway: RunningServer, ollama_upstream: ReplayServer) -> None:
    choice = {"type": "function", "function": {"name": "get_time"}}
    before = len(ollama_upstream.received)
    reply = httpx.post(gateway.url + "/v1/chat/completions", json=ask("calls", choice), timeout=10)
    assert reply.status_code == 502 and "called 'get_weather'" in reply.json()["error"]["message"]
    sent = ollama_upstream.received[before].json()
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_time"]  # only the named one offered


def test_an_ollama_upstream_that_calls_passes(gateway: RunningServer) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(**ask("calls", "required"))
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["get_weather", "get_time"]


def test_a_dragoman_upstream_receives_tool_choice(gateway: RunningServer) -> None:
    body = {**ask("dragoman", {"type": "function", "function": {"name": "get_weather"}}), "stream": False}
    body["messages"] = [{"role": "user", "content": "script:tools"}]
    httpx.post(gateway.url + "/api/chat", json=body, timeout=10)
    assert ScriptedBackend.last_request is not None
    assert ScriptedBackend.last_request.tool_choice == ToolChoice(mode="function", name="get_weather")
