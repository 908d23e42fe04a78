"""An OpenAI Responses request as the canonical request.

``input`` items in order become canonical messages: a turn's ``reasoning``, assistant
``message`` and ``function_call`` items fold into one assistant message (as Chat
Completions spells a turn); each ``function_call_output`` is a tool message. Items of
an earlier response (``previous_response_id``) come first, as the store gives them.

Built-in tools (``web_search``, ``file_search``, a ``namespace``, …) run on OpenAI's
side: they are not offered to the model, and the route logs their names
(:func:`builtin_tools`); forcing one with ``tool_choice`` is a 400.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
from dragoman.adapters.images import decode_image_data_uri
from dragoman.adapters.openai.convert import request_arguments
from dragoman.adapters.responses import wire
from dragoman.adapters.responses.echoed import check_echoed
from dragoman.adapters.responses.ids import decode_compaction, decode_reasoning

ENCRYPTED_REASONING = "reasoning.encrypted_content"
# Accepted values of ``include``; only the first changes anything here (the others ask
# for outputs of built-in tools, which never run).
INCLUDABLE = frozenset({
    ENCRYPTED_REASONING, "web_search_call.action.sources", "web_search_call.results", "file_search_call.results",
    "code_interpreter_call.outputs", "computer_call_output.output.image_url", "message.input_image.image_url",
})  # fmt: skip
EFFORTS: dict[str, tuple[bool, ThinkLevel | None]] = {
    "none": (False, None), "minimal": (True, "low"), "low": (True, "low"), "medium": (True, "medium"),
    "high": (True, "high"), "xhigh": (True, "high"),
}  # fmt: skip
_MODES = ("auto", "none", "required")


def to_canonical(
    request: wire.ResponsesRequest, history: list[wire.InputItem] | None = None, fetched: Mapping[str, str] | None = None
) -> ChatRequest:
    """The canonical request; ``history`` holds the earlier response's items, ``fetched``
    maps image URLs the proxy fetched to data URIs."""
    _refuse_unsupported(request)
    check_echoed(request)
    tools = function_tools(request.tools)
    tools, choice = _tool_choice(request.tool_choice, tools)
    think, level = _reasoning(request.reasoning)
    system = [Message(role="system", parts=[TextPart(request.instructions)])] if request.instructions else []
    earlier = _messages(history or [], "previous_response_id", fetched or {})
    messages = _messages(input_items(request), "input", fetched or {}, earlier=[*system, *earlier])
    parallel = request.parallel_tool_calls
    if request.max_tool_calls == 1:
        parallel = False
    return ChatRequest(
        model=request.model,
        messages=[*system, *earlier, *messages],
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        options=SamplingOptions(temperature=request.temperature, top_p=request.top_p, num_predict=request.max_output_tokens),
        response_format=_format(request.text),
        think=think,
        think_level=level,
        stream=bool(request.stream),
        cache_key=request.prompt_cache_key or request.user,
    )


def input_items(request: wire.ResponsesRequest) -> list[wire.InputItem]:
    """``input`` as items: a string is one user message."""
    if isinstance(request.input, str):
        return [wire.InputItem(type="message", role="user", content=request.input)]
    return request.input


def builtin_tools(request: wire.ResponsesRequest) -> list[str]:
    """Names (or types) of the tools that are not function tools, for the log."""
    return [str(t.get("name") or t.get("type")) for t in request.tools or () if t.get("type") != "function"]


def function_tools(tools: list[dict[str, Any]] | None) -> list[Tool]:
    converted = []
    for i, tool in enumerate(tools or ()):
        kind = tool.get("type")
        if not isinstance(kind, str):
            raise RequestError(f"tools[{i}].type: field required", param=f"tools[{i}].type")
        if kind != "function":
            continue
        name, parameters, description = tool.get("name"), tool.get("parameters"), tool.get("description")
        if not isinstance(name, str) or not name:
            raise RequestError(f"tools[{i}].name: field required for a function tool", param=f"tools[{i}].name")
        if parameters is not None and not isinstance(parameters, dict):
            raise RequestError(f"tools[{i}].parameters: must be a JSON schema object", param=f"tools[{i}].parameters")
        if description is not None and not isinstance(description, str):
            raise RequestError(f"tools[{i}].description: must be a string", param=f"tools[{i}].description")
        converted.append(Tool(name=name, description=description, parameters=parameters or {}))
    return converted


# -- request-level fields ------------------------------------------------------------------


def _refuse_unsupported(request: wire.ResponsesRequest) -> None:
    if request.prompt is not None:
        raise UnsupportedFeature("prompt: stored prompt templates are not supported; send instructions and input", param="prompt")
    if request.top_logprobs:
        raise UnsupportedFeature("top_logprobs: log probabilities are not offered on /v1/responses; use /v1/chat/completions", param="top_logprobs")
    for i, value in enumerate(request.include or ()):
        if value not in INCLUDABLE:
            param = f"include[{i}]"
            if value == "message.output_text.logprobs":
                raise UnsupportedFeature(f"{param}: log probabilities are not offered on /v1/responses; use /v1/chat/completions", param=param)
            raise RequestError(f"{param}: unsupported value '{value}'; allowed: {', '.join(sorted(INCLUDABLE))}", param=param)


def _reasoning(reasoning: wire.ReasoningConfig | None) -> tuple[bool | None, ThinkLevel | None]:
    if reasoning is None or reasoning.effort is None:
        return None, None
    if reasoning.effort not in EFFORTS:
        allowed = ", ".join(EFFORTS)
        raise RequestError(f"reasoning.effort: unsupported value '{reasoning.effort}'; allowed: {allowed}", param="reasoning.effort")
    return EFFORTS[reasoning.effort]


def _format(text: wire.TextConfig | None) -> ResponseFormat:
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return ResponseFormat()
    if fmt.type == "json_object":
        return ResponseFormat(type="json")
    if fmt.schema is None:
        raise RequestError("text.format.schema: required when text.format.type is 'json_schema'", param="text.format.schema")
    return ResponseFormat(type="json_schema", schema=fmt.schema, name=fmt.name, strict=fmt.strict)


def _tool_choice(choice: str | dict[str, Any] | None, tools: list[Tool]) -> tuple[list[Tool], ToolChoice]:
    if choice is None:
        return tools, ToolChoice()
    if isinstance(choice, str):
        if choice not in _MODES:
            raise RequestError(f"tool_choice: unsupported value '{choice}'; allowed: {', '.join(_MODES)}, or an object", param="tool_choice")
        if choice == "required" and not tools:
            raise RequestError("tool_choice: 'required' needs at least one function tool in tools", param="tool_choice")
        return tools, ToolChoice(mode=choice)  # type: ignore[arg-type]
    kind = choice.get("type")
    if kind == "function":
        name = choice.get("name")
        if all(tool.name != name for tool in tools):
            raise RequestError(f"tool_choice.name: no function tool named '{name}' in tools", param="tool_choice.name")
        return tools, ToolChoice(mode="function", name=name)
    if kind == "allowed_tools":
        return _allowed_tools(choice, tools)
    what = choice.get("name") or kind
    message = f"tool_choice: forces the built-in tool '{what}', which runs on OpenAI's side and is not offered here"
    raise UnsupportedFeature(message, param="tool_choice")


def _allowed_tools(choice: dict[str, Any], tools: list[Tool]) -> tuple[list[Tool], ToolChoice]:
    mode = choice.get("mode", "auto")
    if mode not in ("auto", "required"):
        raise RequestError(f"tool_choice.mode: unsupported value '{mode}'; allowed: auto, required", param="tool_choice.mode")
    listed = choice.get("tools")
    if not isinstance(listed, list):
        raise RequestError("tool_choice.tools: field required for allowed_tools", param="tool_choice.tools")
    names = {t.get("name") for t in listed if isinstance(t, dict) and t.get("type") == "function"}
    allowed = [tool for tool in tools if tool.name in names]
    if mode == "required" and not allowed:
        raise RequestError("tool_choice.tools: 'required' needs at least one function tool allowed", param="tool_choice.tools")
    return allowed, ToolChoice(mode=mode)


# -- items ---------------------------------------------------------------------------------


class _Turns:
    """Folds items into messages; the open assistant message takes a turn's items."""

    def __init__(self, earlier: list[Message]) -> None:
        self.out: list[Message] = []
        self._earlier = earlier
        self._assistant: Message | None = None

    def assistant(self) -> Message:
        if self._assistant is None:
            self._assistant = Message(role="assistant")
            self.out.append(self._assistant)
        return self._assistant

    def add(self, message: Message) -> None:
        self._assistant = None
        self.out.append(message)

    def called(self, call_id: str) -> str | None:
        for message in reversed([*self._earlier, *self.out]):
            for call in message.tool_calls:
                if call.id == call_id:
                    return call.name
        return None


