"""An Anthropic client's Messages request as the canonical request.

What cannot be expressed is refused with a 400 naming the field path as the client
wrote it (``messages[1].content[0].type``); what is approximated is listed in
``docs/fidelity.md``. ``cache_control`` (local prefix reuse is automatic), ``metadata``
and ``service_tier`` are accepted and ignored; ``context_management`` edits are applied
(:mod:`adapters.anthropic.context_edits`); a tool-search tool is accepted, every
deferred tool then offered up front.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from dragoman.adapters.anthropic import wire
from dragoman.adapters.anthropic.context_edits import apply_edits
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
from dragoman.adapters.errors import RequestError, UnsupportedFeature
from dragoman.adapters.images import decode_base64_image, decode_image_data_uri

MIN_THINKING_BUDGET = 1024  # Anthropic's own lower bound
TOOL_SEARCH = "tool_search_tool_"  # tool_search_tool_regex_20251119, tool_search_tool_bm25_20251119
SYSTEM_JOIN = "\n\n"

_EFFORT_LEVELS: dict[str, ThinkLevel] = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def to_canonical(request: wire.MessagesRequest, fetched: Mapping[str, str] | None = None) -> ChatRequest:
    """The canonical request; ``fetched`` maps image URLs the proxy fetched to data URIs."""
    prompt = _prompt(request, request.max_tokens, fetched)
    options = SamplingOptions(
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        num_predict=request.max_tokens,
        stop=[s for s in request.stop_sequences or () if s] or None,
    )
    messages = apply_edits(prompt.messages, request.context_management)
    return msgspec.structs.replace(prompt, messages=messages, options=options, stream=request.stream)


def count_request(request: wire.CountTokensRequest, fetched: Mapping[str, str] | None = None) -> ChatRequest:
    """The canonical request whose prompt ``count_tokens`` measures."""
    return _prompt(request, None, fetched)


def _prompt(
    request: wire.MessagesRequest | wire.CountTokensRequest, max_tokens: int | None, fetched: Mapping[str, str] | None
) -> ChatRequest:
    """What a Messages request and a count_tokens request share: the prompt."""
    _refuse_unsupported(request.mcp_servers)
    if not request.messages:  # Anthropic refuses it too; a model would answer nothing in particular
        raise RequestError("messages: at least one message is required", param="messages")
    tools = _tools(request.tools)
    think, level = _thinking(request.thinking, request.output_config, max_tokens)
    choice, parallel = _tool_choice(request.tool_choice, tools)
    return ChatRequest(
        model=request.model,
        messages=_system(request.system) + _messages(request.messages, fetched or {}),
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        response_format=_output_format(request.output_config),
        think=think,
        think_level=level,
    )


def image_blocks(messages: list[wire.MessageParam]) -> list[wire.ContentBlock]:
    """Every image block, those inside tool results too."""
    return [
        inner
        for message in messages
        for block in _blocks(message.content)
        for inner in [block, *_blocks(block.content or [])]
        if inner.type == "image"
    ]


def remote_image_urls(messages: list[wire.MessageParam]) -> list[str]:
    """Every ``url`` image source, in order, without repeats (for the proxy to fetch)."""
    urls = [b.source.url for b in image_blocks(messages) if b.source is not None and b.source.type == "url" and b.source.url]
    return list(dict.fromkeys(urls))


def think_level_for_budget(budget: int) -> ThinkLevel:
    """Anthropic's thinking budget as a depth: an approximation (docs/fidelity.md)."""
    if budget < 4096:
        return "low"
    if budget < 16384:
        return "medium"
    return "high"


# -- request-level fields ------------------------------------------------------------------


def _refuse_unsupported(mcp_servers: list[object] | None) -> None:
    if mcp_servers:
        raise UnsupportedFeature("mcp_servers: remote MCP servers are not supported; omit the field", param="mcp_servers")


def _thinking(
    thinking: wire.ThinkingParam | None, config: wire.OutputConfig | None, max_tokens: int | None
) -> tuple[bool | None, ThinkLevel | None]:
    effort = _EFFORT_LEVELS.get(config.effort) if config is not None and config.effort else None
    if thinking is None or thinking.type == "adaptive":
        return None, effort  # the model decides, as adaptive thinking asks
    if thinking.type == "disabled":
        return False, None
    budget = thinking.budget_tokens
    if budget is None:
        raise RequestError("thinking.budget_tokens: field required when thinking.type is 'enabled'", param="thinking.budget_tokens")
    if budget < MIN_THINKING_BUDGET:
        message = f"thinking.budget_tokens: must be at least {MIN_THINKING_BUDGET}, got {budget}"
        raise RequestError(message, param="thinking.budget_tokens")
    if max_tokens is not None and budget >= max_tokens:
        message = f"thinking.budget_tokens: must be less than max_tokens ({max_tokens}), got {budget}"
        raise RequestError(message, param="thinking.budget_tokens")
    return True, effort or think_level_for_budget(budget)


