"""The incremental output parser: markers split anywhere, tools and thinking."""

from __future__ import annotations

import itertools

import pytest

from dragoman.adapters.canonical import ContentDelta, Logprobs, ThinkingDelta, TokenLogprob, ToolCall, ToolCallDone
from dragoman.backends.text.output_parsers import LogprobsPairing, OutputParser, parse_hermes_call


def ids() -> itertools.count[int]:
    return itertools.count()


def run(deltas: list[str], **kwargs: object) -> list[object]:
    counter = ids()
    parser = OutputParser(call_id=lambda: f"call_{next(counter)}", **kwargs)  # type: ignore[arg-type]
    events = [e for d in deltas for e in parser.feed(d)] + parser.finish()
    return merge(events)


def merge(events: list[object]) -> list[object]:
    """Adjacent deltas of one kind joined: what a client would reassemble."""
    merged: list[object] = []
    for event in events:
        if merged and type(event) in (ContentDelta, ThinkingDelta) and type(merged[-1]) is type(event):
            merged[-1] = type(event)(merged[-1].text + event.text)  # type: ignore[attr-defined]
        else:
            merged.append(event)
    return merged


def call(name: str, index: int, **arguments: object) -> ToolCallDone:
    return ToolCallDone(ToolCall(name=name, arguments=dict(arguments), id=f"call_{index}", index=index))


TOOLS = {"tools": True, "thinking": False}
THINK = {"tools": False, "thinking": True}
BOTH = {"tools": True, "thinking": True}
NONE = {"tools": False, "thinking": False}

CASES = [
    ("plain text", ["Hello", " world"], NONE, [ContentDelta("Hello world")]),
    ("markers ignored when off", ["<tool_call>{}</tool_call>"], NONE, [ContentDelta("<tool_call>{}</tool_call>")]),
    (
        "one call",
        ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'],
        TOOLS,
        [call("get_weather", 0, city="Paris")],
    ),
    (
        "marker split across deltas",
        ["<to", "ol_c", 'all>{"name": "f", "arguments": {}}</tool', "_call>"],
        TOOLS,
        [call("f", 0)],
    ),
    (
        "text then two calls, whitespace between dropped",
        [
            'Let me check.\n<tool_call>{"name":"a","arguments":{"x":1}}</tool_call>\n',
            '<tool_call>{"name":"b","arguments":"{\\"y\\": 2}"}</tool_call>\n',
        ],
        TOOLS,
        [ContentDelta("Let me check."), call("a", 0, x=1), call("b", 1, y=2)],
    ),
    (
        "invalid json stays content",
        ["<tool_call>not json</tool_call>"],
        TOOLS,
        [ContentDelta("<tool_call>not json</tool_call>")],
    ),
    (
        "unclosed call at the end still parsed",
        ['<tool_call>{"name": "f", "arguments": {"a": "b"}}'],
        TOOLS,
        [call("f", 0, a="b")],
    ),
    ("unclosed garbage at the end is content", ['<tool_call>{"na'], TOOLS, [ContentDelta('<tool_call>{"na')]),
    ("a lone '<' is released at the end", ["a <"], TOOLS, [ContentDelta("a <")]),
    ("'<' that is no marker passes", ["x < y and <b>"], TOOLS, [ContentDelta("x < y and <b>")]),
    (
        "thinking then answer",
        ["<think>", "Let me think", "</think>\n\nParis"],
        THINK,
        [ThinkingDelta("Let me think"), ContentDelta("Paris")],
    ),
    ("think close split", ["<think>hm</th", "ink>ok"], THINK, [ThinkingDelta("hm"), ContentDelta("ok")]),
    ("unclosed thinking", ["<think>still going"], THINK, [ThinkingDelta("still going")]),
    (
        "thinking then call",
        ['<think>need weather</think>\n<tool_call>{"name":"w","arguments":{}}</tool_call>'],
        BOTH,
        [ThinkingDelta("need weather"), call("w", 0)],
    ),
    ("trailing space kept without calls", ["Hi ", "there\n"], NONE, [ContentDelta("Hi there\n")]),
]


