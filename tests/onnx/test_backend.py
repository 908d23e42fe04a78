"""The ONNX backend end to end with the real SmolLM2-135M model (greedy, short)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import jsonschema
import msgspec
import pytest

from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Finish,
    Logprobs,
    ResponseFormat,
    RoleStart,
    Tool,
    ToolCallDone,
    ToolChoice,
)
from dragoman.adapters.errors import BackendError, ContextTooLong, Overloaded, RequestError
from dragoman.backends.base import Backend
from dragoman.backends.onnx import OnnxBackend
from dragoman.backends.onnx.request_plan import stops as _stops
from dragoman.backends.onnx.prepare import prepare_in_subprocess
from dragoman.backends.onnx.worker_protocol import RUN_AHEAD
from dragoman.backends.text.output_parsers import CALL_CLOSE
from dragoman.config.schema import ModelConfig, ModelRoute
from tests.onnx.conftest import MODEL_NAME, ask, collect

pytestmark = pytest.mark.asyncio(loop_scope="module")

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 40}, "country": {"type": "string", "maxLength": 40}},
    "required": ["city", "country"],
    "additionalProperties": False,
}
WEATHER = Tool(
    name="get_weather",
    description="Current weather of a city",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"],
    },
)


def text_of(events: list[object]) -> str:
    return "".join(e.text for e in events if isinstance(e, ContentDelta))


def finish_of(events: list[object]) -> Finish:
    assert isinstance(events[-1], Finish), events[-1]
    return events[-1]


async def test_satisfies_the_backend_protocol(backend: OnnxBackend) -> None:
    assert isinstance(backend, Backend)
    assert msgspec.convert({"max_concurrent": 2, "provider": "cpu"}, OnnxBackend.Settings).max_concurrent == 2
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({"max_concurent": 2}, OnnxBackend.Settings)


async def test_greedy_answer_streams_in_order(backend: OnnxBackend) -> None:
    events = await collect(backend.chat(ask("What is the capital of France?", num_predict=16)))
    assert isinstance(events[0], RoleStart)
    assert all(isinstance(e, ContentDelta) for e in events[1:-1])
    assert "Paris" in text_of(events)
    finish = finish_of(events)
    assert finish.reason == "length" and finish.usage.completion_tokens == 16
    assert finish.usage.prompt_tokens == 37
    assert (
        finish.timings.eval_ns > 0
        and finish.timings.prompt_eval_ns > 0
        and finish.timings.total_ns >= finish.timings.eval_ns
    )


async def test_same_seed_same_output(backend: OnnxBackend) -> None:
    runs = [
        text_of(await collect(backend.chat(ask("Write a word.", temperature=1.5, seed=seed, num_predict=12))))
        for seed in (7, 7, 8)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


async def test_stop_string_is_never_emitted(backend: OnnxBackend) -> None:
    # Greedy reply: "The capital of France is Paris, ..."; "is Par" spans two tokens.
    events = await collect(backend.chat(ask("What is the capital of France?", num_predict=16, stop=["is Par"])))
    assert text_of(events) == "The capital of France "
    assert finish_of(events).reason == "stop" and finish_of(events).stop_sequence == "is Par"


async def test_count_tokens_is_the_prompt_a_generation_reads(backend: OnnxBackend) -> None:
    request = ask("What is the capital of France?", num_predict=1)
    counted = await backend.count_tokens(request)
    assert counted == finish_of(await collect(backend.chat(request))).usage.prompt_tokens > 10
    assert await backend.count_tokens(ask("word " * 3000)) > 3000  # past the context: still counted


async def test_parallel_calls_off_stops_after_the_first_call() -> None:
    """With parallel calls off, the end of a call is a stop string: generation ends right
    after the first call, which the parser closes at the end."""
    one = msgspec.structs.replace(ask("q", stop=["x"]), tools=[WEATHER], parallel_tool_calls=False)
    assert _stops(one, tools_active=True) == ["x", CALL_CLOSE]
    assert _stops(msgspec.structs.replace(one, parallel_tool_calls=None), tools_active=True) == ["x"]
    assert _stops(one, tools_active=False) == ["x"]


async def test_json_schema_output_validates(backend: OnnxBackend) -> None:
    request = ask(
        "What is the capital of France? Answer in JSON.",
        num_predict=48,
        response_format=ResponseFormat(type="json_schema", schema=CITY),
    )
    events = await collect(backend.chat(request))
    assert finish_of(events).reason == "stop"
    value = msgspec.json.decode(text_of(events))
    jsonschema.validate(value, CITY)


async def test_json_mode_gives_an_object(backend: OnnxBackend) -> None:
    events = await collect(
        backend.chat(ask("Describe Paris in JSON.", num_predict=40, response_format=ResponseFormat(type="json")))
    )
    text = text_of(events)
    assert text.startswith("{")
    if finish_of(events).reason == "stop":
        assert isinstance(msgspec.json.decode(text), dict)


async def test_tool_choice_required_gives_a_valid_call(backend: OnnxBackend) -> None:
    request = ask(
        "What's the weather in Paris?", num_predict=60, tools=[WEATHER], tool_choice=ToolChoice(mode="required")
    )
    events = await collect(backend.chat(request))
    calls = [e.call for e in events if isinstance(e, ToolCallDone)]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].index == 0 and calls[0].id
    jsonschema.validate(calls[0].arguments, WEATHER.parameters)
    assert text_of(events) == ""
    assert finish_of(events).reason == "tool_calls"


async def test_tool_choice_none_keeps_tools_out(backend: OnnxBackend) -> None:
    request = ask("What is the capital of France?", num_predict=8, tools=[WEATHER], tool_choice=ToolChoice(mode="none"))
    events = await collect(backend.chat(request))
    assert text_of(events).startswith("The capital of France")


async def test_logprobs_with_top_alternatives(backend: OnnxBackend) -> None:
    events = await collect(
        backend.chat(ask("What is the capital of France?", num_predict=6, logprobs=True, top_logprobs=3))
    )
    # Each token's logprobs ride on the text it produced (one chunk on the wire).
    deltas = [e for e in events if isinstance(e, ContentDelta)]
    assert not [e for e in events if isinstance(e, Logprobs)]
    assert all("".join(t.token for t in d.logprobs or []) == d.text for d in deltas)
    tokens = [t for d in deltas for t in d.logprobs or []]
    assert len(tokens) == 6
    for token in tokens:
        assert len(token.top_logprobs) == 3
        assert token.logprob <= 0 and bytes(token.bytes or []).decode() == token.token
        assert [t.logprob for t in token.top_logprobs] == sorted((t.logprob for t in token.top_logprobs), reverse=True)
        assert token.top_logprobs[0].token == token.token  # greedy picks the most likely
    assert "".join(t.token for t in tokens) == text_of(events)


async def test_no_logprobs_unless_asked(backend: OnnxBackend) -> None:
    events = await collect(backend.chat(ask("Hi", num_predict=3)))
    assert not [e for e in events if isinstance(e, Logprobs) or getattr(e, "logprobs", None)]


async def test_the_numpy_processors_run(backend: OnnxBackend) -> None:
    options = {"temperature": 0.8, "seed": 3, "min_p": 0.05, "tfs_z": 0.95, "repeat_penalty": 1.3, "repeat_last_n": 16,
               "presence_penalty": 0.5, "frequency_penalty": 0.3, "num_predict": 10}  # fmt: skip
    first = await collect(backend.chat(ask("Tell me about cats.", **options)))
    assert finish_of(first).usage.completion_tokens == 10
    mirostat = {"temperature": 0.8, "seed": 3, "mirostat": 2, "num_predict": 10}
    runs = [text_of(await collect(backend.chat(ask("Tell me about cats.", **mirostat)))) for _ in range(2)]
    assert runs[0] == runs[1] and runs[0]


async def test_too_long_prompt_is_refused_before_any_event(make_backend: Callable[..., OnnxBackend]) -> None:
    small = make_backend(context_length=64)
    try:
        with pytest.raises(ContextTooLong) as info:
            await collect(small.chat(ask("word " * 100, num_predict=4)))
        assert "the prompt is 131 tokens" in info.value.message and "context length of 64 tokens" in info.value.message
        assert info.value.status == 400
    finally:
        await small.aclose()


async def test_invalid_schema_is_a_request_error(backend: OnnxBackend) -> None:
    request = ask("Hi", num_predict=4, response_format=ResponseFormat(type="json_schema", schema={"type": "nonsense"}))
    cancelled = backend.counters["cancelled"]
    with pytest.raises(RequestError) as info:
        await collect(backend.chat(request))
    assert info.value.param == "response_format" and "invalid constraint" in info.value.message
    assert backend.counters["cancelled"] == cancelled  # a refusal is not a cancellation


async def test_cancellation_stops_generation(backend: OnnxBackend) -> None:
    stream = backend.chat(ask("Write a long story about a dragon.", num_predict=400))
    seen = 0
    async for event in stream:
        if isinstance(event, ContentDelta):
            seen += 1
            if seen == 5:
                break
    await stream.aclose()
    record = next(reversed(backend.slot.cancellations.values()))
    await asyncio.wait_for(record.confirmed.wait(), 5)
    # However late the cancel is read, the worker never got further ahead of what the
    # client took than its run-ahead (it waits for credit), and stopped far from 400.
    assert record.worker_tokens is not None
    assert record.tokens_consumed <= record.worker_tokens <= record.tokens_consumed + RUN_AHEAD
    assert backend.counters["cancelled"] >= 1
    await asyncio.sleep(0.3)
    assert record.tokens_after_confirm == 0
    # And it still serves.
    assert "Paris" in text_of(await collect(backend.chat(ask("What is the capital of France?", num_predict=8))))


async def test_a_cancelled_consumer_task_cancels_the_generation(backend: OnnxBackend) -> None:
    """What a web framework does when the client disconnects: cancel the task."""
    first_token = asyncio.Event()

    async def consume() -> None:
        async for event in backend.chat(ask("Write a long story about a dragon.", num_predict=400)):
            if isinstance(event, ContentDelta):
                first_token.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_token.wait(), 10)
    before = set(backend.slot.cancellations)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (new,) = set(backend.slot.cancellations) - before
    record = backend.slot.cancellations[new]
    await asyncio.wait_for(record.confirmed.wait(), 5)
    assert record.worker_tokens is not None and record.worker_tokens <= record.tokens_consumed + RUN_AHEAD


async def test_a_stalled_consumer_holds_its_generation_back(backend: OnnxBackend) -> None:
    """The flake this replaces: a consumer whose event loop stalls while the worker
    races on. Now the worker waits for credit: blocking the loop for a second (about
    100 tokens of time) leaves it at most RUN_AHEAD tokens ahead."""
    stream = backend.chat(ask("Write a long story about a dragon.", num_predict=400))
    seen = 0
    async for event in stream:
        if isinstance(event, ContentDelta):
            seen += 1
            if seen == 3:
                time.sleep(1.0)  # the whole event loop stops, as under a heavy load
                break
    await stream.aclose()
    record = next(reversed(backend.slot.cancellations.values()))
    await asyncio.wait_for(record.confirmed.wait(), 5)
    assert record.worker_tokens is not None and record.worker_tokens <= record.tokens_consumed + RUN_AHEAD


async def test_concurrent_chats_interleave(backend: OnnxBackend) -> None:
    stamps: dict[str, list[tuple[float, object]]] = {"a": [], "b": []}

    async def run(key: str, delay: float) -> None:
        await asyncio.sleep(delay)
        async for event in backend.chat(ask("Write a long story about a dragon.", num_predict=40)):
            stamps[key].append((time.perf_counter(), event))

    await asyncio.gather(run("a", 0), run("b", 0.05))
    first_of_b = next(t for t, e in stamps["b"] if isinstance(e, ContentDelta))
    end_of_a = stamps["a"][-1][0]
    assert isinstance(stamps["a"][-1][1], Finish) and isinstance(stamps["b"][-1][1], Finish)
    assert first_of_b < end_of_a


async def test_queue_full_is_overloaded(make_backend: Callable[..., OnnxBackend]) -> None:
    busy = make_backend(max_concurrent=1, max_queue=0)
    try:
        running = busy.chat(ask("Write a long story.", num_predict=100))
        assert isinstance(await running.__anext__(), RoleStart)
        with pytest.raises(Overloaded) as info:
            await collect(busy.chat(ask("Hi", num_predict=2)))
        assert info.value.retry_after == 1
        await running.aclose()
    finally:
        await busy.aclose()


async def test_keep_alive_zero_unloads_after_the_request(make_backend: Callable[..., OnnxBackend]) -> None:
    fresh = make_backend(keep_alive=300)
    try:
        events = await collect(fresh.chat(ask("Hi", num_predict=2)))
        assert finish_of(events).timings.load_ns > 0
        (entry,) = fresh.loaded()
        assert entry.name == MODEL_NAME and entry.size > 80_000_000 and entry.context_length == 1024
        assert (
            entry.expires_at is not None
            and 290 < (entry.expires_at - entry.expires_at.now(entry.expires_at.tzinfo)).total_seconds() <= 300
        )
        pid = fresh.worker_pid
        assert pid is not None
        request = ask("Hi", num_predict=2)
        request.keep_alive = 0
        await collect(fresh.chat(request))
        for _ in range(100):  # unloaded and the process gone (reaped) soon after
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"worker {pid} still runs after keep_alive 0")
        assert fresh.loaded() == [] and fresh.worker_pid is None
    finally:
        await fresh.aclose()


async def test_load_forever_and_unload(make_backend: Callable[..., OnnxBackend]) -> None:
    fresh = make_backend(keep_alive=300)
    try:
        await fresh.load(MODEL_NAME, -1)
        (entry,) = fresh.loaded()
        assert entry.expires_at is None
        await fresh.unload(MODEL_NAME)
        assert fresh.loaded() == []
    finally:
        await fresh.aclose()


async def test_worker_death_is_reported_and_the_next_request_restarts_it(
    make_backend: Callable[..., OnnxBackend],
) -> None:
    fragile = make_backend()
    try:
        stream = fragile.chat(ask("Write a long story about a dragon.", num_predict=300))
        assert isinstance(await stream.__anext__(), RoleStart)
        os.kill(fragile.worker_pid, 9)  # type: ignore[arg-type]
        events = [event async for event in stream]
        assert isinstance(events[-1], ErrorEvent) and events[-1].status == 502
        assert "died" in events[-1].message and "signal 9" in events[-1].message
        again = await collect(fragile.chat(ask("What is the capital of France?", num_predict=8)))
        assert "Paris" in text_of(again)
    finally:
        await fragile.aclose()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="watches the killed process in /proc (Linux)")
async def test_a_request_right_after_the_worker_died_is_served_by_a_new_one(
    make_backend: Callable[..., OnnxBackend],
) -> None:
    """A worker killed while idle (the OOM killer, an operator): a request arriving
    before the event loop had reaped it was sent to the dead process and failed with a
    502 (measured from outside: most requests 0-2 ms after the kill, some at 10 ms).
    Here the loop is held (a blocking sleep) until the kernel shows the process ended
    or ending, so the loop cannot have noticed it itself."""
    fragile = make_backend()
    try:
        await fragile.load(MODEL_NAME, None)
        pid = fragile.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _state(pid) not in ("Z", None):  # (the loop does not run meanwhile)
            time.sleep(0.01)
        again = await collect(fragile.chat(ask("What is the capital of France?", num_predict=8)))
        assert "Paris" in text_of(again), again
        assert fragile.worker_pid not in (None, pid)
    finally:
        await fragile.aclose()


def _state(pid: int) -> str | None:
    """The process's state letter in /proc (Z: exited, not reaped), None once reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


