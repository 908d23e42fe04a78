"""A canonical request as the body for an OpenAI-speaking upstream.

OpenAI has no field for several of Ollama's sampling options; they are dropped and
named (for the caller to log), or sent as extra body fields to servers that take them.
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from dragoman.adapters.canonical import (
    ChatRequest,
    CompletionRequest,
    ImagePart,
    Message,
    ResponseFormat,
    SamplingOptions,
    TextPart,
    Tool,
)
from dragoman.adapters.errors import UnsupportedFeature
from dragoman.adapters.call_ids import paired_calls
from dragoman.adapters.images import sniff_image_mime
from dragoman.adapters.logit_bias import wire_logit_bias
from dragoman.adapters.openai.ids import new_call_id
from dragoman.adapters.tool_choice import wire_tool_choice

# Sampling options with a top-level OpenAI field of the same name.
OPENAI_OPTIONS = ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty")
# Options OpenAI has no field for; vLLM-style servers take them as extra body fields.
EXTRA_OPTIONS = (
    "top_k",
    "min_p",
    "repeat_penalty",
    "repeat_last_n",
    "tfs_z",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "num_ctx",
)

_encoder = msgspec.json.Encoder()


def to_upstream(request: ChatRequest, model: str, *, extra_options: bool = False) -> tuple[bytes, list[str]]:
    """The JSON body for an OpenAI-speaking upstream, and the names of the options it
    could not carry (sent as extra body fields instead when ``extra_options``)."""
    body: dict[str, Any] = {"model": model, "messages": _upstream_messages(request.messages)}
    dropped = _put_options(body, request.options, extra_options=extra_options)
    if request.tools:
        body["tools"] = [_upstream_tool(tool) for tool in request.tools]
        if (choice := wire_tool_choice(request.tool_choice)) is not None:
            body["tool_choice"] = choice
        if request.parallel_tool_calls is False:
            body["parallel_tool_calls"] = False
    if request.response_format.type != "text":
        body["response_format"] = _upstream_format(request.response_format)
    effort = _upstream_effort(request)
    if effort is not None:
        body["reasoning_effort"] = effort
    if request.logprobs:
        body["logprobs"] = True
        if request.top_logprobs:
            body["top_logprobs"] = request.top_logprobs
    if request.logit_bias:
        body["logit_bias"] = wire_logit_bias(request.logit_bias)
    body["stream"] = request.stream
    if request.stream:
        body["stream_options"] = {"include_usage": True}
    return _encoder.encode(body), dropped


def completion_to_upstream(
    request: CompletionRequest, model: str, *, extra_options: bool = False
) -> tuple[bytes, list[str]]:
    """The ``/v1/completions`` body for a raw or fill-in-the-middle completion (a
    templated one is a chat: :meth:`CompletionRequest.as_chat`)."""
    if request.images:
        raise UnsupportedFeature(
            "images: an OpenAI-compatible /v1/completions takes no images; send them with a templated prompt "
            "(neither raw nor suffix), which goes to the upstream's chat endpoint",
            param="images",
        )
    body: dict[str, Any] = {"model": model, "prompt": request.prompt}
    if request.suffix is not None:
        body["suffix"] = request.suffix
    dropped = _put_options(body, request.options, extra_options=extra_options)
    # Absent, max_tokens is 16 on /v1/completions; null is "up to the context", which
    # is what Ollama's unset num_predict means.
    body.setdefault("max_tokens", None)
    if request.response_format.type != "text":
        body["response_format"] = _upstream_format(request.response_format)
    if request.logprobs:
        body["logprobs"] = request.top_logprobs
    if request.logit_bias:
        body["logit_bias"] = wire_logit_bias(request.logit_bias)
    body["stream"] = request.stream
    if request.stream:
        body["stream_options"] = {"include_usage": True}
    return _encoder.encode(body), dropped


def _put_options(body: dict[str, Any], options: SamplingOptions, *, extra_options: bool) -> list[str]:
    for name in OPENAI_OPTIONS:
        value = getattr(options, name)
        if value is not None:
            body[name] = value
    # Negative num_predict is Ollama's "no limit", which is also OpenAI's default.
    if options.num_predict is not None and options.num_predict >= 0:
        body["max_tokens"] = options.num_predict
    if options.stop:
        body["stop"] = options.stop
    dropped = []
    # repeat_penalty is multiplicative, frequency_penalty additive: never one for the other.
    for name in EXTRA_OPTIONS:
        value = getattr(options, name)
        if value is None:
            continue
        if extra_options:
            body[name] = value
        else:
            dropped.append(name)
    return dropped


def _upstream_tool(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        function["description"] = tool.description
    function["parameters"] = tool.parameters or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def _upstream_format(fmt: ResponseFormat) -> dict[str, Any]:
    if fmt.type == "json" or fmt.schema is None:
        return {"type": "json_object"}
    spec: dict[str, Any] = {"name": fmt.name or "schema", "schema": fmt.schema}
    if fmt.strict is not None:
        spec["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": spec}


def _upstream_effort(request: ChatRequest) -> str | None:
    if request.think is False:
        return "none"
    if request.think_level is not None:
        return request.think_level
    return "medium" if request.think else None  # OpenAI's own default depth


def _upstream_messages(messages: list[Message]) -> list[dict[str, Any]]:
    converted: list[dict[str, Any]] = []
    for message in paired_calls(messages, new_call_id):
        if message.role == "assistant":
            converted.append(_upstream_assistant(message))
        elif message.role == "tool":
            converted.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text})
        else:
            converted.append(_upstream_plain(message))
    return converted


def _upstream_assistant(message: Message) -> dict[str, Any]:
    text = message.text
    converted: dict[str, Any] = {"role": "assistant", "content": text or (None if message.tool_calls else "")}
    if message.tool_calls:
        converted["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": _encoder.encode(call.arguments).decode()},
            }
            for call in message.tool_calls
        ]
    if message.name:
        converted["name"] = message.name
    return converted


def _upstream_plain(message: Message) -> dict[str, Any]:
    converted: dict[str, Any] = {"role": message.role, "content": _upstream_content(message)}
    if message.name:
        converted["name"] = message.name
    return converted


def _upstream_content(message: Message) -> str | list[dict[str, Any]]:
    if not message.images:
        return message.text
    return [
        {"type": "text", "text": part.text}
        if isinstance(part, TextPart)
        else {"type": "image_url", "image_url": {"url": image_data_uri(part)}}
        for part in message.parts
    ]


def image_data_uri(image: ImagePart) -> str:
    """A data URI whose type is sniffed from the bytes, not trusted from the client."""
    mime = sniff_image_mime(image.data) or image.mime_type
    return f"data:{mime};base64,{base64.b64encode(image.data).decode('ascii')}"
