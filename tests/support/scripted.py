"""A test-only backend that plays scripted event sequences — for the failures a real
model cannot produce on demand (a crash mid-stream, an error before the first token,
a slow stream to disconnect from). Never shipped, never in a shipped config.

The script is chosen by the last user message (a completion's prompt): ``script:<name>``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import msgspec

from dragoman.adapters.canonical import (
    ChatRequest,
    CompletionRequest,
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    Request,
    RoleStart,
    ThinkingDelta,
    Timings,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    Usage,
)
from dragoman.adapters.errors import BackendError, Overloaded
from dragoman.backends.base import Capabilities, LoadedModel, ModelDetails
from dragoman.config import ModelRoute


_stream_numbers = itertools.count()


class ScriptedSettings(msgspec.Struct, forbid_unknown_fields=True):
    delay: float = 0.0  # seconds between events of the "slow" script
    prefill: float = 1.0  # seconds the "prefill" script is silent after its start
    tools: bool = True
    vision: bool = True


class ScriptedBackend:
    Settings = ScriptedSettings

    # What tests observe, shared by the instances a server builds (a test cannot reach
    # them) and emptied before each test by reset(), from tests/support/isolation.py.
    started: list[str] = []
    cancelled: list[str] = []
    produced: dict[str, int] = {}
    last_request: Request | None = None

    @classmethod
    def reset(cls) -> None:
        cls.started, cls.cancelled, cls.produced, cls.last_request = [], [], {}, None

    @classmethod
    def ran(cls, text: str) -> bool:
        """Whether a request whose last message (or prompt) was ``text`` reached the
        backend, i.e. a handler ran for it."""
        return any(key.startswith(text + "#") for key in cls.started)

    def __init__(self, route: ModelRoute) -> None:
        self.route = route
        self.settings: ScriptedSettings = route.settings  # type: ignore[assignment]
        self._loaded: set[str] = set()

    def capabilities(self, model: str) -> Capabilities:
        return Capabilities(tools=self.settings.tools, vision=self.settings.vision, thinking=True, json_schema=True, logprobs=False, insert=True)

    def details(self, model: str) -> ModelDetails:
        return ModelDetails(format="script", family="scripted", parameter_size="0", size=1)

    async def load(self, model: str, keep_alive: float | None) -> None:
        self._loaded.add(model)

    async def unload(self, model: str) -> None:
        self._loaded.discard(model)

    def loaded(self) -> list[LoadedModel]:
        return [LoadedModel(name=n, size=1) for n in sorted(self._loaded)]

    async def list_models(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        self._loaded.clear()

    def chat(self, request: ChatRequest) -> AsyncIterator[Event]:
        return self._run(request.messages[-1].text if request.messages else "", request)

    def complete(self, request: CompletionRequest) -> AsyncIterator[Event]:
        return self._run(request.prompt, request)

    async def _run(self, text: str, request: Request) -> AsyncIterator[Event]:
        type(self).last_request = request
        script = text.removeprefix("script:")
        # Never reused: a stream an earlier test left running must not count as this test's.
        key = f"{script}#{next(_stream_numbers)}"
        type(self).started.append(key)
        produced = type(self).produced
        produced[key] = 0
        try:
            async for event in self._play(script, request):
                if isinstance(event, ContentDelta):
                    produced[key] += 1
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            type(self).cancelled.append(key)
            raise

    async def _play(self, script: str, request: Request) -> AsyncIterator[Event]:
        if script == "fail-before":
            raise BackendError("scripted backend failure before any output")
        if script == "busy":
            raise Overloaded("model is busy; try again", retry_after=2)
        yield RoleStart()
        if script == "fail-midstream":
            yield ContentDelta("partial ")
            yield ErrorEvent("scripted failure after streaming began", status=502)
            return
        if script == "crash-midstream":
            yield ContentDelta("partial ")
            raise RuntimeError("scripted crash")
        if script == "think":
            yield ThinkingDelta("Let me think. ")
            yield ContentDelta("Done.")
        elif script == "tools":
            yield ToolCallDone(ToolCall(name="get_weather", arguments={"city": "Paris"}, id="call_a", index=0))
            yield ToolCallDone(ToolCall(name="get_time", arguments={"tz": "CET"}, id="call_b", index=1))
        elif script == "fragments":
            yield ToolCallFragment(index=0, id="call_x", name="get_weather", arguments='{"ci')
            yield ToolCallFragment(index=0, arguments='ty": "Oslo"}')
            yield ToolCallFragment(index=1, id="call_y", name="get_time", arguments='{"tz": ')
            yield ToolCallFragment(index=1, arguments='"UTC"}')
        elif script == "slow":
            for i in range(200):
                await asyncio.sleep(self.settings.delay or 0.02)
                yield ContentDelta(f"tick{i} ")
        elif script == "prefill":  # a long prompt being read: started, then nothing for a while
            await asyncio.sleep(self.settings.prefill)
            yield ContentDelta("read it")
        elif script == "length":
            yield ContentDelta("cut short")
            yield Finish(reason="length", usage=Usage(5, 2))
            return
        else:
            yield ContentDelta("Hello")
            yield ContentDelta(", world")
        yield Finish(reason="stop", usage=Usage(prompt_tokens=7, completion_tokens=3), timings=Timings(total_ns=1000))
