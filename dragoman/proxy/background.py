"""Background responses (``background: true``): the request is answered at once with a
``queued`` response while the model runs in a task; ``GET /v1/responses/{id}`` polls it,
``POST /v1/responses/{id}/cancel`` stops it, and ``GET /v1/responses/{id}?stream=true
&starting_after=N`` (re)reads its events from after sequence number N — a client whose
stream dropped picks up where it was.

A run's events are kept in memory, in the process that runs it, while it runs and for
``RESUME_SECONDS`` after. Its state is in the response store from the start (``queued``,
then ``in_progress``, then how it ended; background needs the store: ``store: false`` or
``kind: none`` is a 400), so every process sharing the store (``server.workers``,
replicas on one PostgreSQL) answers a poll, and a cancel through any of them marks the
row, which the running process reads every ``CANCEL_POLL_SECONDS`` and stops. Only
streaming the events again needs the process that runs it (elsewhere: a 409 saying so). At most
``MAX_RUNS`` runs are held at once; past that, the oldest finished one is dropped, and
with every one still running a new one is refused (503, ``Retry-After``). Each run logs
its own access line and counts in the metrics when it ends, as a foreground request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import msgspec
import structlog
from litestar import Request, Response, Router, post
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.response import Stream

from dragoman.adapters import responses
from dragoman.adapters.canonical import ChatRequest
from dragoman.adapters.errors import DragomanError, Overloaded, RequestError
from dragoman.adapters.responses import wire
from dragoman.adapters.responses.ids import new_response_id
from dragoman.proxy.chat import encode_stream, start_chat
from dragoman.proxy.logging import finish_side_record
from dragoman.proxy.models import ModelTable
from dragoman.proxy.openapi_responses import RESPONSES_STORED
from dragoman.proxy.record import RequestRecord
from dragoman.proxy.response_context import RUNNING, ResponseNotFound, get_response, owner_of, store_response, stored_status
from dragoman.proxy.response_store import ResponseStore, StoredResponse

log = structlog.get_logger("dragoman.responses")

MAX_RUNS = 256
RESUME_SECONDS = 600.0
CANCEL_POLL_SECONDS = 0.5

_response = msgspec.json.Decoder(wire.Response)

# What the route does to the frames as they leave: stores the response and adds the turn
# to its conversation, as a foreground stream's (responses_routes builds it).
FramePipeline = Callable[[AsyncIterator[bytes], responses.StreamEncoder], AsyncGenerator[bytes, None]]


class BackgroundRun:
    """One background response: its events so far, and whether it has ended."""

    def __init__(self, response_id: str, owner: str, queued: wire.Response, store: ResponseStore, context: bytes) -> None:
        self.id = response_id
        self.owner = owner
        self.store, self.context = store, context  # where its state is kept, with the items it saw
        self.snapshot = queued  # what a poll answers until the run ends
        self.events: list[bytes] = []  # one SSE event each; index == sequence_number
        self.ended = False
        self.ended_at = 0.0
        self.task: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()

    async def keep(self, response: wire.Response) -> bool:
        """``response`` as the run's row in the store, where every process finds it."""
        return await store_response(self.store, self.id, responses.encode_response(response), self.context, self.owner)

    async def advance(self, response: wire.Response) -> None:
        """``response`` (in progress) as the row, unless another process marked it
        cancelled meanwhile: that mark stays, for the watch to find."""
        body = responses.encode_response(response)

        def unless_cancelled(row: StoredResponse) -> StoredResponse:
            return row if stored_status(row) == "cancelled" else StoredResponse(row.id, time.time(), body, row.input, row.owner)

        try:
            await self.store.update(self.id, self.owner, unless_cancelled)
        except Exception as exc:  # the store down: polls elsewhere see "queued" until the end is kept
            log.warning("could not store a background run's progress", response_id=self.id, error=str(exc))

    async def add(self, chunk: bytes) -> None:
        self.events += [event + b"\n\n" for event in chunk.split(b"\n\n") if event]
        async with self._changed:
            self._changed.notify_all()

    async def end(self, final: wire.Response) -> None:
        self.snapshot, self.ended, self.ended_at = final, True, time.monotonic()
        async with self._changed:
            self._changed.notify_all()

    async def events_after(self, starting_after: int) -> AsyncIterator[bytes]:
        """The events with sequence numbers past ``starting_after``, as they come."""
        sent = max(starting_after + 1, 0)
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: self.ended or len(self.events) > sent)
            while sent < len(self.events):
                yield self.events[sent]
                sent += 1
            if self.ended:
                return


