"""Rendering a model's own chat template, as transformers does.

The library's ``apply_chat_template`` runs a Jinja subset and takes no extra variables,
so the template is rendered with ``jinja2``'s immutable sandbox (``tojson``,
``raise_exception``, ``strftime_now`` as transformers provides them). A template that
does not know ``tools`` gets them described in the system prompt, Hermes-style, and
sees earlier calls and results as ``<tool_call>`` / ``<tool_response>`` text.
"""

from __future__ import annotations

import datetime as dt
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, get_args

from dragoman.adapters.canonical import Message, Role, Tool, ToolCall
from dragoman.adapters.errors import RequestError
from dragoman.backends.text.segments import Guard, Segment, prompt_text

TEMPLATE_FILE = "chat_template.jinja"
HERMES_TOOLS_PROMPT = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


def load_chat_template(model_dir: Path, override: str | None = None) -> str:
    """The ``template`` setting, else ``chat_template.jinja``, else the
    ``chat_template`` of ``tokenizer_config.json`` (a named list picks "default")."""
    if override:
        return override
    file = model_dir / TEMPLATE_FILE
    if file.is_file():
        return file.read_text(encoding="utf-8")
    try:
        config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    template = config.get("chat_template") or ""
    if isinstance(template, list):
        named = {t.get("name"): t.get("template", "") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), "")
    return template


def special_tokens(model_dir: Path) -> dict[str, str]:
    """``bos_token`` / ``eos_token`` strings templates refer to."""
    try:
        config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    tokens = {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            tokens[key] = value
    return tokens


def supports_tools(template: str) -> bool:
    return "tools" in template


def supports_thinking(template: str) -> bool:
    return "enable_thinking" in template or "<think>" in template


def render_chat(
    template: str,
    messages: list[Message],
    tools: list[Tool] | None = None,
    *,
    enable_thinking: bool | None = None,
    tokens: dict[str, str] | None = None,
) -> str:
    """The prompt text, ending with the assistant's generation prompt."""
    return prompt_text(render_chat_segments(template, messages, tools, enable_thinking=enable_thinking, tokens=tokens))


def render_chat_segments(
    template: str,
    messages: list[Message],
    tools: list[Tool] | None = None,
    *,
    enable_thinking: bool | None = None,
    tokens: dict[str, str] | None = None,
    protected: frozenset[str] = frozenset(),
) -> list[Segment]:
    """The prompt as segments: ``protected`` texts (the vocabulary's special tokens)
    inside client strings come out as plain segments, so they never tokenise as
    control tokens; the template's own text stays special."""
    if not template:
        raise RequestError("the model has no chat template; set 'template' in its config entry")
    guard = Guard(protected)
    native = supports_tools(template)
    rendered = [_message_dict(m, guard, native_tools=native) for m in messages]
    variables: dict[str, Any] = {"add_generation_prompt": True, **(tokens or {})}
    if tools:
        specs = guard.value([tool_spec(t) for t in tools])
        if native:
            variables["tools"] = specs
        else:
            rendered = _with_system_text(rendered, hermes_tools_prompt(specs))
    if enable_thinking is not None:
        variables["enable_thinking"] = enable_thinking
    try:
        text = _compiled(template).render(messages=rendered, **variables)
    except TemplateRaised as exc:
        raise _role_refused(messages, str(exc)) or RequestError(
            f"the chat template refused the messages: {exc}", param="messages"
        ) from exc
    except Exception as exc:  # a template bug must not be a 500 without a reason
        raise _role_refused(messages, f"{type(exc).__name__}: {exc}") or RequestError(
            f"the chat template failed to render: {type(exc).__name__}: {exc}", param="messages"
        ) from exc
    segments = guard.segments(text)
    dropped = _role_refused(messages, "the template leaves such messages out", prompt_text(segments))
    if dropped is not None:
        raise dropped
    return segments


KNOWN_ROLES = frozenset(get_args(Role))


def _role_refused(messages: list[Message], reason: str, prompt: str | None = None) -> RequestError | None:
    """The 400 naming the first message of a role outside :data:`Role` that the
    template failed on (or, given ``prompt``, silently left out)."""
    for i, message in enumerate(messages):
        if message.role in KNOWN_ROLES:
            continue
        if prompt is not None and message.text.strip() in prompt:
            continue
        param = f"messages[{i}].role"
        return RequestError(f"{param}: the model's chat template cannot render role '{message.role}' ({reason})", param=param)
    return None


def tool_spec(tool: Tool) -> dict[str, Any]:
    """OpenAI's tool shape, which chat templates expect."""
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.parameters or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def hermes_tools_prompt(specs: list[dict[str, Any]]) -> str:
    return HERMES_TOOLS_PROMPT.format(tools="\n".join(json.dumps(s, ensure_ascii=False) for s in specs))


def _message_dict(message: Message, guard: Guard, *, native_tools: bool) -> dict[str, Any]:
    """The template's view of a message; every client string in it guarded, the
    markers dragoman adds itself (``<tool_call>`` …) not."""
    content = guard.text(message.text)
    role = guard.text(message.role)  # any string an Ollama client sent
    calls = [guard.value(_call_dict(c)) for c in message.tool_calls]
    if native_tools:
        out: dict[str, Any] = {"role": role, "content": content}
        if calls:
            out["tool_calls"] = calls
        if message.role == "tool":
            if message.tool_call_id:
                out["tool_call_id"] = guard.text(message.tool_call_id)
            if message.tool_name:
                out["name"] = guard.text(message.tool_name)
    elif message.role == "tool":
        # A template without tools may refuse a "tool" role; a user turn always works.
        out = {"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"}
    else:
        spelled = "\n".join(f"<tool_call>\n{_call_json(c['function'])}\n</tool_call>" for c in calls)
        out = {"role": role, "content": "\n".join(p for p in (content, spelled) if p)}
    if message.thinking:
        out["reasoning_content"] = out["thinking"] = guard.text(message.thinking)
    return out


def _call_dict(call: ToolCall) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}
    if call.id:
        out["id"] = call.id
    return out


def _call_json(function: dict[str, Any]) -> str:
    return json.dumps({"name": function["name"], "arguments": function["arguments"]}, ensure_ascii=False)


def _with_system_text(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0], content=f"{messages[0]['content']}\n\n{text}".lstrip())
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


# -- the Jinja environment -------------------------------------------------------------


class TemplateRaised(Exception):
    """``raise_exception(...)`` called by a template."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return dt.datetime.now().strftime(format)


@lru_cache(maxsize=16)
def _compiled(template: str) -> Any:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(template)