def _output_format(config: wire.OutputConfig | None) -> ResponseFormat:
    if config is None or config.format is None:
        return ResponseFormat()
    if config.format.schema is None:  # Anthropic requires it too; guessing JSON mode would hide the mistake
        param = "output_config.format.schema"
        raise RequestError(f"{param}: field required when output_config.format.type is 'json_schema'", param=param)
    return ResponseFormat(type="json_schema", schema=config.format.schema)


def _tools(tools: list[wire.ToolParam] | None) -> list[Tool]:
    converted: list[Tool] = []
    for i, tool in enumerate(tools or ()):
        if tool.type is not None and tool.type.startswith(TOOL_SEARCH):
            # Anthropic's tool search runs on its side; here there is no search step,
            # and every tool it would have found (defer_loading) is offered up front.
            continue
        if tool.type not in (None, "custom"):
            param = f"tools[{i}].type"
            message = f"{param}: '{tool.type}' is one of Anthropic's own tools, which run on Anthropic's side; send a custom tool with input_schema"
            raise UnsupportedFeature(message, param=param)
        if tool.input_schema is None:
            raise RequestError(f"tools[{i}].input_schema: field required", param=f"tools[{i}].input_schema")
        if any(earlier.name == tool.name for earlier in converted):
            # Which one a call means would be a guess; Anthropic refuses it as well.
            raise RequestError(f"tools[{i}].name: tool names must be unique; '{tool.name}' is used twice", param=f"tools[{i}].name")
        converted.append(Tool(name=tool.name, description=tool.description, parameters=tool.input_schema))
    return converted


def _tool_choice(choice: wire.ToolChoiceParam | None, tools: list[Tool]) -> tuple[ToolChoice, bool | None]:
    if choice is None:
        return ToolChoice(), None
    parallel = False if choice.disable_parallel_tool_use else None
    if choice.type == "tool":
        if not choice.name:
            raise RequestError("tool_choice.name: field required when tool_choice.type is 'tool'", param="tool_choice.name")
        if choice.name.startswith(TOOL_SEARCH):
            message = f"tool_choice.name: '{choice.name}' is Anthropic's tool search, which runs on its side; every deferred tool is offered directly here, so choose one of them"
            raise UnsupportedFeature(message, param="tool_choice.name")
        if all(tool.name != choice.name for tool in tools):
            raise RequestError(f"tool_choice.name: no tool named '{choice.name}' in tools", param="tool_choice.name")
        return ToolChoice(mode="function", name=choice.name), parallel
    if choice.type == "any":
        if not tools:
            raise RequestError("tool_choice: 'any' needs at least one tool in tools", param="tool_choice")
        return ToolChoice(mode="required"), parallel
    return ToolChoice(mode=choice.type), parallel


# -- messages ------------------------------------------------------------------------------


def _system(system: str | list[wire.ContentBlock] | None) -> list[Message]:
    if system is None:
        return []
    if isinstance(system, str):
        return [Message(role="system", parts=[TextPart(system)])] if system else []
    texts = [_text_of(block, f"system[{j}]") for j, block in enumerate(system)]
    text = SYSTEM_JOIN.join(t for t in texts if t)
    return [Message(role="system", parts=[TextPart(text)])] if text else []


def _messages(messages: list[wire.MessageParam], fetched: Mapping[str, str]) -> list[Message]:
    converted: list[Message] = []
    for i, message in enumerate(messages):
        path = f"messages[{i}].content"
        if message.role == "assistant":
            converted.append(_assistant(message.content, path))
        elif message.role == "system":
            text = message.content if isinstance(message.content, str) else SYSTEM_JOIN.join(
                _text_of(block, f"{path}[{j}]") for j, block in enumerate(message.content)
            )
            converted.append(Message(role="system", parts=[TextPart(text)] if text else []))
        else:
            converted += _user(message.content, path, converted, fetched)
    return converted


def _user(content: str | list[wire.ContentBlock], path: str, earlier: list[Message], fetched: Mapping[str, str]) -> list[Message]:
    """A user turn: each ``tool_result`` becomes a tool message; the text and images
    around them stay user messages, in the order the client wrote them."""
    if isinstance(content, str):
        return [Message(role="user", parts=[TextPart(content)])]
    out: list[Message] = []
    parts: list[Part] = []
    for j, block in enumerate(content):
        where = f"{path}[{j}]"
        if block.type == "tool_result":
            if parts:
                out.append(Message(role="user", parts=parts))
                parts = []
            out.append(_tool_result(block, where, [*earlier, *out], fetched))
        else:
            parts.append(_part(block, where, fetched))
    if parts or not out:
        out.append(Message(role="user", parts=parts))
    return out


