"""JSON ``null`` on Ollama's request fields, read as Ollama's Go server reads it.

``encoding/json`` decodes ``null`` into a field's zero value or a nil pointer and Ollama
treats both as the field left out (``api/types.go``: ``Stream *bool``, ``Messages
[]Message``, ``Format json.RawMessage`` where ``null`` is "not set" in
``llm/llama_server.go``, ``Options map[string]any`` skipping nil values). So a body with
``null`` must mean exactly what the body without that field means; a wrong type is
still refused naming the field, and so is ``null`` for a required field."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from dragoman.adapters.ollama import embed, generate, to_canonical, wire
from dragoman.proxy.model_admin_routes import PullRequest
from dragoman.proxy.ollama_routes import ShowRequest
from dragoman.proxy.strict_body import decode_body

USER = {"role": "user", "content": "hi"}
CHAT = {"model": "m", "messages": [USER]}
GENERATE = {"model": "m", "prompt": "hi"}

# (wire type, the body without the field, the field's path as a tuple of keys/indexes)
NULLABLE = [
    *[(wire.ChatRequest, CHAT, (f,)) for f in (
        "messages", "stream", "format", "tools", "keep_alive", "options", "think",
        "logprobs", "top_logprobs", "tool_choice",
    )],
    *[(wire.ChatRequest, CHAT, ("messages", 0, f)) for f in (
        "content", "thinking", "images", "tool_calls", "tool_name", "tool_call_id",
    )],
    (wire.ChatRequest, {**CHAT, "options": {"num_predict": 3}}, ("options", "temperature")),
    (wire.ChatRequest, {**CHAT, "options": {"num_predict": 3}}, ("options", "stop")),
    (
        wire.ChatRequest,
        {"model": "m", "messages": [USER, {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]},
        ("messages", 1, "tool_calls", 0, "function", "arguments"),
    ),
    (
        wire.ChatRequest,
        {"model": "m", "messages": [USER, {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]},
        ("messages", 1, "tool_calls", 0, "function", "index"),
    ),
    (wire.ChatRequest, {**CHAT, "tools": [{"function": {"name": "f"}}]}, ("tools", 0, "type")),
    (wire.ChatRequest, {**CHAT, "tools": [{"function": {"name": "f"}}]}, ("tools", 0, "function", "parameters")),
    *[(wire.GenerateRequest, GENERATE, (f,)) for f in (
        "prompt", "suffix", "system", "template", "context", "stream", "raw", "format",
        "keep_alive", "images", "options", "think", "logprobs", "top_logprobs",
    )],
    *[(embed.EmbedWireRequest, {"model": "m", "input": "hi"}, (f,)) for f in (
        "input", "truncate", "dimensions", "keep_alive", "options",
    )],
    *[(embed.LegacyEmbeddingRequest, {"model": "m", "prompt": "hi"}, (f,)) for f in ("prompt", "keep_alive", "options")],
    *[(ShowRequest, {"model": "m"}, (f,)) for f in ("name", "verbose")],
    *[(PullRequest, {"model": "m"}, (f,)) for f in ("name", "stream", "insecure")],
]


def _edited(body: Any, path: tuple[Any, ...], *, null: bool) -> Any:
    """``body`` with the field at ``path`` set to ``null``, or left out."""
    copy = msgspec.json.decode(msgspec.json.encode(body))
    here = copy
    for key in path[:-1]:
        here = here[key]
    if null:
        here[path[-1]] = None
    else:
        here.pop(path[-1], None)
    return copy


def _decode(type_: Any, body: Any) -> Any:
    return decode_body(msgspec.json.encode(body), type_)


def _meaning(type_: Any, request: Any) -> Any:
    """What the rest of dragoman sees: the canonical request where there is one."""
    if type_ is wire.ChatRequest:
        return to_canonical(request)
    if type_ is wire.GenerateRequest:
        return generate.to_canonical(request)
    return request


@pytest.mark.parametrize(("type_", "body", "path"), NULLABLE, ids=[f"{t.__name__}-{'.'.join(map(str, p))}" for t, _, p in NULLABLE])
def test_null_means_the_field_left_out(type_: Any, body: dict[str, Any], path: tuple[Any, ...]) -> None:
    with_null = _decode(type_, _edited(body, path, null=True))
    without = _decode(type_, _edited(body, path, null=False))
    assert with_null == without
    assert _meaning(type_, with_null) == _meaning(type_, without)
    # …and what dragoman writes for an upstream Ollama server leaves the field out too
    assert msgspec.json.encode(with_null) == msgspec.json.encode(without)


def test_null_stream_streams_and_null_messages_loads() -> None:
    request = _decode(wire.ChatRequest, {"model": "m", "messages": None, "stream": None})
    assert request.stream is True and request.messages == []
    generated = _decode(wire.GenerateRequest, {"model": "m", "prompt": None, "raw": None, "suffix": None})
    assert generated.stream is True and (generated.prompt, generated.raw, generated.suffix) == ("", False, "")


REFUSED = [
    (wire.ChatRequest, {"model": None}, "model"),
    (wire.ChatRequest, {**CHAT, "messages": [{"role": None, "content": "hi"}]}, "messages[0].role"),
    (wire.ChatRequest, {**CHAT, "tools": [{"function": {"name": None}}]}, "tools[0].function.name"),
    (wire.ChatRequest, {**CHAT, "tools": [{"function": None}]}, "tools[0].function"),
    (wire.ChatRequest, {**CHAT, "stream": "false"}, "stream"),
    (wire.ChatRequest, {**CHAT, "messages": {}}, "messages"),
    (wire.ChatRequest, {**CHAT, "messages": [None]}, "messages[0]"),
    (wire.ChatRequest, {**CHAT, "logprobs": 1}, "logprobs"),
    (wire.ChatRequest, {**CHAT, "top_logprobs": 21}, "top_logprobs"),
    (wire.GenerateRequest, {**GENERATE, "raw": "yes"}, "raw"),
    (wire.GenerateRequest, {**GENERATE, "prompt": 5}, "prompt"),
    (embed.LegacyEmbeddingRequest, {"model": "m", "prompt": []}, "prompt"),
    (ShowRequest, {"model": "m", "verbose": "no"}, "verbose"),
]


@pytest.mark.parametrize(("type_", "body", "field"), REFUSED, ids=[f for _, _, f in REFUSED])
def test_wrong_types_and_null_required_fields_are_still_refused(type_: Any, body: dict[str, Any], field: str) -> None:
    from dragoman.adapters.errors import RequestError

    with pytest.raises(RequestError) as refused:
        _decode(type_, body)
    assert str(refused.value).startswith(f"{field}: "), str(refused.value)
