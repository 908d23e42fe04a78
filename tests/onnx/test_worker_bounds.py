"""What one request can no longer do to the ONNX worker and the requests beside it."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dragoman.adapters.canonical import ContentDelta, ErrorEvent, Finish, ResponseFormat, RoleStart
from dragoman.adapters.errors import Overloaded, RequestError
from dragoman.backends.onnx import OnnxBackend, worker_protocol as protocol
from tests.onnx.conftest import MODEL_NAME, ask, collect

pytestmark = pytest.mark.asyncio(loop_scope="module")
STORY = "Write a long story about a dragon."
MiB = 1024 * 1024


def rss(pid: int) -> int:
    """Resident bytes of a process (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def stream_tokens(backend: OnnxBackend, stamps: list[float], num_predict: int = 200) -> list[object]:
    events = []
    async for event in backend.chat(ask(STORY, num_predict=num_predict)):
        events.append(event)
        if isinstance(event, ContentDelta):
            stamps.append(time.monotonic())
    return events


async def test_a_stopped_worker_is_detected_and_replaced(make_backend: Callable[..., OnnxBackend]) -> None:
    fragile = make_backend(stall_timeout=4)  # short for the test, long for a loaded machine
    try:
        stream = fragile.chat(ask(STORY, num_predict=300))
        assert isinstance(await stream.__anext__(), RoleStart)
        pid = fragile.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        began = time.monotonic()
        events = [event async for event in stream]
        assert isinstance(events[-1], ErrorEvent) and events[-1].status == 502
        assert "stopped responding" in events[-1].message and time.monotonic() - began < 10
        again = await collect(fragile.chat(ask("What is the capital of France?", num_predict=8)))
        assert "Paris" in "".join(e.text for e in again if isinstance(e, ContentDelta))
        assert fragile.worker_pid not in (None, pid)
    finally:
        await fragile.aclose()


async def test_an_oversized_command_is_refused_and_the_worker_lives(
    backend: OnnxBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = backend.worker_pid
    monkeypatch.setattr(protocol, "MAX_FRAME", 4096)  # the server's side only
    with pytest.raises(RequestError) as info:
        await collect(backend.chat(ask("word " * 2000, num_predict=2)))
    assert info.value.status == 413 and "frame limit" in info.value.message
    monkeypatch.undo()
    assert backend.worker_pid == pid
    assert isinstance((await collect(backend.chat(ask("Hi", num_predict=2))))[-1], Finish)


async def test_an_explicit_unload_waits_for_running_streams(make_backend: Callable[..., OnnxBackend]) -> None:
    shared = make_backend(keep_alive=300)
    try:
        await shared.load(MODEL_NAME, None)
        stamps: list[list[float]] = [[], [], []]
        streams = [asyncio.create_task(stream_tokens(shared, s, num_predict=30)) for s in stamps]
        while not all(stamps):
            await asyncio.sleep(0.02)
        unload = asyncio.create_task(shared.unload(MODEL_NAME))
        await asyncio.sleep(0.05)
        with pytest.raises(Overloaded) as info:
            await collect(shared.chat(ask("Hi", num_predict=2)))
        assert info.value.retry_after == 1 and "being unloaded" in info.value.message
        assert not unload.done()
        for events in await asyncio.gather(*streams):
            assert isinstance(events[-1], Finish) and events[-1].usage.completion_tokens == 30  # none cut
        await asyncio.wait_for(unload, 10)
        assert shared.worker_pid is None and shared.loaded() == []
        assert isinstance((await collect(shared.chat(ask("Hi", num_predict=2))))[-1], Finish)  # open again
    finally:
        await shared.aclose()


async def test_keep_alive_zero_unloads_after_the_last_stream(make_backend: Callable[..., OnnxBackend]) -> None:
    shared = make_backend(keep_alive=300)
    try:
        long = asyncio.create_task(stream_tokens(shared, [], num_predict=60))
        while shared.worker_pid is None:
            await asyncio.sleep(0.02)
        brief = ask("Hi", num_predict=2)
        brief.keep_alive = 0
        await collect(shared.chat(brief))  # ends first; the long stream is not cut
        assert shared.worker_pid is not None
        events = await long
        assert isinstance(events[-1], Finish)
        for _ in range(100):
            if shared.worker_pid is None:
                break
            await asyncio.sleep(0.05)
        assert shared.worker_pid is None  # keep_alive 0 of the latest arrival, not the last to finish
    finally:
        await shared.aclose()


async def test_a_grammar_too_costly_to_compile_is_refused_while_others_stream(
    make_backend: Callable[..., OnnxBackend],
) -> None:
    """allOf of 20 '.*x.*' patterns: llguidance's emptiness check of their intersection
    grows without bound (37 s and 2.3 GB in-process). The checker process hits its
    memory limit and the request is a 400; the worker's memory stays put and the
    stream beside it goes on."""
    bounded = make_backend(grammar_timeout=4, grammar_memory=256 * MiB)
    try:
        await collect(bounded.chat(ask("Hi", num_predict=1)))
        pid = bounded.worker_pid
        assert pid is not None
        before = rss(pid)
        stamps: list[float] = []
        other = asyncio.create_task(stream_tokens(bounded, stamps, num_predict=400))
        while not stamps:
            await asyncio.sleep(0.02)
        schema = {"allOf": [{"type": "string", "pattern": f".*{c}.*"} for c in "abcdefghijklmnopqrst"]}
        asked = time.monotonic()
        hostile = asyncio.create_task(
            collect(bounded.chat(ask("Hi", num_predict=8, response_format=ResponseFormat("json_schema", schema))))
        )
        await asyncio.sleep(0.3)
        # A request without a grammar does not wait behind that compilation.
        assert isinstance((await collect(bounded.chat(ask("Hi", num_predict=2))))[-1], Finish)
        assert not hostile.done()
        with pytest.raises(RequestError) as info:
            await hostile
        answered = time.monotonic()
        assert info.value.status == 400 and "simplify the schema" in info.value.message
        assert answered - asked < 4 + 10  # the deadline, and starting the checker on a loaded machine
        during = [t for t in stamps if asked <= t <= answered]
        assert len(during) >= 10, len(during)  # the other stream kept receiving tokens
        assert rss(pid) - before < 150 * MiB
        assert bounded.worker_pid == pid
        other.cancel()
    finally:
        await bounded.aclose()


async def test_a_grammar_that_breaks_mid_reply_is_a_400_not_a_500(backend: OnnxBackend) -> None:
    """An anyOf of 3,000 objects compiles, then passes llguidance's 2,000-item row limit
    at the second token (the proxy's static budget refuses it before; here the backend
    is asked directly)."""
    schema = {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}
                        for i in range(3000)]}  # fmt: skip
    events = await collect(backend.chat(ask("Hi", num_predict=16, response_format=ResponseFormat("json_schema", schema))))
    assert isinstance(events[-1], ErrorEvent) and events[-1].status == 400
    assert "constraint" in events[-1].message and "Traceback" not in events[-1].message
    assert isinstance((await collect(backend.chat(ask("Hi", num_predict=2))))[-1], Finish)


