"""An OpenAI client's chat request as the canonical request.

Checks that types alone cannot express raise ``RequestError`` with the field path as the
client wrote it (``messages[1].content[0].type``), so the 400 says what to fix.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from dragoman.adapters.canonical import (
    ChatRequest,
    ImagePart,
    Message,
    Part,
    ResponseFormat,
    SamplingOptions,
    TextPart,
    ThinkLevel,
    Tool,
    ToolCall,
    ToolChoice,
)
from dragoman.adapters.durations import parse_duration
from dragoman.adapters.errors import RequestError
from dragoman.adapters.images import decode_base64_image
from dragoman.adapters.json_depth import TOO_DEEP
from dragoman.adapters.logit_bias import parse_logit_bias
from dragoman.adapters.openai import wire
from dragoman.adapters.tool_choice import parse_tool_choice

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
MAX_TOP_LOGPROBS = 20

_URL_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://")


def to_canonical(request: wire.ChatCompletionRequest) -> ChatRequest:
    """The canonical request for an OpenAI client's request."""
    if not request.messages:  # OpenAI refuses it too (Ollama's /api/chat loads the model instead)
        raise RequestError("messages: must not be empty; send at least one message", param="messages")
    tools = [_tool(t) for t in request.tools or ()]
    think, think_level = _reasoning(request)
    return ChatRequest(
        model=request.model,
        messages=_messages(request.messages),
        tools=tools,
        tool_choice=_tool_choice(request.tool_choice, tools),
        parallel_tool_calls=False if request.parallel_tool_calls is False else None,
        options=_options(request),
        response_format=_response_format(request.response_format),
        think=think,
        think_level=think_level,
        logprobs=bool(request.logprobs),
        top_logprobs=_top_logprobs(request),
        logit_bias=parse_logit_bias(request.logit_bias),
        # As llama-server: progress chunks are a stream's; a whole reply has none to carry.
        return_progress=bool(request.return_progress and request.stream),
        stream=bool(request.stream),
        keep_alive=keep_alive_seconds(request.keep_alive),
        cache_key=request.prompt_cache_key or request.user,
    )


def _reasoning(request: wire.ChatCompletionRequest) -> tuple[bool | None, ThinkLevel | None]:
    effort, param = request.reasoning_effort, "reasoning_effort"
    if request.reasoning is not None and request.reasoning.effort is not None:
        effort, param = request.reasoning.effort, "reasoning.effort"
    if effort is None:
        return None, None
    if effort not in REASONING_EFFORTS:
        allowed = ", ".join(REASONING_EFFORTS)
        raise RequestError(f"{param}: unsupported value '{effort}'; allowed: {allowed}", param=param)
    if effort == "none":
        return False, None
    return True, "low" if effort == "minimal" else effort  # type: ignore[return-value]


def _tool_choice(choice: str | wire.NamedToolChoice | None, tools: list[Tool]) -> ToolChoice:
    if isinstance(choice, wire.NamedToolChoice):
        return parse_tool_choice(None, choice.function.name, tools)
    return parse_tool_choice(choice, None, tools)


def _options(request: wire.ChatCompletionRequest) -> SamplingOptions:
    # Unset stays None so the model's configured defaults apply (Ollama forces 1.0).
    max_tokens = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    return sampling_options(request, max_tokens)


def sampling_options(request: Any, max_tokens: int | None) -> SamplingOptions:
    """The sampling fields chat and completion requests share, as canonical options."""
    return SamplingOptions(
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        min_p=request.min_p,
        repeat_penalty=request.repeat_penalty,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        seed=request.seed,
        num_predict=max_tokens,
        stop=stop_sequences(request.stop),
    )


def stop_sequences(stop: str | list[str] | None) -> list[str] | None:
    sequences = [stop] if isinstance(stop, str) else stop or []
    return [s for s in sequences if s] or None


def _response_format(fmt: wire.ResponseFormat | None) -> ResponseFormat:
    if fmt is None or fmt.type == "text":
        return ResponseFormat()
    if fmt.type == "json_object":
        return ResponseFormat(type="json")
    spec = fmt.json_schema
    if spec is None:
        param = "response_format.json_schema"
        raise RequestError(f"{param}: required when response_format.type is 'json_schema'", param=param)
    if spec.schema is None:  # a schema-less json_schema asks for any JSON object
        return ResponseFormat(type="json", name=spec.name, strict=spec.strict)
    return ResponseFormat(type="json_schema", schema=spec.schema, name=spec.name, strict=spec.strict)


