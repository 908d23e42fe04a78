"""A canonical request as the body for an upstream's ``/v1/responses`` (``api: responses``).

Stateless on purpose: the whole conversation goes as ``input`` items with
``store: false``, so failover between endpoints and restarts lose nothing. Leading
system messages become ``instructions``. Thinking in history is not sent: OpenAI only
takes back reasoning as its own encrypted items (docs/fidelity.md).
"""

from __future__ import annotations

from typing import Any

import msgspec

from dragoman.adapters.call_ids import paired_calls
from dragoman.adapters.canonical import ChatRequest, ImagePart, Message, TextPart
from dragoman.adapters.errors import UnsupportedFeature
from dragoman.adapters.openai.upstream_request import image_data_uri
from dragoman.adapters.responses.ids import new_call_id

# Sampling options the Responses API has a field for (the rest are dropped and named).
CARRIED = ("temperature", "top_p", "num_predict")

_encoder = msgspec.json.Encoder()


def to_upstream(request: ChatRequest, model: str) -> tuple[bytes, list[str]]:
    """The body, and the names of the options it could not carry."""
    instructions, items = _input(request.messages)
    body: dict[str, Any] = {"model": model, "input": items, "store": False, "stream": request.stream}
    if instructions:
        body["instructions"] = instructions
    options = request.options
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.top_p is not None:
        body["top_p"] = options.top_p
    if options.num_predict is not None and options.num_predict > 0:
        body["max_output_tokens"] = options.num_predict
    if request.tools:
        body["tools"] = [
            {"type": "function", "name": t.name, **({"description": t.description} if t.description else {}),
             "parameters": t.parameters or {"type": "object", "properties": {}}}
            for t in request.tools
        ]  # fmt: skip
        choice = request.tool_choice
        if choice.mode == "function":
            body["tool_choice"] = {"type": "function", "name": choice.name}
        elif choice.mode != "auto":
            body["tool_choice"] = choice.mode
        if request.parallel_tool_calls is False:
            body["parallel_tool_calls"] = False
    fmt = request.response_format
    if fmt.type == "json":
        body["text"] = {"format": {"type": "json_object"}}
    elif fmt.type == "json_schema":
        spec: dict[str, Any] = {"type": "json_schema", "name": fmt.name or "schema", "schema": fmt.schema}
        if fmt.strict is not None:
            spec["strict"] = fmt.strict
        body["text"] = {"format": spec}
    if request.think is False:
        body["reasoning"] = {"effort": "none"}
    elif request.think or request.think_level:
        body["reasoning"] = {"effort": request.think_level or "medium"}
    if options.stop:
        message = "stop: an upstream's /v1/responses takes no stop sequences; omit them, or use api: chat for this model"
        raise UnsupportedFeature(message, param="stop")
    dropped = [name for name in options.__struct_fields__ if name not in (*CARRIED, "stop") and getattr(options, name) is not None]
    return _encoder.encode(body), dropped


def _input(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    leading: list[str] = []
    items: list[dict[str, Any]] = []
    for message in paired_calls(messages, new_call_id):
        if message.role == "system" and not items:
            leading.append(message.text)
        elif message.role == "assistant":
            if message.text:
                items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": message.text}]})
            items += [
                {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": _encoder.encode(call.arguments).decode()}
                for call in message.tool_calls
            ]
        elif message.role == "tool":
            items.append({"type": "function_call_output", "call_id": message.tool_call_id, "output": message.text})
        else:
            role = message.role if message.role in ("user", "system", "developer") else "user"
            items.append({"type": "message", "role": role, "content": _parts(message)})
    return "\n\n".join(t for t in leading if t), items


def _parts(message: Message) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            parts.append({"type": "input_text", "text": part.text})
        elif isinstance(part, ImagePart):
            parts.append({"type": "input_image", "image_url": image_data_uri(part)})
    return parts


__all__ = ["to_upstream"]