async def test_a_long_prompt_shares_the_step_loop(backend: OnnxBackend) -> None:
    """Prompt evaluation goes in chunks between the other requests' tokens: a stream
    keeps receiving tokens while a 500-token prompt is evaluated (before: none)."""
    stamps: list[float] = []
    other = asyncio.create_task(stream_tokens(backend, stamps, num_predict=400))
    while not stamps:
        await asyncio.sleep(0.02)
    long_prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * 52)
    asked = time.monotonic()
    events = backend.chat(ask(long_prompt, num_predict=1))
    assert isinstance(await events.__anext__(), RoleStart)
    pending = asyncio.ensure_future(events.__anext__())
    # A short prompt arriving meanwhile is evaluated first (fewest tokens left).
    short = await collect(backend.chat(ask("Hi", num_predict=2)))
    assert isinstance(short[-1], Finish) and not pending.done()
    first = await pending
    first_at = time.monotonic()
    rest = [e async for e in events]
    finish = rest[-1] if rest else first
    assert isinstance(finish, Finish) and finish.usage.prompt_tokens > 450
    during = [t for t in stamps if asked <= t <= first_at]
    assert len(during) >= 10, (len(during), first_at - asked)
    other.cancel()


async def test_a_prompt_without_tokens_is_a_400_and_the_stream_beside_it_goes_on(
    make_backend: Callable[..., OnnxBackend],
) -> None:
    """A chat template can render nothing (here, for a message "nothing"). The batch
    engine's pass over zero tokens failed (GroupQueryAttention: total_sequence_length
    must be positive) and took every stream of the model with it."""
    template = (
        "{% for m in messages %}{% if m.content != 'nothing' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endif %}{% endfor %}{% if add_generation_prompt and messages[-1].content != 'nothing' %}<|im_start|>assistant\n{% endif %}"
    )
    backend = make_backend(template=template)  # the refusal is the preparation's: both engines
    try:
        alone = await collect(backend.chat(ask(STORY, num_predict=200)))
        beside = asyncio.create_task(collect(backend.chat(ask(STORY, num_predict=200))))
        while not backend.counters["started"] >= 2:
            await asyncio.sleep(0.01)
        with pytest.raises(RequestError, match="the prompt is empty") as refused:
            await collect(backend.chat(ask("nothing", num_predict=8)))
        assert refused.value.param == "messages" and refused.value.status == 400
        together = await beside
        assert isinstance(together[-1], Finish), together[-1]
        text = ["".join(e.text for e in events if isinstance(e, ContentDelta)) for events in (alone, together)]
        assert text[0] and text[0] == text[1]
    finally:
        await backend.aclose()
