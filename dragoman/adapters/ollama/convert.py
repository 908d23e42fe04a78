"""Ollama ``/api/chat`` requests ⇄ the canonical request.

``to_canonical`` reads what a native client sent; ``to_upstream`` writes what an
Ollama server should receive. Types are already checked by decoding; here are the
checks types cannot express, each raising a ``RequestError`` that names the field.
"""

from __future__ import annotations

import base64
import re
from typing import Any, get_args

import msgspec

from dragoman.adapters.aggregate import MalformedToolCall, parse_arguments
from dragoman.adapters.canonical import (
    ChatRequest,
    Message,
    RequestBase,
    Part,
    ResponseFormat,
    SamplingOptions,
    TextPart,
    ThinkLevel,
    Tool,
    ToolCall,
)
from dragoman.adapters.durations import parse_duration
from dragoman.adapters.errors import DragomanError, RequestError, error_for_status
from dragoman.adapters.images import decode_base64_image
from dragoman.adapters.ollama import wire
from dragoman.adapters.tool_choice import parse_tool_choice

_THINK_LEVELS: tuple[str, ...] = get_args(ThinkLevel)
_THINK_ALLOWED = 'true, false, "low", "medium", "high"'
_UNITLESS_NEGATIVE = re.compile(r"\s*-\d+(?:\.\d+)?\s*")


# -- client request → canonical --------------------------------------------------------


def to_canonical(request: wire.ChatRequest) -> ChatRequest:
    think, think_level = parse_think(request.think)
    top_logprobs = request.top_logprobs or 0  # null is 0 already (GoRequest)
    if not 0 <= top_logprobs <= 20:
        raise RequestError("top_logprobs must be between 0 and 20", param="top_logprobs")
    tools = [_tool(t, f"tools[{i}]") for i, t in enumerate(request.tools or [])]
    choice = request.tool_choice
    named = choice.function.name if isinstance(choice, wire.NamedToolChoice) else None
    return ChatRequest(
        model=request.model,
        messages=_messages(request.messages or []),
        tools=tools,
        tool_choice=parse_tool_choice(None if named else choice, named, tools),  # type: ignore[arg-type]
        options=sampling_options(request.options),
        response_format=parse_format(request.format),
        think=think,
        think_level=think_level,
        logprobs=bool(request.logprobs),
        top_logprobs=top_logprobs,
        stream=bool(request.stream),
        keep_alive=keep_alive_seconds(request.keep_alive),
    )


def parse_keep_alive(value: float | str | None) -> float | None:
    """Seconds the model stays loaded: ``None`` when not given, ``-1.0`` for forever.

    A number is seconds; a string is a Go duration (``"5m"``, ``"1h30m"``, ``"0"``).
    Any negative value means forever; ``"-1"`` is taken although Go would want a unit,
    because clients copy it from Ollama's docs. A unit-less positive string ``"10"``
    raises ``ValueError``, as in Ollama.
    """
    if value is None:
        return None
    if isinstance(value, str) and _UNITLESS_NEGATIVE.fullmatch(value):
        return -1.0
    seconds = parse_duration(value)
    return -1.0 if seconds < 0 else seconds


def parse_think(value: bool | str | None) -> tuple[bool | None, ThinkLevel | None]:
    """``(think, think_level)`` from Ollama's ``think``; a level implies thinking on."""
    if value is None or isinstance(value, bool):
        return value, None
    if value in _THINK_LEVELS:
        return True, value  # type: ignore[return-value]
    raise RequestError(f"think: invalid value {value!r}; allowed: {_THINK_ALLOWED}", param="think")


def parse_format(value: str | dict[str, Any] | None) -> ResponseFormat:
    """``"json"`` → JSON mode, an object → that JSON Schema; ``""`` is "not set" as in Ollama."""
    if value is None or value == "":
        return ResponseFormat()
    if isinstance(value, dict):
        return ResponseFormat(type="json_schema", schema=value)
    if value == "json":
        return ResponseFormat(type="json")
    raise RequestError(f'format: invalid value {value!r}; expected "json" or a JSON Schema object', param="format")


def keep_alive_seconds(value: float | str | None) -> float | None:
    """:func:`parse_keep_alive`, with a bad value as a 400 naming ``keep_alive``."""
    try:
        return parse_keep_alive(value)
    except ValueError as exc:
        raise RequestError(f"keep_alive: {exc}", param="keep_alive") from exc


def _messages(messages: list[wire.ChatMessage]) -> list[Message]:
    result: list[Message] = []
    for i, message in enumerate(messages):
        result.append(_message(message, f"messages[{i}]", result))
    return result


def _message(message: wire.ChatMessage, path: str, earlier: list[Message]) -> Message:
    role = _role(message.role, path)
    parts: list[Part] = [
        decode_base64_image(image, f"{path}.images[{j}]") for j, image in enumerate(message.images or [])
    ]
    if message.content:
        parts.append(TextPart(message.content))
    tool_name = message.tool_name
    if role == "tool" and not tool_name and message.tool_call_id:
        tool_name = _called_name(message.tool_call_id, earlier)
    return Message(
        role=role,
        parts=parts,
        thinking=message.thinking or None,
        tool_calls=[_tool_call(c, j, f"{path}.tool_calls[{j}]") for j, c in enumerate(message.tool_calls or [])],
        tool_call_id=message.tool_call_id,
        tool_name=tool_name,
    )


def _role(role: str, path: str) -> str:
    """Lower-cased, as Ollama does; "developer" is OpenAI's new "system". Any other
    role goes to the model's template, which renders it or refuses it by name."""
    lowered = role.strip().lower()
    if not lowered:
        raise RequestError(f"{path}.role: must not be empty", param=f"{path}.role")
    return "system" if lowered == "developer" else lowered