def _messages(items: list[wire.InputItem], where: str, fetched: Mapping[str, str], earlier: list[Message] | None = None) -> list[Message]:
    turns = _Turns(earlier or [])
    for i, item in enumerate(items):
        path = f"{where}[{i}]"
        kind = item.type or ("message" if item.role else None)
        if kind == "message":
            _message(item, path, turns, fetched)
        elif kind == "function_call":
            assistant = turns.assistant()
            assistant.tool_calls.append(_function_call(item, path, len(assistant.tool_calls)))
        elif kind == "function_call_output":
            turns.add(_call_output(item, path, turns, fetched))
        elif kind == "reasoning":
            thinking = _reasoning_text(item)
            if thinking:
                assistant = turns.assistant()
                assistant.thinking = (assistant.thinking or "") + thinking
        elif kind == "compaction":
            turns.add(Message(role="system", parts=[TextPart(COMPACTED_INTRO + _compaction_summary(item, path))]))
        elif kind is None:
            raise RequestError(f"{path}.type: field required (or a role, for a message)", param=f"{path}.type")
        else:
            param = f"{path}.type"
            allowed = "message, function_call, function_call_output, reasoning, compaction"
            raise UnsupportedFeature(f"{param}: unsupported item type '{kind}'; allowed: {allowed}", param=param)
    return turns.out


