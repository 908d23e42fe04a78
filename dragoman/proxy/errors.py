"""Every failure rendered in the caller's dialect; no traceback ever reaches a client.

The dialect comes from the request itself (:func:`proxy.record.scope_dialect`: the path,
and an ``anthropic-version`` header) because routing errors (404/405) and body-decoding
errors happen before any handler knows more.
"""

from __future__ import annotations

import copy
import re
from typing import Any, cast

import structlog
from litestar import Request, Response
from litestar.exceptions import (
    ClientException,
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    ValidationException,
)

from dragoman.adapters.dialects import dialect_named
from dragoman.adapters.errors import DragomanError, RequestError, retry_after_seconds, valid_error_status
from dragoman.proxy.record import SCOPE_KEY, Dialect, RequestRecord, scope_dialect

log = structlog.get_logger("dragoman.errors")


def error_body(dialect: Dialect, err: DragomanError) -> bytes:
    """``err`` as the body ``dialect`` expects."""
    return dialect_named(dialect).render_error(in_dialect_terms(dialect, err))


# Backends name the fields of the canonical request as OpenAI chat spells them; these
# are the ones a backend raises about, renamed as each client wrote them (Dialect.field).
_RENAMED = ("messages", "response_format")
# Backend messages that do not start with the field they are about (the grammar
# compiler's words): the field goes in front, so every dialect's message names it.
_UNNAMED = ("invalid constraint: ",)


def in_dialect_terms(dialect: Dialect, err: DragomanError) -> DragomanError:
    """``err`` naming its field as the client of ``dialect`` wrote it."""
    param = err.param
    if param is None or param not in _RENAMED:
        return err
    field = dialect_named(dialect).field(param)
    message = err.message
    if message.startswith(f"{param}:"):
        message = field + message.removeprefix(param)
    elif message.startswith(_UNNAMED):
        message = f"{field}: {message}"
    if field == param and message == err.message:
        return err
    renamed = copy.copy(err)
    renamed.param, renamed.message = field, message
    return renamed


def error_status(dialect: Dialect, err: DragomanError) -> int:
    return dialect_named(dialect).error_status(err)


def render(request: Request[Any, Any, Any], err: DragomanError) -> Response[bytes]:
    record: RequestRecord | None = cast("dict[str, Any]", request.scope).get(SCOPE_KEY)
    if record is not None and record.error is None:
        record.error = err.message
    dialect = record.dialect if record is not None else scope_dialect(request.scope)
    body = error_body(dialect, err)
    seconds = retry_after_seconds(err.retry_after)
    headers = {"Retry-After": str(seconds)} if seconds is not None else None
    # A status outside 400–599 cannot be sent (h11 refuses ≥ 600); it is a bug or a
    # hostile upstream's, and a 502 is what the client gets.
    status = error_status(dialect, err) if valid_error_status(err.status) else 502
    return Response(body, status_code=status, media_type="application/json", headers=headers)


async def send_error(scope: dict[str, Any], send: Any, err: DragomanError) -> None:
    """``err`` answered by ASGI middleware before any route is chosen, in the dialect the
    path names (as a 404 is), and noted on the request's log line."""
    record = scope.get(SCOPE_KEY)
    if record is not None and record.error is None:
        record.error = err.message
    dialect = scope_dialect(scope)
    body = error_body(dialect, err)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if err.retry_after is not None:
        headers.append((b"retry-after", str(max(1, round(err.retry_after))).encode()))
    await send({"type": "http.response.start", "status": error_status(dialect, err), "headers": headers})
    await send({"type": "http.response.body", "body": body})


def handle_dragoman_error(request: Request[Any, Any, Any], exc: DragomanError) -> Response[bytes]:
    return render(request, exc)