async def test_details_and_capabilities(backend: OnnxBackend) -> None:
    details = backend.details(MODEL_NAME)
    assert (details.format, details.family, details.parameter_size, details.quantization_level) == (
        "onnx",
        "llama",
        "135M",
        "int4",
    )
    assert details.context_length == 1024 and "<|im_start|>" in details.template and details.size > 80_000_000
    caps = backend.capabilities(MODEL_NAME)
    assert (caps.tools, caps.vision, caps.thinking, caps.json_schema, caps.logprobs) == (True, False, False, True, True)


async def test_unset_path_serves_the_prepared_default_model(model_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAGOMAN_HOME", str(model_home))
    default = OnnxBackend(
        ModelRoute(
            config=ModelConfig(name=MODEL_NAME, backend="onnx"),
            settings=OnnxBackend.Settings(provider="cpu", prepare=False),
            keep_alive=-1,
        )
    )
    try:
        events = await collect(default.chat(ask("What is the capital of France?", num_predict=8)))
        assert "Paris" in text_of(events)
        assert default.details(MODEL_NAME).context_length == 8192  # the model's own
    finally:
        await default.aclose()


async def test_missing_default_model_without_prepare_names_the_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DRAGOMAN_HOME", str(tmp_path))
    route = ModelRoute(
        config=ModelConfig(name=MODEL_NAME, backend="onnx"),
        settings=OnnxBackend.Settings(provider="cpu", prepare=False),
        keep_alive=-1,
    )
    with pytest.raises(BackendError, match="not built yet; run: dragoman models prepare"):
        await collect(OnnxBackend(route).chat(ask("Hi")))


async def test_prepare_subprocess_reuses_an_intact_build(
    model_home: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRAGOMAN_HOME", str(model_home))
    assert await prepare_in_subprocess("cpu", model_dir) == model_dir


async def test_a_model_that_fails_to_load_is_a_backend_error(
    make_backend: Callable[..., OnnxBackend], tmp_path: Path
) -> None:
    (tmp_path / "genai_config.json").write_text('{"model": {"type": "llama"}}')
    broken = make_backend(path=str(tmp_path))
    with pytest.raises(BackendError, match=f"could not load model '{MODEL_NAME}'") as info:
        await collect(broken.chat(ask("Hi")))
    assert str(tmp_path) in info.value.message
    assert broken.loaded() == []
