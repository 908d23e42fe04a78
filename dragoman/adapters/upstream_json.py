"""Reading the JSON an upstream sent, the same way for every dialect.

A body or stream line that does not decode is the upstream's fault (a 502), never the
client's: malformed, or nested past what msgspec can recurse — a ``RecursionError``,
which, escaping, the server would answer as a client body nested too deeply (a 400).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import msgspec

from dragoman.adapters.json_depth import TOO_DEEP

T = TypeVar("T")


class Unreadable(ValueError):
    """JSON an upstream sent that did not decode. Its text completes "upstream sent a
    reply …": ``that could not be read: <why>`` or ``nested too deeply to decode``."""


def read_json(decode: Callable[[bytes], T], data: bytes) -> T:
    """``decode(data)``; :class:`Unreadable` when it fails."""
    try:
        return decode(data)
    except msgspec.DecodeError as exc:
        raise Unreadable(f"that could not be read: {exc}") from None
    except RecursionError:
        raise Unreadable(TOO_DEEP) from None


def sse_data(line: bytes) -> bytes | None:
    """The JSON a line of an upstream's stream carries: an SSE ``data:`` field's value,
    or a bare JSON body (an error sent instead of a stream); None for the rest (blank
    separators, ``: comments``, ``event:``/``id:``/``retry:`` fields)."""
    text = line.strip()
    if text.startswith(b"data:"):
        return text[5:].lstrip()
    if text.startswith(b"{"):
        return text
    return None


__all__ = ["Unreadable", "read_json", "sse_data"]
