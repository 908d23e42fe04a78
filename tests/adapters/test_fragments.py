"""Fragments opened once a call's name is known (dragoman/adapters/fragments.py)."""

from __future__ import annotations

import pytest

from dragoman.adapters.canonical import ToolCallFragment as F
from dragoman.adapters.fragments import CallOpened, FragmentOpener, MoreArguments, Step

CASES: list[tuple[str, list[F], list[Step]]] = [
    ("named first", [F(0, '{"a"', id="c", name="f"), F(0, ": 1}")],
     [CallOpened("c", "f", '{"a"'), MoreArguments(": 1}")]),
    ("name arrives later", [F(0, '{"a"', id="c"), F(0, ": 1}", name="f"), F(0, "")],
     [CallOpened("c", "f", '{"a": 1}')]),
    ("a new index ends the call", [F(0, "{}", id="a", name="f"), F(1, "{", id="b", name="g"), F(1, "}")],
     [CallOpened("a", "f", "{}"), CallOpened("b", "g", "{"), MoreArguments("}")]),
    ("a call that never gets its name opens when the next one starts", [F(0, "{}", id="a"), F(1, "{}", id="b", name="g")],
     [CallOpened("a", "", "{}"), CallOpened("b", "g", "{}")]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fragments", "steps"), CASES, ids=[c[0] for c in CASES])
def test_steps(name: str, fragments: list[F], steps: list[Step]) -> None:
    opener = FragmentOpener()
    assert [step for f in fragments for step in opener.feed(f)] + opener.flush() == steps


def test_flush_opens_a_waiting_call_and_close_ends_it() -> None:
    opener = FragmentOpener()
    assert opener.feed(F(0, "{", id="a")) == []
    assert opener.flush() == [CallOpened("a", "", "{")] and opener.open_index == 0
    opener.close()
    assert opener.open_index is None and opener.flush() == []