class BackgroundRuns:
    """The runs of one application, by response id."""

    def __init__(self) -> None:
        self._runs: dict[str, BackgroundRun] = {}

    def get(self, response_id: str, owner: str) -> BackgroundRun | None:
        run = self._runs.get(response_id)
        return run if run is not None and run.owner == owner else None

    def admit(self, run: BackgroundRun) -> None:
        now = time.monotonic()
        for stale in [r for r in self._runs.values() if r.ended and now - r.ended_at > RESUME_SECONDS]:
            del self._runs[stale.id]
        if len(self._runs) >= MAX_RUNS:
            finished = sorted((r for r in self._runs.values() if r.ended), key=lambda r: r.ended_at)
            if not finished:
                raise Overloaded(
                    f"background: {MAX_RUNS} background responses are already running here; "
                    "wait for one to end or cancel one, then retry", retry_after=5,
                )  # fmt: skip
            del self._runs[finished[0].id]
        self._runs[run.id] = run

    def forget(self, response_id: str) -> None:
        self._runs.pop(response_id, None)


def runs_of(request: Request[Any, Any, Any]) -> BackgroundRuns:
    state = request.app.state
    if "background_runs" not in state:
        state["background_runs"] = BackgroundRuns()
    runs: BackgroundRuns = state["background_runs"]
    return runs


def check_background(data: wire.ResponsesRequest, keep: bool) -> None:
    if data.store is False:
        raise RequestError("background: a background response is read back from the store; send store: true", param="background")
    if not keep:
        raise RequestError(
            "background: the response store is off (server.responses.kind: none), so a background response "
            "could never be read back; set kind: sqlite", param="background",
        )  # fmt: skip


async def start(
    request: Request[Any, Any, Any], data: wire.ResponsesRequest, table: ModelTable, canonical: ChatRequest,
    pipeline: FramePipeline, owner: str, authorization: str | None, foreground: RequestRecord,
    store: ResponseStore, context: bytes, compaction: wire.CompactionItem | None = None,
) -> Response[bytes] | Stream:
    """Answer with the queued response (or, with ``stream``, the run's events as they
    come), kept in the store first, and run the model in a task."""
    queued_meta = responses.meta_for(data, store=True)
    response_id = new_response_id()
    created_at = int(time.time())
    queued = responses.response_object(queued_meta, response_id, created_at, "queued")
    run = BackgroundRun(response_id, owner, queued, store, context)
    runs = runs_of(request)
    runs.admit(run)
    if not await run.keep(queued):
        runs.forget(run.id)
        raise RunNotKept()
    record = RequestRecord(f"{foreground.request_id}-background", "POST", "/v1/responses", "responses")
    metrics = request.app.state.get("metrics")
    run.task = asyncio.create_task(_run(run, table, data, canonical, pipeline, record, authorization, metrics, compaction))
    if data.stream:
        return Stream(run.events_after(-1), media_type=responses.StreamEncoder.media_type)
    return Response(responses.encode_response(queued), media_type="application/json")


async def _run(
    run: BackgroundRun, table: ModelTable, data: wire.ResponsesRequest, canonical: ChatRequest,
    pipeline: FramePipeline, record: RequestRecord, authorization: str | None, metrics: Any,
    compaction: wire.CompactionItem | None,
) -> None:
    encoder: responses.StreamEncoder | None = None
    watch = asyncio.create_task(_stop_when_cancelled_elsewhere(run))
    try:
        chat = await start_chat(table, canonical, record, authorization=authorization)
        used = canonical.options.merged(chat.route.config.defaults)
        meta = responses.meta_for(data, store=True, used=used, compaction=compaction)
        encoder = responses.StreamEncoder(meta)
        encoder.id, encoder.created_at = run.id, run.snapshot.created_at
        run.snapshot = responses.response_object(meta, run.id, run.snapshot.created_at, "in_progress")
        await run.advance(run.snapshot)
        frames = pipeline(encode_stream(chat, encoder, record), encoder)
        try:
            async for chunk in frames:
                await run.add(chunk)
        finally:
            await frames.aclose()  # on cancel too: closing the stream ends the request in the backend
        record.status = 200
    except DragomanError as err:  # before the first event: the run fails, as a stream would
        record.status, record.error = err.status, err.message
        encoder = encoder or responses.StreamEncoder(responses.meta_for(data, store=True))
        encoder.id = run.id
        await run.add(encoder.error(err))
    except asyncio.CancelledError:
        record.status, record.error = 200, "cancelled"
    finally:
        watch.cancel()
        final = encoder.final if encoder is not None and encoder.final is not None else None
        if final is None:
            final = _cancelled(run.snapshot)
        await run.keep(final)  # a completed one was kept before its last event too: the same row
        await run.end(final)
        finish_side_record(record, metrics, background=True)