def _called_name(call_id: str, earlier: list[Message]) -> str | None:
    """The function name of the latest earlier assistant call with this id."""
    for message in reversed(earlier):
        for call in message.tool_calls:
            if call.id == call_id:
                return call.name
    return None


def _tool_call(call: wire.ToolCall, index: int, path: str) -> ToolCall:
    arguments = call.function.arguments
    if isinstance(arguments, str):
        try:
            arguments = parse_arguments(arguments, call.function.name, max_depth=None)
        except MalformedToolCall as exc:
            raise RequestError(f"{path}.function.arguments: {exc.message}", param=f"{path}.function.arguments") from exc
    return ToolCall(name=call.function.name, arguments=arguments or {}, id=call.id, index=index)


def _tool(tool: wire.ToolDefinition, path: str) -> Tool:
    if tool.type != "function":
        raise RequestError(f"{path}.type: unsupported tool type {tool.type!r}; only 'function'", param=f"{path}.type")
    fn = tool.function
    return Tool(name=fn.name, description=fn.description, parameters=fn.parameters or {})


def sampling_options(options: wire.ModelOptions | None) -> SamplingOptions:
    if options is None:
        return SamplingOptions()
    fields = msgspec.structs.asdict(options)
    if isinstance(options.stop, str):
        fields["stop"] = [options.stop]
    return SamplingOptions(**fields)


# -- canonical → upstream Ollama request ------------------------------------------------


class _UpstreamChatRequest(wire.ChatRequest, kw_only=True):
    # Required here so ``stream`` is always written, even when true (the default).
    stream: bool


def to_upstream(request: ChatRequest, model: str) -> bytes:
    """The ``/api/chat`` body for an Ollama server that knows the model as ``model``."""
    return msgspec.json.encode(
        _UpstreamChatRequest(
            model=model,
            messages=[_wire_message(m) for m in request.messages],
            tools=_wire_tools(request) or None,
            format=wire_format(request.response_format),
            stream=request.stream,
            think=wire_think(request),
            keep_alive=wire_seconds(request.keep_alive),
            options=wire_options(request.options),
            logprobs=request.logprobs,
            top_logprobs=request.top_logprobs,
            tool_choice=_wire_tool_choice(request),
        )
    )


def _wire_tool_choice(request: ChatRequest) -> str | wire.NamedToolChoice | None:
    """``required`` and a named function as the extension field; ``auto`` and ``none``
    need none (``none`` sends no tools at all)."""
    if not request.tools or request.tool_choice.mode not in ("required", "function"):
        return None
    if request.tool_choice.mode == "function":
        return wire.NamedToolChoice(function=wire.FunctionName(name=request.tool_choice.name or ""))
    return "required"


def _wire_message(message: Message) -> wire.ChatMessage:
    texts = [p.text for p in message.parts if isinstance(p, TextPart)]
    images = [base64.b64encode(p.data).decode("ascii") for p in message.images]
    return wire.ChatMessage(
        role=message.role,
        content="\n".join(texts),
        thinking=message.thinking or None,
        images=images or None,
        tool_calls=[wire_tool_call(c, i) for i, c in enumerate(message.tool_calls)] or None,
        tool_name=message.tool_name,
        tool_call_id=message.tool_call_id,
    )


def wire_tool_call(call: ToolCall, index: int) -> wire.ToolCall:
    """A whole call on Ollama's wire: object arguments, ``function.index``."""
    return wire.ToolCall(
        id=call.id,
        function=wire.ToolCallFunction(index=index, name=call.name, arguments=call.arguments),
    )


def _wire_tools(request: ChatRequest) -> list[wire.ToolDefinition]:
    # Ollama has no tool_choice: "none" is honoured by not offering tools, a named
    # function by offering only that one.
    choice = request.tool_choice
    if choice.mode == "none":
        return []
    tools = request.tools
    if choice.mode == "function":
        tools = [t for t in tools if t.name == choice.name]
    return [
        wire.ToolDefinition(
            function=wire.ToolDefinitionFunction(name=t.name, description=t.description, parameters=t.parameters)
        )
        for t in tools
    ]


def wire_format(response_format: ResponseFormat) -> str | dict[str, Any] | None:
    if response_format.type == "json":
        return "json"
    if response_format.type == "json_schema":
        return response_format.schema or {}
    return None


def wire_think(request: RequestBase) -> bool | str | None:
    if request.think is False:
        return False
    return request.think_level or request.think


def wire_seconds(seconds: float | None) -> float | None:
    if seconds is None:
        return None
    return int(seconds) if float(seconds).is_integer() else seconds


def wire_options(options: SamplingOptions) -> wire.ModelOptions | None:
    fields = {k: v for k, v in msgspec.structs.asdict(options).items() if v is not None}
    return wire.ModelOptions(**fields) if fields else None


# -- upstream error ---------------------------------------------------------------------


def parse_upstream_error(status: int, body: bytes) -> DragomanError:
    """An Ollama server's error reply (``{"error":"…"}``) as the matching error."""
    try:
        message = msgspec.json.decode(body, type=wire.ErrorResponse).error
    except (msgspec.DecodeError, RecursionError):
        message = body.decode("utf-8", "replace").strip()[:500] or f"upstream answered HTTP {status}"
    return error_for_status(status, message)


__all__ = [
    "keep_alive_seconds",
    "parse_format",
    "parse_keep_alive",
    "parse_think",
    "parse_upstream_error",
    "to_canonical",
    "sampling_options",
    "to_upstream",
    "wire_format",
    "wire_options",
    "wire_seconds",
    "wire_think",
    "wire_tool_call",
]