def _message(item: wire.InputItem, path: str, turns: _Turns, fetched: Mapping[str, str]) -> None:
    role = item.role
    if role == "assistant":
        turns.assistant().parts.extend(_parts(item.content, f"{path}.content", fetched, assistant=True))
    elif role in ("user", "system", "developer"):
        canonical_role = "user" if role == "user" else "system"
        turns.add(Message(role=canonical_role, parts=_parts(item.content, f"{path}.content", fetched, assistant=False)))
    else:
        param = f"{path}.role"
        raise RequestError(f"{param}: unsupported role '{role}'; allowed: user, assistant, system, developer", param=param)


def _function_call(item: wire.InputItem, path: str, position: int) -> ToolCall:
    if not item.name:
        raise RequestError(f"{path}.name: field required for a function_call", param=f"{path}.name")
    if not item.call_id:
        raise RequestError(f"{path}.call_id: field required for a function_call", param=f"{path}.call_id")
    return ToolCall(name=item.name, arguments=request_arguments(item.arguments or "", f"{path}.arguments"), id=item.call_id, index=position)


def _call_output(item: wire.InputItem, path: str, turns: _Turns, fetched: Mapping[str, str]) -> Message:
    if not item.call_id:
        raise RequestError(f"{path}.call_id: field required for a function_call_output", param=f"{path}.call_id")
    if item.output is None:
        raise RequestError(f"{path}.output: field required for a function_call_output", param=f"{path}.output")
    parts = _parts(item.output, f"{path}.output", fetched, assistant=False)
    return Message(role="tool", parts=parts, tool_call_id=item.call_id, tool_name=turns.called(item.call_id))


# How a compaction item reaches the model: a system message in its place.
COMPACTED_INTRO = "Summary of the earlier conversation (compacted):\n"


def _compaction_summary(item: wire.InputItem, path: str) -> str:
    summary = decode_compaction(item.encrypted_content)
    if summary is None:
        param = f"{path}.encrypted_content"
        raise UnsupportedFeature(
            f"{param}: this compaction item was not made here (another server's encrypted content cannot be read); "
            "send the items it replaced instead",
            param=param,
        )
    return summary


def _reasoning_text(item: wire.InputItem) -> str:
    """The thinking of a reasoning item: its text, else its summary, else our own
    encrypted token. Another server's encrypted reasoning cannot be read here."""
    content = item.content if isinstance(item.content, list) else []
    text = "".join(p.text or "" for p in content if p.type == "reasoning_text")
    if text:
        return text
    summary = "".join(p.text or "" for p in item.summary or () if p.type == "summary_text")
    return summary or decode_reasoning(item.encrypted_content) or ""


def _parts(content: str | list[wire.ContentPart] | None, path: str, fetched: Mapping[str, str], *, assistant: bool) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(content)] if content else []
    return [_part(part, f"{path}[{j}]", fetched, assistant=assistant) for j, part in enumerate(content)]


def _part(part: wire.ContentPart, path: str, fetched: Mapping[str, str], *, assistant: bool) -> Part:
    if part.type in ("input_text", "output_text"):
        if part.text is None:
            raise RequestError(f"{path}.text: field required", param=f"{path}.text")
        return TextPart(part.text)
    if part.type == "refusal" and assistant:
        return TextPart(part.refusal or "")
    if part.type == "input_image" and not assistant:
        return _image(part, path, fetched)
    param = f"{path}.type"
    allowed = "output_text, refusal" if assistant else "input_text, input_image"
    raise UnsupportedFeature(f"{param}: unsupported content type '{part.type}'; allowed: {allowed}", param=param)


def _image(part: wire.ContentPart, path: str, fetched: Mapping[str, str]) -> ImagePart:
    if part.file_id is not None:
        raise UnsupportedFeature(f"{path}.file_id: uploaded files are not supported; send image_url as a data URI", param=f"{path}.file_id")
    url = part.image_url
    if not url:
        raise RequestError(f"{path}.image_url: field required for an input_image", param=f"{path}.image_url")
    if url in fetched:
        url = fetched[url]
    elif url.lower().startswith(("http://", "https://")):
        hint = "enable server.image_fetch or send the image as a data URI (data:image/png;base64,…)"
        raise RequestError(f"{path}.image_url: remote image URLs are not fetched; {hint}", param=f"{path}.image_url")
    return decode_image_data_uri(url, f"{path}.image_url")


def image_parts(items: list[wire.InputItem]) -> list[wire.ContentPart]:
    """Every ``input_image`` part, those of function outputs too."""
    return [
        part
        for item in items
        for content in (item.content, item.output)
        for part in (content if isinstance(content, list) else ())
        if part.type == "input_image"
    ]


def remote_image_urls(items: list[wire.InputItem]) -> list[str]:
    """Every http(s) ``input_image`` URL, in order, without repeats (for the proxy)."""
    urls = [p.image_url for p in image_parts(items) if p.image_url and p.image_url.lower().startswith(("http://", "https://"))]
    return list(dict.fromkeys(urls))


__all__ = ["builtin_tools", "function_tools", "image_parts", "input_items", "remote_image_urls", "to_canonical"]