def handle_http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    if isinstance(exc, ValidationException):
        return render(request, _validation_error(exc))
    if isinstance(exc, NotFoundException):
        message = f"{request.method} {request.url.path}: no such endpoint"
        return render(request, DragomanError(message, status=404, code="not_found"))
    if isinstance(exc, MethodNotAllowedException):
        allow = ", ".join(m for m in (exc.headers or {}).get("allow", "").split(", ") if m and m != "OPTIONS")
        message = f"{request.method} is not allowed on {request.url.path}" + (f"; use {allow}" if allow else "")
        response = render(request, DragomanError(message, status=405, code="method_not_allowed"))
        if allow:
            response.headers["Allow"] = allow  # RFC 9110: a 405 says what is
        return response
    if exc.status_code == 413:
        return render(request, _too_large(request))
    if isinstance(exc, ClientException) and exc.status_code == 400:
        if (encoding := request.headers.get("content-encoding", "identity").strip().lower()) != "identity":
            # Litestar reads the bytes as sent: a gzip body fails as "invalid character".
            message = f"request body: sent with Content-Encoding '{encoding}', which is not decoded here; send it uncompressed"
            return render(request, DragomanError(message, status=415, code="unsupported_content_encoding"))
        return render(request, RequestError(_body_problem(exc.detail)))
    return render(request, DragomanError(exc.detail, status=exc.status_code))


def _too_large(request: Request[Any, Any, Any]) -> DragomanError:
    """The route's own bound (the page's turn view has a smaller one) or the server's."""
    table = request.app.state.get("models")
    server_limit = table.limits.max_body_bytes if table is not None else None
    try:
        limit = request.route_handler.resolve_request_max_body_size()
    except Exception:  # no route resolved: the server's bound applies
        limit = server_limit
    setting = " (server.limits.max_body_bytes)" if limit == server_limit else ""
    bound = f"{limit} bytes{setting}" if limit else "the server's limit"
    return DragomanError(
        f"request body: larger than {bound}; send less (fewer or smaller images, a shorter prompt)",
        status=413,
        code="request_too_large",
    )


def handle_recursion(request: Request[Any, Any, Any], exc: RecursionError) -> Response[bytes]:
    """msgspec gives up on JSON nested past the interpreter's recursion limit (about
    1,000 levels) with a RecursionError; from a client's body that is a 400."""
    if "deserializ" not in str(exc):
        return handle_unexpected(request, exc)
    table = request.app.state.get("models")
    limit = table.limits.max_json_depth if table is not None else None
    bound = f"; the limit is {limit} levels (server.limits.max_json_depth)" if limit else ""
    return render(request, RequestError(f"request body: JSON nested too deeply to decode{bound}"))


def handle_unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    log.exception("unhandled error", path=request.url.path)
    return render(request, DragomanError(f"internal error: {type(exc).__name__}: {exc}"))


def _validation_error(exc: ValidationException) -> RequestError:
    """Litestar reports msgspec's errors as ``extra=[{"message", "key"}]``."""
    problems = exc.extra if isinstance(exc.extra, list) else []
    for problem in problems:
        if isinstance(problem, dict):
            return field_problem(str(problem.get("key", "")), str(problem.get("message", "")))
    return RequestError(str(exc.detail))


def field_problem(key: str, message: str) -> RequestError:
    """msgspec's ``message`` about the body's field ``key`` (``""`` or ``"data"``: the
    body itself), naming the field path the way a client wrote it (``messages[1].content``)."""
    missing = re.match(r"Object missing required field `(.+)`", message)
    if key in ("", "data"):
        if missing:
            return RequestError(f"{missing.group(1)}: field required", param=missing.group(1))
        if message in ("'data'", ""):
            return RequestError("request body is empty; send a JSON object", param=None)
        return RequestError(f"request body: {message}")
    if missing:
        field = f"{key}.{missing.group(1)}"
        return RequestError(f"{field}: field required", param=field)
    return RequestError(f"{key}: {message}", param=key)


def _body_problem(detail: str) -> str:
    # Litestar's remaining 400s come from decoding the body ("Input data was truncated",
    # "JSON is malformed: …"): say so in words a client author recognises.
    return f"request body is not valid JSON: {detail.removeprefix('JSON is malformed: ')}"


EXCEPTION_HANDLERS: dict[Any, Any] = {
    DragomanError: handle_dragoman_error,
    HTTPException: handle_http_exception,
    RecursionError: handle_recursion,
    Exception: handle_unexpected,
}