def answer(run: BackgroundRun, query: Any) -> Response[bytes] | Stream:
    """``GET /v1/responses/{id}`` of a run held here: its state, or its events after
    ``starting_after`` with ``stream=true``."""
    if query.get("stream") in ("true", "1"):
        raw = query.get("starting_after", "-1")
        try:
            after = int(raw)
        except ValueError:
            raise RequestError(f"starting_after: must be an integer, got '{raw}'", param="starting_after") from None
        return Stream(run.events_after(after), media_type=responses.StreamEncoder.media_type)
    return Response(responses.encode_response(run.snapshot), media_type="application/json")


@post(
    "/responses/{response_id:str}/cancel", status_code=200, summary="Cancel a background response",
    tags=["OpenAI Responses"], responses=RESPONSES_STORED,
)  # fmt: skip
async def cancel_response(
    request: Request[Any, Any, Any], response_id: FromPath[str], models: NamedDependency[ModelTable],
    response_store: NamedDependency[ResponseStore],
) -> Response[bytes]:
    owner = owner_of(request, models)
    run = runs_of(request).get(response_id, owner)
    if run is None:
        stored = await get_response(response_store, response_id, owner)
        if stored is None:
            raise ResponseNotFound(response_id)
        if stored_status(stored) not in RUNNING:
            raise RequestError(f"response '{response_id}' is not a background response that is running; only those can be cancelled")
        return Response(await _mark_cancelled(response_store, response_id, owner), media_type="application/json")
    if run.task is not None and not run.ended:
        run.task.cancel()
        await asyncio.wait([run.task])
    return Response(responses.encode_response(run.snapshot), media_type="application/json")


async def _mark_cancelled(store: ResponseStore, response_id: str, owner: str) -> bytes:
    """Marks the row of a run in another process cancelled (it stops at its next look);
    the row as it is after: cancelled, or how the run ended if it ended first."""
    after: list[bytes] = []

    def mark(row: StoredResponse) -> StoredResponse:
        if stored_status(row) in RUNNING:
            row = StoredResponse(row.id, time.time(), responses.encode_response(_cancelled(_response.decode(row.response))),
                                 row.input, row.owner)  # fmt: skip
        after[:] = [row.response]
        return row

    if not await store.update(response_id, owner, mark):
        raise ResponseNotFound(response_id)  # deleted meanwhile (a row that was kept stays kept)
    return after[0]


async def _stop_when_cancelled_elsewhere(run: BackgroundRun) -> None:
    """Cancels the run once another process has marked its row cancelled."""
    while True:
        await asyncio.sleep(CANCEL_POLL_SECONDS)
        try:
            row = await run.store.get(run.id, run.owner)
        except Exception as exc:  # the store down: the run goes on, a cancel waits for it to be back
            log.warning("could not read a background run's row", response_id=run.id, error=str(exc))
            continue
        if row is not None and stored_status(row) == "cancelled" and run.task is not None:
            run.task.cancel()
            return


class RunNotKept(DragomanError):
    status = 413

    def __init__(self) -> None:
        super().__init__(
            "background: the response store could not keep this response (over server.responses.max_bytes or this "
            "key's share of it, or the store failed), so it could never be polled; send it without background",
            param="background", code="response_not_kept",
        )  # fmt: skip


def _cancelled(response: wire.Response) -> wire.Response:
    return msgspec.structs.replace(response, status="cancelled", completed_at=None)


background_router = Router(path="/v1", route_handlers=[cancel_response])
