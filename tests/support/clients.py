"""One question asked through each dialect's official client, the reply normalised to
what the client ended up with: text, thinking, tool calls (name, arguments), finish."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import ollama
import openai

from tests.support.server import RunningServer

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
RESPONSES_TOOLS = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]} for t in TOOLS]
# What "the model asked for tools" is called in each dialect.
TOOL_FINISH = {"openai": "tool_calls", "ollama": "stop", "anthropic": "tool_use", "responses": "completed"}

Reply = dict[str, Any]


def openai_reply(server: RunningServer, model: str, text: str, stream: bool) -> Reply:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    messages = [{"role": "user", "content": text}]
    if not stream:
        reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        return {"text": message.content or "", "thinking": (message.model_extra or {}).get("reasoning_content") or "",
                "calls": [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []],
                "finish": reply.choices[0].finish_reason}  # fmt: skip
    out, thinking, finish, names, pieces = "", "", None, {}, {}
    for chunk in client.chat.completions.create(model=model, messages=messages, tools=TOOLS, stream=True):
        for choice in chunk.choices:
            out += choice.delta.content or ""
            thinking += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            for call in choice.delta.tool_calls or []:
                if call.function and call.function.name:
                    names[call.index] = call.function.name
                pieces.setdefault(call.index, []).append((call.function and call.function.arguments) or "")
            finish = choice.finish_reason or finish
    calls = [(names[i], json.loads("".join(pieces[i]))) for i in sorted(pieces)]
    return {"text": out, "thinking": thinking, "calls": calls, "finish": finish}


def ollama_reply(server: RunningServer, model: str, text: str, stream: bool) -> Reply:
    client = ollama.Client(host=server.url)
    messages = [{"role": "user", "content": text}]
    ask: dict[str, Any] = {"model": model, "messages": messages, "tools": TOOLS, "think": True}
    parts = list(client.chat(**ask, stream=True)) if stream else [client.chat(**ask)]
    return {"text": "".join(p.message.content or "" for p in parts), "thinking": "".join(p.message.thinking or "" for p in parts),
            "calls": [(c.function.name, dict(c.function.arguments)) for p in parts for c in p.message.tool_calls or []],
            "finish": parts[-1].done_reason}  # fmt: skip


def anthropic_reply(server: RunningServer, model: str, text: str, stream: bool) -> Reply:
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    ask = {"model": model, "max_tokens": 1024, "messages": [{"role": "user", "content": text}], "tools": ANTHROPIC_TOOLS}
    if stream:
        with client.messages.stream(**ask) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**ask)
    return {"text": "".join(b.text for b in message.content if b.type == "text"),
            "thinking": "".join(b.thinking for b in message.content if b.type == "thinking"),
            "calls": [(b.name, b.input) for b in message.content if b.type == "tool_use"], "finish": message.stop_reason}  # fmt: skip


def responses_reply(server: RunningServer, model: str, text: str, stream: bool) -> Reply:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    ask = {"model": model, "input": text, "tools": RESPONSES_TOOLS}
    if stream:
        with client.responses.stream(**ask) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(**ask)
    return {"text": response.output_text,
            "thinking": "".join(c.text for i in response.output if i.type == "reasoning" for c in i.content or []),
            "calls": [(i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call"],
            "finish": response.status}  # fmt: skip


CLIENTS: dict[str, Callable[[RunningServer, str, str, bool], Reply]] = {
    "openai": openai_reply, "ollama": ollama_reply, "anthropic": anthropic_reply, "responses": responses_reply,
}  # fmt: skip
