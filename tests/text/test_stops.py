"""Stop strings on decoded text: never emitted, found across deltas."""

from __future__ import annotations

import pytest

from dragoman.backends.text.stops import StopMatcher, partial_suffix_length

CASES = [
    ("no stops", [], ["Hello", " world"], "Hello world", False),
    ("stop inside one delta", ["END"], ["abcENDxyz"], "abc", True),
    ("stop split across deltas", ["END"], ["abc E", "N", "Dxyz"], "abc ", True),
    ("near miss released", ["END"], ["abc EN", "d more"], "abc ENd more", False),
    ("prefix held until the end", ["END"], ["abc EN"], "abc EN", False),
    ("earliest of two stops", ["b", "a"], ["xxabxx"], "xx", True),
    ("stop at the very start", ["\n\n"], ["\n", "\nrest"], "", True),
    ("empty stop ignored", [""], ["text"], "text", False),
]


@pytest.mark.parametrize(("name", "stops", "deltas", "emitted", "stopped"), CASES, ids=[c[0] for c in CASES])
def test_stop_matcher(name: str, stops: list[str], deltas: list[str], emitted: str, stopped: bool) -> None:
    matcher = StopMatcher(stops)
    out = "".join(matcher.feed(d) for d in deltas) + matcher.flush()
    assert (out, matcher.stopped) == (emitted, stopped)


def test_the_matched_stop_is_named() -> None:
    """The earliest match wins, whichever stop it is (Anthropic reports it)."""
    matcher = StopMatcher(["END", "\n\n"])
    assert matcher.feed("a\n") == "a" and matcher.matched is None
    assert matcher.feed("\nb END") == "" and matcher.matched == "\n\n"
    other = StopMatcher(["END", "."])
    assert other.feed("x END. y") == "x " and other.matched == "END"


def test_nothing_after_a_stop() -> None:
    matcher = StopMatcher(["."])
    assert matcher.feed("one. two") == "one"
    assert matcher.feed("three") == ""
    assert matcher.flush() == ""


SUFFIXES = [
    ("none", "hello", ["<tool_call>"], 0),
    ("one char", "hello <", ["<tool_call>"], 1),
    ("several", "hello <tool_", ["<tool_call>"], 6),
    ("whole needle is not partial", "x<a>", ["<a>"], 0),
    ("longest of many", "ab", ["b", "abc"], 2),
]


@pytest.mark.parametrize(("name", "text", "needles", "expected"), SUFFIXES, ids=[c[0] for c in SUFFIXES])
def test_partial_suffix_length(name: str, text: str, needles: list[str], expected: int) -> None:
    assert partial_suffix_length(text, needles) == expected


def test_overlapping_stops_the_first_to_end_wins() -> None:
    matcher = StopMatcher(["abcd", "bc", "xbcq"])
    assert matcher.feed("zab") == "z"  # "ab" could still become "abcd"
    assert matcher.feed("cd") == "a" and matcher.stopped  # "bc" ended first
    suffix = StopMatcher(["bcd", "abcde"])
    assert suffix.feed("abcdz") == "a"


def test_the_cost_per_character_does_not_grow_with_the_number_of_stops() -> None:
    """Complexity, not speed: 4,096 stop strings cost about what one does per
    character of text (the old matcher scanned every stop string at every delta)."""
    import time

    text = ["The capital of France is Paris, a city of light. "[i % 48] for i in range(20_000)]

    def cost(stops: list[str]) -> float:
        matcher = StopMatcher(stops)
        began = time.perf_counter()
        for delta in text:
            matcher.feed(delta)
        return time.perf_counter() - began

    many = [f"zq{i:06d}xyzzy" for i in range(4096)] + ["Paris, a city of lighthouse"]
    few = ["Paris, a city of lighthouse"]
    ratio = min(cost(many) for _ in range(3)) / min(cost(few) for _ in range(3))
    assert ratio < 3, ratio
