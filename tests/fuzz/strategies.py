"""Hypothesis strategies for fuzzing: arbitrary JSON, request bodies shaped like the wire
Structs but wrong at any depth, and sequences of canonical events.

Bodies are built by walking a wire Struct's type (``msgspec.inspect``) rather than by
hand, so a field added to ``wire.py`` is fuzzed without touching this file. At every
node the value is, now and then, replaced by an arbitrary JSON value of another type;
fields whose valid values are a small language of their own (image base64, tool-call
argument JSON, durations, roles, model names) also draw from a list of near misses.
"""

from __future__ import annotations

import base64
import json
import string
from typing import Any

import msgspec
import msgspec.inspect as mi
from hypothesis import strategies as st

from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    Logprobs,
    RoleStart,
    ThinkingDelta,
    Timings,
    TokenLogprob,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    TopLogprob,
    Usage,
)

# -- JSON ---------------------------------------------------------------------------------

EDGE_INTS = [0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, -(10**30)]

# Text that has broken framing or escaping elsewhere: separators of both stream formats,
# control characters, a BOM, astral-plane characters, right-to-left marks.
TRICKY_TEXT = [
    "", " ", "\n", "\r\n", "\n\n", "data: ", "data: [DONE]\n\n", "\x00", "\x1b[31m", "\u2028\u2029",
    "\ufeff", "😀", "𝔘𝔫𝔦", "\u202e", "é", "\\", '"', "}{", "null", "[DONE]",
]
texts = st.one_of(st.text(max_size=24), st.sampled_from(TRICKY_TEXT))
keys = st.one_of(st.text(max_size=10), st.sampled_from(["", "model", "messages", "role", "content", "__proto__"]))

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(EDGE_INTS),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)
json_objects = st.dictionaries(keys, json_values, max_size=5)


# -- values fields expect in a language of their own ----------------------------------------

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PNG_B64 = base64.b64encode(PNG).decode()

images = st.one_of(
    st.sampled_from([
        PNG_B64,
        f"data:image/png;base64,{PNG_B64}",
        f"data:;base64,{PNG_B64}",
        base64.urlsafe_b64encode(PNG).decode().rstrip("="),
        f" {PNG_B64[:20]}\n{PNG_B64[20:]} ",
        "",
        "   ",
        "data:",
        "data:image/png,notbase64",
        "data:image/png;base64,",
        "data:image/png;base64,!!!!",
        "not base64 at all",
        "====",
        "QUJD",  # valid base64, not an image
        base64.b64encode(b"GIF89a" + b"\x00" * 8).decode(),
        "http://127.0.0.1/x.png",
        "https://example.com/cat.png",
        "file:///etc/passwd",
    ]),
    st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()),
    texts,
)

tool_arguments = st.one_of(
    json_objects.map(json.dumps),
    json_values.map(json.dumps),
    st.sampled_from(["", " ", "{", '{"a":', "[]", "null", '{"a": NaN}', "{'a': 1}", '{"a":1}}', "\x00"]),
    texts,
)

durations = st.one_of(
    st.sampled_from(["5m", "0", "-1", "-1m", "10", "1h30m", "300ms", "1.5h", "", "m", "5x", "µs", "1e3s", "NaN", "-"]),
    texts,
    st.floats(allow_nan=False),
    st.integers(),
)

MODELS = ["scripted", "nickname", "family-x", "no-tools", "missing-model", "", "FAMILY-x", "../../etc/passwd"]
ROLES = ["system", "developer", "user", "assistant", "tool", "USER", "Assistant", "function", ""]

# Field name -> near misses drawn alongside the type-driven values.
FIELD_HINTS: dict[str, st.SearchStrategy[Any]] = {
    "model": st.sampled_from(MODELS),
    "role": st.sampled_from(ROLES),
    "images": st.lists(images, max_size=3),
    "image_url": st.one_of(images, st.fixed_dictionaries({"url": images})),
    "url": images,
    "arguments": tool_arguments,
    "keep_alive": durations,
    "think": st.sampled_from([True, False, "low", "medium", "high", "max", "", "true"]),
    "format": st.one_of(st.sampled_from(["json", "", "xml", "JSON"]), json_objects),
    "type": st.sampled_from(["text", "image_url", "function", "input_audio", "json_object", "json_schema", ""]),
    "tool_choice": st.one_of(
        st.sampled_from(["none", "auto", "required", "any", ""]),
        st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries({"name": texts})}),
    ),
    "reasoning_effort": st.sampled_from(["none", "minimal", "low", "medium", "high", "extreme", ""]),
    "effort": st.sampled_from(["none", "minimal", "low", "medium", "high", "extreme", ""]),
    "stop": st.one_of(texts, st.lists(texts, max_size=3)),
    "mirostat": st.sampled_from([0, 1, 2, 3, -1]),
    "top_logprobs": st.sampled_from([0, 1, 20, 21, -1, 2**64]),
    "n": st.sampled_from([1, 2, 0, -1]),
}

# How often a node is replaced by a value of another shape: one in CORRUPT_ONE_IN.
CORRUPT_ONE_IN = 6


def shaped(struct_type: type[msgspec.Struct], *, corrupt: bool) -> st.SearchStrategy[dict[str, Any]]:
    """JSON objects with ``struct_type``'s fields; with ``corrupt``, any node may be a
    value of the wrong type (and objects may carry unknown keys)."""
    return _struct(mi.type_info(struct_type), corrupt)  # type: ignore[arg-type]


