"""Constrained decoding (llguidance inside the library) for structured output and
forced tool calls.

``response_format`` json → the JSON schema ``{"type": "object"}`` (the library refuses
empty data); json_schema → the client's schema. ``tool_choice`` required or a named
function → a lark grammar that admits exactly one ``<tool_call>`` whose JSON names an
allowed tool and whose arguments match that tool's parameters schema (no keys beyond
its ``properties`` unless the schema allows them explicitly). Schemas get
``whitespace_flexible: false`` so weak models cannot loop on whitespace.
"""

from __future__ import annotations

import json
from typing import Any

from dragoman.adapters.canonical import ChatRequest, ResponseFormat, Tool
from dragoman.adapters.errors import RequestError
from dragoman.backends.onnx.worker_protocol import Guidance

STRICT_WHITESPACE = {"whitespace_flexible": False}


def guidance_for(request: ChatRequest, *, tools_active: bool) -> Guidance | None:
    """The constraint a request asks for; a forced tool call wins over a format."""
    if tools_active and request.tool_choice.mode in ("required", "function"):
        return Guidance("lark_grammar", tool_call_grammar(forced_tools(request)))
    if request.response_format.type != "text":
        # ensure_ascii would triple a non-ASCII schema (a 24 MB one made a 72 MB frame).
        return Guidance("json_schema", json.dumps(response_schema(request.response_format), ensure_ascii=False))
    return None


def forced_tools(request: ChatRequest) -> list[Tool]:
    choice = request.tool_choice
    if choice.mode != "function":
        return request.tools
    chosen = [t for t in request.tools if t.name == choice.name]
    if not chosen:
        names = ", ".join(t.name for t in request.tools) or "none"
        raise RequestError(
            f"tool_choice names '{choice.name}', which is not among the tools ({names})", param="tool_choice"
        )
    return chosen


def response_schema(response_format: ResponseFormat) -> dict[str, Any]:
    if response_format.type == "json" or not response_format.schema:
        schema: dict[str, Any] = {"type": "object"}
    else:
        schema = dict(response_format.schema)
    schema.setdefault("x-guidance", STRICT_WHITESPACE)
    return schema


def tool_call_grammar(tools: list[Tool]) -> str:
    """Lark: ``<tool_call>`` + one JSON call of an allowed tool + ``</tool_call>``."""
    rules = [f"call_{i}: %json {json.dumps(_call_schema(tool), ensure_ascii=False)}" for i, tool in enumerate(tools)]
    alternatives = " | ".join(f"call_{i}" for i in range(len(tools)))
    return "\n".join(['start: "<tool_call>" call "</tool_call>"', f"call: {alternatives}", *rules]) + "\n"


def _call_schema(tool: Tool) -> dict[str, Any]:
    parameters: dict[str, Any] = dict(tool.parameters) if tool.parameters else {"type": "object", "properties": {}}
    parameters.pop("x-guidance", None)
    parameters.pop("$schema", None)
    # Unlisted arguments are never valid in a call, and without this bound a weak
    # model invents keys forever.
    if "properties" in parameters:
        parameters.setdefault("additionalProperties", False)
    call: dict[str, Any] = {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": parameters},
        "required": ["name", "arguments"],
        "additionalProperties": False,
        "x-guidance": STRICT_WHITESPACE,
    }
    # The call is the schema's root now, so "#/$defs/X" (what Pydantic, zod and MCP
    # servers write) resolves against it: the definitions move up to where it looks.
    for key in ("$defs", "definitions"):
        if key in parameters:
            call[key] = parameters.pop(key)
    return call
