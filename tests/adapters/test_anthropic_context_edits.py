"""Anthropic's context_management edits on the conversation
(dragoman/adapters/anthropic/context_edits.py), through the client-side converter."""

from __future__ import annotations

from typing import Any

import msgspec

from dragoman.adapters.anthropic import to_canonical, wire
from dragoman.adapters.anthropic.context_edits import CLEARED, estimated_tokens
from dragoman.adapters.canonical import Message


def turn(i: int, tool: str = "read") -> list[dict[str, Any]]:
    """An assistant call (with thinking) and the user's result for it."""
    return [
        {"role": "assistant", "content": [{"type": "thinking", "thinking": f"think {i}", "signature": f"s{i}"},
                                          {"type": "tool_use", "id": f"t{i}", "name": tool, "input": {"path": f"f{i}"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": f"result {i} " + "x" * 400}]},
    ]  # fmt: skip


def converted(edits: list[dict[str, Any]], turns: int = 5, **tools: str) -> list[Message]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(turns):
        messages += turn(i, tools.get(f"t{i}", "read"))
    body = {"model": "m", "max_tokens": 8, "messages": messages, "context_management": {"edits": edits}}
    return to_canonical(msgspec.json.decode(msgspec.json.encode(body), type=wire.MessagesRequest)).messages


def results(messages: list[Message]) -> list[str]:
    return [m.text[:8] for m in messages if m.role == "tool"]


def test_clear_tool_uses_keeps_the_latest_past_the_trigger() -> None:
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 3}, "keep": {"type": "tool_uses", "value": 2}}
    assert results(converted([edit])) == [CLEARED[:8]] * 3 + ["result 3", "result 4"]


def test_under_the_trigger_nothing_is_cleared() -> None:
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 5}}
    assert results(converted([edit])) == [f"result {i}" for i in range(5)]
    default = {"type": "clear_tool_uses_20250919"}  # 100,000 tokens: far from here
    assert results(converted([default])) == [f"result {i}" for i in range(5)]


def test_an_input_token_trigger_is_estimated_from_the_text() -> None:
    plain = converted([])
    assert 400 < estimated_tokens(plain) < 800
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 300}}
    assert results(converted([edit])) == [CLEARED[:8]] * 2 + ["result 2", "result 3", "result 4"]


def test_excluded_tools_and_inputs() -> None:
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 0}, "keep": {"type": "tool_uses", "value": 1},
            "exclude_tools": ["remember"], "clear_tool_inputs": True}  # fmt: skip
    messages = converted([edit], t1="remember")
    assert results(messages) == [CLEARED[:8], "result 1", CLEARED[:8], CLEARED[:8], "result 4"]
    arguments = [m.tool_calls[0].arguments for m in messages if m.role == "assistant"]
    assert arguments == [{}, {"path": "f1"}, {}, {}, {"path": "f4"}]


def test_clear_at_least_clears_nothing_rather_than_too_little() -> None:
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 0},
            "clear_at_least": {"type": "input_tokens", "value": 100_000}}  # fmt: skip
    assert results(converted([edit])) == [f"result {i}" for i in range(5)]


def test_clear_thinking_keeps_the_latest_turns() -> None:
    thinking = lambda ms: [m.thinking for m in ms if m.role == "assistant"]  # noqa: E731
    assert thinking(converted([{"type": "clear_thinking_20251015"}])) == [None] * 4 + ["think 4"]
    kept = converted([{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}}])
    assert thinking(kept) == [None] * 3 + ["think 3", "think 4"]
    assert [m.thinking_signature for m in kept if m.role == "assistant"][:3] == [None] * 3
    assert thinking(converted([{"type": "clear_thinking_20251015", "keep": "all"}])) == [f"think {i}" for i in range(5)]
