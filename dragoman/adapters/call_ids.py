"""Every tool call with an id and every tool result naming the call it answers.

OpenAI, Anthropic and Responses servers insist that a result names its call; Ollama
clients often send calls without ids and results without ``tool_call_id``. Upstream
encoders fill both in first: a result without an id answers the open call of the
same function (else the oldest open call).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from dragoman.adapters.canonical import Message


def paired_calls(messages: list[Message], new_id: Callable[[], str]) -> list[Message]:
    paired: list[Message] = []
    open_calls: list[tuple[str, str]] = []  # (id, name) of calls not yet answered
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            calls = [call if call.id else msgspec.structs.replace(call, id=new_id()) for call in message.tool_calls]
            open_calls = [(call.id, call.name) for call in calls]  # type: ignore[misc]
            message = msgspec.structs.replace(message, tool_calls=calls)
        elif message.role == "tool":
            call_id = message.tool_call_id or _answered(open_calls, message.tool_name) or new_id()
            open_calls = [(i, n) for i, n in open_calls if i != call_id]
            name = message.tool_name or next((n for i, n in open_calls if i == call_id), None)
            message = msgspec.structs.replace(message, tool_call_id=call_id, tool_name=name)
        paired.append(message)
    return paired


def _answered(open_calls: list[tuple[str, str]], name: str | None) -> str | None:
    for call_id, call_name in open_calls:
        if call_name == name:
            return call_id
    return open_calls[0][0] if open_calls else None


__all__ = ["paired_calls"]
