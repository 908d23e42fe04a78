"""structlog set-up and the one-line-per-request access log.

The access log is an ASGI middleware rather than a Litestar hook because a streaming
response ends long after its handler returns; the line is written when the last body
frame has been sent, with the token counts the stream reported.
"""

from __future__ import annotations

import logging
import re
import secrets
import sys
import time
from typing import Any, Literal, Protocol

import msgspec
import structlog

from dragoman.proxy.record import SCOPE_KEY, RequestRecord, scope_dialect

LogFormat = Literal["auto", "console", "json"]

access_log = structlog.get_logger("dragoman.access")

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


# msgspec writes a line in a sixth of the stdlib's time (1 µs against 6, per request);
# a value it cannot encode is written as its repr, as structlog's own renderer does.
_json = msgspec.json.Encoder(enc_hook=repr)


def _dumps(event: dict[str, Any], **_: Any) -> str:
    return _json.encode(event).decode()


def configure_logging(fmt: LogFormat = "auto", level: str = "info") -> None:
    """Readable lines on a terminal, JSON otherwise (or as configured)."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: Any = structlog.processors.JSONRenderer(serializer=_dumps) if use_json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,  # keeps loggers reconfigurable (tests, reloads)
    )


class Observer(Protocol):
    def observe(self, record: RequestRecord, now: float) -> None: ...


def observe_requests(observer: Observer | None = None) -> Any:
    """An ASGI middleware factory: each HTTP request gets a :class:`RequestRecord` and an
    ``X-Request-Id``; when the response is complete (or the client went away) one log
    line is written and ``observer`` (the metrics) sees the record."""

    def middleware_for(app: Any) -> Any:
        return _middleware(app, observer)

    return middleware_for


def _middleware(app: Any, observer: Observer | None) -> Any:
    def finish(record: RequestRecord) -> None:
        access_log.info("request", **record.fields())
        if observer is not None:
            observer.observe(record, time.perf_counter())

    async def middleware(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        request_id = _client_request_id(scope) or secrets.token_hex(8)
        record = RequestRecord(request_id, scope["method"], scope["path"], scope_dialect(scope))
        scope[SCOPE_KEY] = record
        logged = False

        async def send_and_log(message: dict[str, Any]) -> None:
            nonlocal logged
            if message["type"] == "http.response.start":
                record.status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False) and not logged:
                logged = True
                finish(record)

        with structlog.contextvars.bound_contextvars(request_id=request_id):
            try:
                await app(scope, receive, send_and_log)
            finally:
                if not logged:
                    record.error = record.error or "response not completed"
                    finish(record)

    return middleware


def _client_request_id(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            text = value.decode("latin-1")
            return text if _REQUEST_ID.fullmatch(text) else None
    return None


def finish_side_record(record: RequestRecord, observer: Observer | None, **extra: object) -> None:
    """The access line and metrics of work a request started that outlives or precedes
    its own answer (a background run, a compaction before the turn): its own record, so
    its tokens are counted once and apart from the request's."""
    access_log.info("request", **extra, **record.fields())
    if observer is not None:
        observer.observe(record, time.perf_counter())
