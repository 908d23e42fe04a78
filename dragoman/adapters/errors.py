"""Every error dragoman reports to a client, each carrying its HTTP status.

    DragomanError                 500
    ├── RequestError              400  a bad field, named by its path
    │   ├── UnsupportedFeature    400  a backend cannot do what was asked
    │   └── ContextTooLong        400  prompt does not fit the context
    ├── AuthenticationError       401
    ├── ModelNotFound             404
    ├── Overloaded                503  queue full; carries Retry-After
    └── BackendError              502  backend or upstream failed
        ├── UpstreamError         the upstream's own status and message
        └── BackendTimeout        504

The route layer renders them in the caller's dialect; adapters and backends only raise.
"""

from __future__ import annotations

import math

# Retry-After is advice to a client: never below a second, never more than an hour,
# whatever an upstream said (``inf`` and ``1e999`` included).
RETRY_AFTER_MIN = 1
RETRY_AFTER_MAX = 3600


class DragomanError(Exception):
    status: int = 500
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:  # else keep the class's own code (UnsupportedFeature, …)
            self.code = code
        self.retry_after = retry_after
        if status is not None:
            self.status = status


class RequestError(DragomanError):
    status = 400


class UnsupportedFeature(RequestError):
    code = "unsupported_feature"


class ContextTooLong(RequestError):
    """``prompt_tokens`` and ``context_length`` are given when the backend counted, so
    each dialect can say both numbers in its own words."""

    code = "context_length_exceeded"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        prompt_tokens: int | None = None,
        context_length: int | None = None,
        at_least: bool = False,
    ) -> None:
        super().__init__(message, param=param)
        self.prompt_tokens = prompt_tokens
        self.context_length = context_length
        self.at_least = at_least  # prompt_tokens is a lower bound (the prompt was not tokenised)


class AuthenticationError(DragomanError):
    status = 401


class ModelNotFound(DragomanError):
    status = 404

    def __init__(self, model: str) -> None:
        super().__init__(f"model '{model}' not found", param="model", code="model_not_found")
        self.model = model


class Overloaded(DragomanError):
    status = 503


class BackendError(DragomanError):
    status = 502


class UpstreamError(BackendError):
    """An upstream answered with an error; its status passes through."""


class BackendTimeout(BackendError):
    status = 504


def error_for_status(status: int, message: str, *, retry_after: float | None = None) -> DragomanError:
    """The error class a status belongs to, for errors that arrive as (status, text).

    Only 400–599 are error statuses; anything else (a 200 in an error line, a 600 on
    the status line) is not the upstream's to choose and becomes a 502."""
    cls: type[DragomanError]
    if not valid_error_status(status):
        return BackendError(f"{message} (upstream gave status {status}, not an error status)", retry_after=retry_after)
    if status == 400:
        cls = RequestError
    elif status == 401:
        cls = AuthenticationError
    elif status == 404:
        cls = UpstreamError
    elif status == 503:
        cls = Overloaded
    elif status == 504:
        cls = BackendTimeout
    else:
        cls = UpstreamError
    return cls(message, status=status, retry_after=retry_after)


def valid_error_status(status: object) -> bool:
    return isinstance(status, int) and not isinstance(status, bool) and 400 <= status <= 599


def retry_after_seconds(value: float | None) -> int | None:
    """Whole seconds for a ``Retry-After`` header: finite, clamped to 1 s – 1 h."""
    if value is None or not math.isfinite(value):
        return None
    return int(min(max(math.ceil(value), RETRY_AFTER_MIN), RETRY_AFTER_MAX))


def openai_error_type(status: int) -> str:
    """OpenAI's ``error.type`` for a status (as Ollama and OpenAI spell them)."""
    if status in (400, 405, 413, 415, 422):
        return "invalid_request_error"
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status == 503:
        return "overloaded_error"
    return "api_error"