def _node(info: mi.Type, name: str | None, corrupt: bool) -> st.SearchStrategy[Any]:
    right = _right(info, corrupt)
    hint = FIELD_HINTS.get(name or "")
    if hint is not None:
        right = st.one_of(right, hint)
    if not corrupt:
        return right
    return st.integers(0, CORRUPT_ONE_IN - 1).flatmap(lambda n: json_values if n == 0 else right)


def _right(info: mi.Type, corrupt: bool) -> st.SearchStrategy[Any]:
    if isinstance(info, mi.StructType):
        return _struct(info, corrupt)
    if isinstance(info, mi.ListType):
        return st.lists(_node(info.item_type, None, corrupt), max_size=3)
    if isinstance(info, mi.DictType):
        return st.dictionaries(keys, _node(info.value_type, None, corrupt), max_size=3)
    if isinstance(info, mi.UnionType):
        return st.one_of([_right(t, corrupt) for t in info.types])
    if isinstance(info, mi.LiteralType):
        return st.sampled_from(list(info.values))
    if isinstance(info, mi.StrType):
        return texts
    if isinstance(info, mi.BoolType):
        return st.booleans()
    if isinstance(info, mi.IntType):
        return st.one_of(st.integers(-5, 100), st.sampled_from(EDGE_INTS))
    if isinstance(info, mi.FloatType):
        return st.one_of(st.floats(-3, 3), st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(EDGE_INTS))
    if isinstance(info, mi.NoneType):
        return st.none()
    return json_values  # Any, and whatever else a wire Struct may come to hold


def _struct(info: mi.StructType, corrupt: bool) -> st.SearchStrategy[dict[str, Any]]:
    required = {f.encode_name: _node(f.type, f.name, corrupt) for f in info.fields if f.required}
    optional = {f.encode_name: _node(f.type, f.name, corrupt) for f in info.fields if not f.required}
    body = st.fixed_dictionaries(required, optional=optional)
    if not corrupt:
        return body
    # Unknown keys are ignored by design; missing required ones must be a clean 400.
    extra = st.dictionaries(st.text(string.ascii_lowercase, min_size=1, max_size=6), json_values, max_size=2)
    dropped = st.sampled_from([None, *required])
    return st.tuples(body, extra, dropped).map(lambda t: _merge(*t))


def _merge(body: dict[str, Any], extra: dict[str, Any], dropped: str | None) -> dict[str, Any]:
    merged = {**extra, **body}
    if dropped is not None:
        merged.pop(dropped, None)
    return merged


SERVED_MODELS = ["scripted", "nickname", "family-x", "no-tools"]


def served_bodies(struct_type: type[msgspec.Struct]) -> st.SearchStrategy[dict[str, Any]]:
    """Well-typed bodies for a model the fuzz server serves: these reach past decoding into
    conversion, limits, capability checks and the backend."""
    return st.tuples(shaped(struct_type, corrupt=False), st.sampled_from(SERVED_MODELS)).map(
        lambda t: {**t[0], "model": t[1]}
    )


def bodies(struct_type: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    """What a client might POST: well-typed bodies for any model, corrupted ones, any JSON."""
    return st.one_of(shaped(struct_type, corrupt=False), shaped(struct_type, corrupt=True), json_values)


# -- canonical events -------------------------------------------------------------------------

json_arguments = st.dictionaries(
    st.text(max_size=8),
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False), texts),
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
        max_leaves=8,
    ),
    max_size=4,
)
tool_calls = st.builds(
    ToolCall,
    name=texts,
    arguments=json_arguments,
    id=st.one_of(st.none(), texts),
    index=st.integers(0, 3),
)
top_logprobs = st.builds(
    TopLogprob,
    token=texts,
    logprob=st.floats(max_value=0, allow_nan=False),
    bytes=st.one_of(st.none(), st.lists(st.integers(0, 255), max_size=4)),
)
token_logprobs = st.builds(
    TokenLogprob,
    token=texts,
    logprob=st.floats(max_value=0, allow_nan=False),
    bytes=st.one_of(st.none(), st.lists(st.integers(0, 255), max_size=4)),
    top_logprobs=st.lists(top_logprobs, max_size=3),
)
counts = st.integers(0, 2**40)

body_events: st.SearchStrategy[Event] = st.one_of(
    st.builds(ContentDelta, texts),
    st.builds(ThinkingDelta, texts),
    st.builds(ToolCallDone, tool_calls),
    st.builds(
        ToolCallFragment,
        index=st.integers(0, 3),
        arguments=st.one_of(tool_arguments, st.just("")),
        id=st.one_of(st.none(), texts),
        name=st.one_of(st.none(), texts),
    ),
    st.builds(Logprobs, st.lists(token_logprobs, max_size=3)),
    st.builds(RoleStart),
)
finishes = st.builds(
    Finish,
    reason=st.sampled_from(["stop", "length", "tool_calls", "load", "unload"]),
    usage=st.builds(Usage, counts, counts),
    timings=st.builds(Timings, counts, counts, counts, counts),
)
errors = st.builds(
    ErrorEvent,
    message=texts,
    status=st.sampled_from([400, 401, 404, 429, 500, 502, 503, 504, 599]),
    retry_after=st.one_of(st.none(), st.floats(0, 100)),
)
any_events: st.SearchStrategy[Event] = st.one_of(body_events, finishes, errors)

# What a backend yields: events, then at most one terminal Finish or ErrorEvent.
replies = st.tuples(st.lists(body_events, max_size=12), st.one_of(st.none(), finishes, errors)).map(
    lambda t: [*t[0], *([t[1]] if t[1] is not None else [])]
)