@pytest.mark.parametrize(("name", "deltas", "flags", "expected"), CASES, ids=[c[0] for c in CASES])
def test_parser(name: str, deltas: list[str], flags: dict[str, bool], expected: list[object]) -> None:
    assert run(deltas, **flags) == expected


@pytest.mark.parametrize(("name", "deltas", "flags", "expected"), CASES, ids=[c[0] for c in CASES])
def test_parser_one_character_at_a_time(
    name: str, deltas: list[str], flags: dict[str, bool], expected: list[object]
) -> None:
    assert run(list("".join(deltas)), **flags) == expected


def test_starts_in_thinking_when_the_prompt_opened_it() -> None:
    assert run(["reasoning</think>answer"], start_in_thinking=True, **THINK) == [
        ThinkingDelta("reasoning"),
        ContentDelta("answer"),
    ]


def test_call_ids_are_unique_by_default() -> None:
    parser = OutputParser(tools=True, thinking=False)
    events = parser.feed(
        '<tool_call>{"name":"a","arguments":{}}</tool_call><tool_call>{"name":"a","arguments":{}}</tool_call>'
    )
    first, second = (e.call for e in events)  # type: ignore[attr-defined]
    assert first.id != second.id and first.id.startswith("call_")
    assert (first.index, second.index) == (0, 1)


HERMES = [
    ("object arguments", '{"name": "f", "arguments": {"a": 1}}', ("f", {"a": 1})),
    ("string arguments", '{"name": "f", "arguments": "{\\"a\\": 1}"}', ("f", {"a": 1})),
    ("parameters key", '{"name": "f", "parameters": {"a": 1}}', ("f", {"a": 1})),
    ("no arguments", '{"name": "f"}', ("f", {})),
    ("empty string arguments", '{"name": "f", "arguments": ""}', ("f", {})),
    ("no name", '{"arguments": {}}', None),
    ("list arguments", '{"name": "f", "arguments": [1]}', None),
    ("not json", "{name: f}", None),
]


@pytest.mark.parametrize(("name", "body", "expected"), HERMES, ids=[c[0] for c in HERMES])
def test_parse_hermes_call(name: str, body: str, expected: object) -> None:
    assert parse_hermes_call(body) == expected


def lp(token: str) -> TokenLogprob:
    return TokenLogprob(token, -1.0)


CALL = ToolCallDone(ToolCall(name="f", id="c"))
PAIRING = [
    # (name, [(events of a batch, that batch's logprobs)], events out)
    ("on the text they produced", [([ContentDelta("a")], [lp("a")])], [ContentDelta("a", [lp("a")])]),
    ("held-back text waits for the next text",
     [([], [lp("<")]), ([ContentDelta("<b")], [lp("b")])], [ContentDelta("<b", [lp("<"), lp("b")])]),
    ("thinking-only tokens get their own event",
     [([ThinkingDelta("hm")], [lp("hm")]), ([ContentDelta("ok")], [lp("ok")])],
     [ThinkingDelta("hm"), Logprobs([lp("hm")]), ContentDelta("ok", [lp("ok")])]),
    ("a call's tokens get their own event", [([CALL], [lp("{")])], [CALL, Logprobs([lp("{")])]),
    ("the first delta of a batch takes them", [([ContentDelta("a"), ContentDelta("b")], [lp("ab")])],
     [ContentDelta("a", [lp("ab")]), ContentDelta("b")]),
    ("nothing asked, nothing added", [([ContentDelta("a")], None)], [ContentDelta("a")]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "batches", "expected"), PAIRING, ids=[c[0] for c in PAIRING])
def test_logprobs_pairing(name: str, batches: list[tuple[list[object], list[TokenLogprob] | None]], expected: list[object]) -> None:
    pairing = LogprobsPairing()
    out = [e for events, logprobs in batches for e in pairing.pair(events, logprobs)]  # type: ignore[arg-type]
    assert out + pairing.flush() == expected


def test_logprobs_still_pending_at_the_end_are_flushed() -> None:
    pairing = LogprobsPairing()
    assert pairing.pair([], [lp("<")]) == []
    assert pairing.flush() == [Logprobs([lp("<")])]
    assert pairing.flush() == []