def _assistant(content: str | list[wire.ContentBlock], path: str) -> Message:
    if isinstance(content, str):
        return Message(role="assistant", parts=[TextPart(content)] if content else [])
    parts: list[Part] = []
    thinking: list[str] = []
    signature: str | None = None
    calls: list[ToolCall] = []
    for j, block in enumerate(content):
        where = f"{path}[{j}]"
        if block.type == "text":
            parts.append(TextPart(_text_of(block, where)))
        elif block.type == "thinking":
            thinking.append(block.thinking or "")
            signature = block.signature or signature
        elif block.type == "redacted_thinking":
            continue  # encrypted for Anthropic's models: nothing a local model can read
        elif block.type == "tool_use":
            calls.append(_tool_use(block, where, len(calls)))
        else:
            param = f"{where}.type"
            allowed = "text, thinking, redacted_thinking, tool_use"
            raise UnsupportedFeature(f"{param}: unsupported block type '{block.type}' in an assistant turn; allowed: {allowed}", param=param)
    return Message(
        role="assistant", parts=parts, thinking="".join(thinking) or None, thinking_signature=signature, tool_calls=calls
    )


def _tool_use(block: wire.ContentBlock, path: str, position: int) -> ToolCall:
    if not block.name:
        raise RequestError(f"{path}.name: field required for a tool_use block", param=f"{path}.name")
    if block.id is None:
        raise RequestError(f"{path}.id: field required for a tool_use block", param=f"{path}.id")
    return ToolCall(name=block.name, arguments=block.input or {}, id=block.id, index=position)


def _tool_result(block: wire.ContentBlock, path: str, earlier: list[Message], fetched: Mapping[str, str]) -> Message:
    if not block.tool_use_id:
        raise RequestError(f"{path}.tool_use_id: field required for a tool_result block", param=f"{path}.tool_use_id")
    inner = block.content
    if isinstance(inner, str):
        parts: list[Part] = [TextPart(inner)] if inner else []
    else:
        parts = [_part(b, f"{path}.content[{k}]", fetched) for k, b in enumerate(inner or ())]
    if block.is_error:
        # No other dialect marks a failed result; the text says it instead.
        parts = [TextPart("Error: "), *parts]
    return Message(
        role="tool", parts=parts, tool_call_id=block.tool_use_id, tool_name=_called_tool(block.tool_use_id, earlier)
    )


def _called_tool(call_id: str, earlier: list[Message]) -> str | None:
    for message in reversed(earlier):
        for call in message.tool_calls:
            if call.id == call_id:
                return call.name
    return None


def _part(block: wire.ContentBlock, path: str, fetched: Mapping[str, str]) -> Part:
    if block.type == "text":
        return TextPart(_text_of(block, path))
    if block.type == "image":
        return _image(block.source, f"{path}.source", fetched)
    param = f"{path}.type"
    if block.type == "document":
        raise UnsupportedFeature(f"{param}: 'document' blocks (PDF and text files) are not supported; send the text as a text block", param=param)
    raise UnsupportedFeature(f"{param}: unsupported block type '{block.type}'; allowed: text, image, tool_result", param=param)


def _image(source: wire.ImageSource | None, path: str, fetched: Mapping[str, str]) -> ImagePart:
    if source is None:
        raise RequestError(f"{path}: field required for an image block", param=path)
    if source.type == "base64":
        if not source.data:
            raise RequestError(f"{path}.data: field required for a base64 image", param=f"{path}.data")
        return decode_base64_image(source.data, f"{path}.data")
    if source.type == "url" and source.url:
        if source.url in fetched:
            return decode_image_data_uri(fetched[source.url], f"{path}.url")
        hint = "enable server.image_fetch or send the image as base64"
        raise RequestError(f"{path}.url: remote image URLs are not fetched; {hint}", param=f"{path}.url")
    raise UnsupportedFeature(f"{path}.type: unsupported image source '{source.type}'; allowed: base64, url", param=f"{path}.type")


def _text_of(block: wire.ContentBlock, path: str) -> str:
    if block.type != "text":
        param = f"{path}.type"
        raise RequestError(f"{param}: expected a text block, got '{block.type}'", param=param)
    if block.text is None:
        raise RequestError(f"{path}.text: field required for a text block", param=f"{path}.text")
    return block.text


def _blocks(content: str | list[wire.ContentBlock]) -> list[wire.ContentBlock]:
    return [] if isinstance(content, str) else content


__all__ = ["count_request", "image_blocks", "remote_image_urls", "think_level_for_budget", "to_canonical"]
