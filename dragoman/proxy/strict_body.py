"""Request bodies decoded strictly, straight from their bytes into the route's wire type.

Litestar converts a handler's ``data`` with msgspec's ``strict=False`` (its one signature
model also takes path and query values, which arrive as text), so ``"max_tokens": "5"``
passed as 5 and ``"stream": 1`` as true. The APIs dragoman speaks refuse both — OpenAI
with a 400 naming the parameter, Ollama (Go's ``encoding/json``) with "cannot unmarshal
string into Go struct field" — and no client in docs/clients.md sends them. So the body
is decoded here, once, into the ``data`` type by msgspec's strict rules (an integer still
stands for a float, ``null`` for an optional field); Litestar's conversion then passes the
decoded Struct through untouched. The one lax spot a real client needs, whole-number
floats for Ollama's integer options, is spelled in that wire type
(``dragoman/adapters/ollama/wire.py``, ``OptionInt``).
"""

from __future__ import annotations

import asyncio
import functools
import re
from typing import Any

import msgspec
from litestar import Request
from litestar.exceptions import SerializationException
from litestar.types import Empty

from dragoman.adapters.errors import DragomanError, RequestError
from dragoman.config.schema import Limits
from dragoman.proxy.errors import field_problem

_AT = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>.*)`)?$", re.DOTALL)


class StrictBodyRequest(Request[Any, Any, Any]):
    async def body(self) -> bytes:
        """The whole body, received within ``server.limits.body_seconds``: the size bound
        alone let a slow sender keep a connection for ever."""
        table = self.app.state.get("models")
        seconds = (table.limits if table is not None else Limits()).body_seconds
        try:
            async with asyncio.timeout(seconds):
                return await super().body()
        except TimeoutError:
            raise DragomanError(
                f"request body: not received within {seconds:g} s (server.limits.body_seconds); send it at once",
                status=408,
                code="request_timeout",
            ) from None

    async def json(self) -> Any:
        field = self.route_handler.parsed_data_field
        if field is None or self._json is not Empty or self._connection_state.json is not Empty:
            return await super().json()
        decoded = decode_body(await self.body() or b"null", field.annotation)
        self._json = self._connection_state.json = decoded
        return decoded


def decode_body(body: bytes, type_: Any) -> Any:
    """``body`` as ``type_``; a wrong type or a missing field is a 400 naming its path."""
    try:
        return _decoder(type_).decode(body)
    except msgspec.ValidationError as exc:
        raise validation_problem(str(exc)) from None
    except msgspec.DecodeError as exc:  # not JSON: answered as Litestar's own decoding error is
        raise SerializationException(str(exc)) from None


def validation_problem(text: str) -> RequestError:
    """msgspec's ``Expected `int`, got `str` - at `$.options.num_ctx``` as the error
    that names ``options.num_ctx``."""
    match = _AT.match(text)
    assert match is not None  # the pattern matches any text
    path, message = (match.group("path") or "").removeprefix("."), match.group("message")
    # A check in a Struct's __post_init__ is reported at the Struct; its message may
    # name the field below it (``options.seed: …`` at ``$.options``).
    deeper = re.match(r"(?P<field>[\w.\[\]]+): (?P<rest>.*)", message, re.DOTALL)
    if deeper and path and deeper.group("field").startswith(path + "."):
        path, message = deeper.group("field"), deeper.group("rest")
    return field_problem(path, message)


@functools.lru_cache(maxsize=64)
def _decoder(type_: Any) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(type_)
