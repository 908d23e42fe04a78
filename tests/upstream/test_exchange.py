"""The small pure parts of an exchange: line splitting, Retry-After, coalescing."""

from __future__ import annotations

import datetime as dt
from email.utils import format_datetime

import pytest

from adapters.canonical import ContentDelta, Event, Finish, Logprobs, RoleStart, ThinkingDelta, TokenLogprob, ToolCallFragment
from backends.upstream.backend import coalesce_deltas
from backends.upstream.exchange import LineSplitter, retry_after

SPLITS = [
    # (name, pieces as they arrive, lines out, tail)
    ("whole lines", [b"a\nb\n"], [b"a", b"b"], []),
    ("line cut in two", [b"da", b"ta: x\n"], [b"data: x"], []),
    ("SSE event with blank line", [b"data: 1\n\ndata: 2\n\n"], [b"data: 1", b"", b"data: 2", b""], []),
    ("CRLF kept for the decoder to strip", [b"a\r\n"], [b"a\r"], []),
    ("last line without newline", [b"a\n{\"done\":true}"], [b"a"], [b"{\"done\":true}"]),
    ("one byte at a time", [bytes([c]) for c in b"ab\ncd\n"], [b"ab", b"cd"], []),
]


@pytest.mark.parametrize(("name", "pieces", "lines", "tail"), SPLITS, ids=[s[0] for s in SPLITS])
def test_line_splitter(name: str, pieces: list[bytes], lines: list[bytes], tail: list[bytes]) -> None:
    splitter = LineSplitter()
    got = [line for piece in pieces for line in splitter.lines(piece)]
    assert (got, splitter.tail()) == (lines, tail)


def test_retry_after() -> None:
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=120)
    cases = [("7", 7.0), ("1.5", 1.5), ("-3", 0.0), (None, None), ("", None), ("soon", None)]
    for value, seconds in cases:
        assert retry_after(value) == seconds, value
    from_date = retry_after(format_datetime(later, usegmt=True))
    assert from_date is not None and 115 <= from_date <= 120


C, T = ContentDelta, ThinkingDelta
COALESCE = [
    # (name, events of one read, events forwarded)
    ("one event", [C("a")], [C("a")]),
    ("content run", [RoleStart(), C("a"), C("b"), C("c")], [RoleStart(), C("abc")]),
    ("kinds kept apart", [T("x"), T("y"), C("a"), C("b")], [T("xy"), C("ab")]),
    ("logprobs keep their tokens", [C("a"), Logprobs([]), C("b"), Logprobs([])], [C("a"), Logprobs([]), C("b"), Logprobs([])]),
    ("content runs keep every token's logprobs",
     [C("a", [TokenLogprob("a", -1.0)]), C("b"), C("c", [TokenLogprob("c", -2.0)])],
     [C("abc", [TokenLogprob("a", -1.0), TokenLogprob("c", -2.0)])]),
    ("finish ends a run", [C("a"), C("b"), Finish(), C("c")], [C("ab"), Finish(), C("c")]),
    ("fragments untouched", [ToolCallFragment(0, "{"), ToolCallFragment(0, "}")], [ToolCallFragment(0, "{"), ToolCallFragment(0, "}")]),
]


@pytest.mark.parametrize(("name", "events", "forwarded"), COALESCE, ids=[c[0] for c in COALESCE])
def test_coalesce_deltas(name: str, events: list[Event], forwarded: list[Event]) -> None:
    assert coalesce_deltas(events) == forwarded