def _top_logprobs(request: wire.ChatCompletionRequest) -> int:
    top = request.top_logprobs
    if top is None:
        return 0
    if not 0 <= top <= MAX_TOP_LOGPROBS:
        message = f"top_logprobs: must be between 0 and {MAX_TOP_LOGPROBS}, got {top}"
        raise RequestError(message, param="top_logprobs")
    if not request.logprobs:
        raise RequestError("top_logprobs: requires logprobs to be true", param="top_logprobs")
    return top


def keep_alive_seconds(value: float | str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise RequestError(f"keep_alive: {exc}", param="keep_alive") from exc


def _tool(tool: wire.OpenAIToolDefinition) -> Tool:
    function = tool.function
    return Tool(name=function.name, description=function.description, parameters=function.parameters or {})


def _messages(messages: list[wire.ChatCompletionMessage]) -> list[Message]:
    converted: list[Message] = []
    for i, message in enumerate(messages):
        converted.append(_message(message, i, converted))
    return converted


def _message(message: wire.ChatCompletionMessage, i: int, earlier: list[Message]) -> Message:
    parts = _parts(message.content, f"messages[{i}].content")
    if message.role == "assistant":
        calls = message.tool_calls or ()
        return Message(
            role="assistant",
            parts=parts,
            thinking=message.reasoning_content or message.reasoning or None,
            tool_calls=[_tool_call(call, f"messages[{i}].tool_calls[{j}]", j) for j, call in enumerate(calls)],
            name=message.name,
        )
    if message.role == "tool":
        return Message(
            role="tool",
            parts=parts,
            tool_call_id=message.tool_call_id,
            tool_name=_called_function(message.tool_call_id, earlier) or message.name,
            name=message.name,
        )
    # Ollama passes "developer" through as an unknown role; it is OpenAI's new "system".
    role = "system" if message.role == "developer" else message.role
    return Message(role=role, parts=parts, name=message.name)


def _called_function(call_id: str | None, earlier: list[Message]) -> str | None:
    """The function name of the latest earlier call with this id."""
    if call_id is None:
        return None
    for message in reversed(earlier):
        for call in message.tool_calls:
            if call.id == call_id:
                return call.name
    return None


def _parts(content: str | list[wire.ContentPart] | None, path: str) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(content)] if content else []
    # All parts stay in one message (Ollama splits them into one message each).
    return [_part(part, f"{path}[{j}]") for j, part in enumerate(content)]


def _part(part: wire.ContentPart, path: str) -> Part:
    if part.type == "text":
        if part.text is None:
            raise RequestError(f"{path}.text: required for a text part", param=f"{path}.text")
        return TextPart(part.text)
    if part.type == "image_url":
        return _image(part.image_url, f"{path}.image_url")
    param = f"{path}.type"
    raise RequestError(f"{param}: unsupported content part type '{part.type}'; allowed: text, image_url", param=param)


def _image(image_url: wire.ImageURL | str | None, path: str) -> ImagePart:
    if image_url is None:
        raise RequestError(f"{path}: required for an image_url part", param=path)
    url, param = (image_url, path) if isinstance(image_url, str) else (image_url.url, f"{path}.url")
    if _URL_SCHEME.match(url):
        # Fetching client-named URLs from the server is an SSRF risk.
        hint = "send the image as a data URI (data:image/png;base64,…)"
        raise RequestError(f"{param}: remote image URLs are not fetched; {hint}", param=param)
    return decode_base64_image(url, param)


def _tool_call(call: wire.OpenAIToolCall, path: str, position: int) -> ToolCall:
    arguments = request_arguments(call.function.arguments, f"{path}.function.arguments")
    return ToolCall(name=call.function.name, arguments=arguments, id=call.id, index=position)


def request_arguments(value: str | dict[str, Any], param: str) -> dict[str, Any]:
    """A tool call's arguments in a client's history (a JSON object, or the text of one)
    as a dict; a 400 naming ``param`` when they are not one. The Responses dialect's
    ``function_call`` items read theirs here too."""
    if isinstance(value, dict):
        return value
    if not value.strip():  # Ollama 400s on "", which some clients send for no arguments
        return {}
    try:
        decoded = msgspec.json.decode(value)
    except msgspec.DecodeError as exc:
        raise RequestError(f"{param}: not valid JSON ({exc})", param=param) from exc
    except RecursionError:
        raise RequestError(f"{param}: {TOO_DEEP}", param=param) from None
    if not isinstance(decoded, dict):
        raise RequestError(f"{param}: must be a JSON object", param=param)
    return decoded
