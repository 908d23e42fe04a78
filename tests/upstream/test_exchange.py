"""The small pure parts of an exchange: line splitting, Retry-After, coalescing."""

from __future__ import annotations

import datetime as dt
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dragoman.adapters.canonical import ContentDelta, Event, Finish, Logprobs, RoleStart, ThinkingDelta, TokenLogprob, ToolCallFragment
from dragoman.backends.upstream.relay import coalesce_deltas
from dragoman.backends.upstream.exchange import LineSplitter, LineTooLong, retry_after

SPLITS = [
    # (name, pieces as they arrive, lines out, tail)
    ("whole lines", [b"a\nb\n"], [b"a", b"b"], []),
    ("line cut in two", [b"da", b"ta: x\n"], [b"data: x"], []),
    ("SSE event with blank line", [b"data: 1\n\ndata: 2\n\n"], [b"data: 1", b"", b"data: 2", b""], []),
    ("CRLF kept for the decoder to strip", [b"a\r\n"], [b"a\r"], []),
    ("last line without newline", [b"a\n{\"done\":true}"], [b"a"], [b"{\"done\":true}"]),
    ("line cut, then more after it", [b"da", b"ta\nne", b"xt\n"], [b"data", b"next"], []),
    ("one byte at a time", [bytes([c]) for c in b"ab\ncd\n"], [b"ab", b"cd"], []),
]


@pytest.mark.parametrize(("name", "pieces", "lines", "tail"), SPLITS, ids=[s[0] for s in SPLITS])
def test_line_splitter(name: str, pieces: list[bytes], lines: list[bytes], tail: list[bytes]) -> None:
    splitter = LineSplitter()
    got = [line for piece in pieces for line in splitter.lines(piece)]
    assert (got, splitter.tail()) == (lines, tail)


def test_line_splitter_refuses_a_line_past_its_limit_before_it_ends() -> None:
    splitter = LineSplitter(max_line=10)
    assert splitter.lines(b"short\n0123") == [b"short"]
    with pytest.raises(LineTooLong, match="longer than 10 bytes"):
        splitter.lines(b"4567890")  # 11 bytes pending, no newline yet
    with pytest.raises(LineTooLong):
        LineSplitter(max_line=10).lines(b"a\n" + b"b" * 11 + b"\nc\n")  # a long line inside one chunk
    with pytest.raises(LineTooLong):
        LineSplitter(max_line=10).lines(b"x" * 11)  # one chunk, no newline at all
    with pytest.raises(LineTooLong):
        LineSplitter(max_line=10).lines(b"ok\n" + b"x" * 11)  # the unfinished rest of a chunk
    assert LineSplitter(max_line=10).lines(b"0123456789\n") == [b"0123456789"]


def test_line_splitter_joins_a_long_line_once() -> None:
    """A line over many chunks is kept as pieces and joined at its end (linear): the
    old splitter copied the whole line so far for every chunk."""
    splitter = LineSplitter()
    piece = b"x" * 16384
    for _ in range(200):
        assert splitter.lines(piece) == []
    assert len(splitter._pending) == 200  # pieces, not one string re-copied 200 times
    assert splitter.lines(b"\nnext") == [piece * 200]
    assert splitter.tail() == [b"next"]


RETRY_AFTER = [
    # (header, seconds): finite, clamped to 1 s – 1 h, None when it says nothing usable
    ("7", 7.0), ("1.5", 1.5), ("-3", 1.0), ("0", 1.0), ("86400", 3600.0), ("1e300", 3600.0),
    ("inf", None), ("1e999", None), ("-inf", None), ("nan", None), ("Infinity", None),
    (None, None), ("", None), ("soon", None), ("Mon, 99 Foo 2024 99:99:99 GMT", None),
    ("Wed, 21 Oct 2015 07:28:00 GMT", 1.0),  # a date in the past
]


@pytest.mark.parametrize(("value", "seconds"), RETRY_AFTER, ids=[str(v) for v, _ in RETRY_AFTER])
def test_retry_after(value: str | None, seconds: float | None) -> None:
    assert retry_after(value) == seconds


def test_retry_after_from_a_date() -> None:
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=120)
    from_date = retry_after(format_datetime(later, usegmt=True))
    assert from_date is not None and 115 <= from_date <= 120
    far = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400)
    assert retry_after(format_datetime(far, usegmt=True)) == 3600.0


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
    ("a signature is never merged away", [T("x"), T("y"), T("", signature="s"), T("z"), C("a")],
     [T("xy"), T("", signature="s"), T("z"), C("a")]),
]


@pytest.mark.parametrize(("name", "events", "forwarded"), COALESCE, ids=[c[0] for c in COALESCE])
def test_coalesce_deltas(name: str, events: list[Event], forwarded: list[Event]) -> None:
    assert coalesce_deltas(events) == forwarded


@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12), st.data())
def test_line_splitter_agrees_with_one_split_however_the_body_is_cut(lines: list[bytes], data: st.DataObject) -> None:
    body = b"\n".join(lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=8)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]
    splitter = LineSplitter(max_line=40)
    got = [line for piece in pieces for line in splitter.lines(piece)] + splitter.tail()
    want = body.split(b"\n")
    if want and not want[-1].strip():
        want.pop()  # the tail drops a blank last line
    assert got == want
