"""Anthropic's ``context_management`` edits, applied to the conversation before it
reaches any backend (docs/fidelity.md).

``clear_tool_uses_20250919`` replaces the results of the oldest tool calls with a short
placeholder once the conversation is past its trigger, keeping the latest ``keep``
(default 3) and any tool named in ``exclude_tools``; ``clear_tool_inputs`` empties their
calls' arguments too. ``clear_thinking_20251015`` drops the thinking of all but the
latest ``keep`` assistant turns that have some (default 1; ``"all"`` keeps every one).
Input-token amounts (trigger, ``clear_at_least``) are estimated at four UTF-8 bytes a
token: the adapter has no tokenizer. Any other edit is refused by name.
"""

from __future__ import annotations

import msgspec

from dragoman.adapters.anthropic import wire
from dragoman.adapters.canonical import Message, TextPart
from dragoman.adapters.errors import RequestError, UnsupportedFeature

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
CLEARED = "[tool result cleared to save context]"
DEFAULT_TRIGGER_TOKENS = 100_000  # Anthropic's default trigger
DEFAULT_KEEP_TOOL_USES = 3
DEFAULT_KEEP_THINKING_TURNS = 1
BYTES_PER_TOKEN = 4


def apply_edits(messages: list[Message], management: wire.ContextManagement | None) -> list[Message]:
    """``messages`` after each edit in order; an edit of another type is a 400."""
    for i, edit in enumerate((management.edits or []) if management is not None else []):
        where = f"context_management.edits[{i}]"
        if edit.type == CLEAR_TOOL_USES:
            messages = clear_tool_uses(messages, edit, where)
        elif edit.type == CLEAR_THINKING:
            messages = clear_thinking(messages, edit, where)
        else:
            raise UnsupportedFeature(
                f"{where}.type: '{edit.type}' is not an edit dragoman applies; allowed: {CLEAR_TOOL_USES}, {CLEAR_THINKING}",
                param=f"{where}.type",
            )
    return messages


def estimated_tokens(messages: list[Message]) -> int:
    """The conversation's length in tokens, estimated from its text and arguments."""
    size = 0
    for m in messages:
        size += len(m.text.encode()) + len((m.thinking or "").encode())
        size += sum(len(msgspec.json.encode(c.arguments)) + len(c.name) for c in m.tool_calls)
    return size // BYTES_PER_TOKEN


def clear_tool_uses(messages: list[Message], edit: wire.ContextEdit, where: str) -> list[Message]:
    keep = _count(edit.keep, "tool_uses", DEFAULT_KEEP_TOOL_USES, f"{where}.keep")
    excluded = set(edit.exclude_tools or ())
    results = [i for i, m in enumerate(messages) if m.role == "tool" and m.tool_name not in excluded]
    if not _triggered(messages, edit.trigger, len(results), f"{where}.trigger"):
        return messages
    chosen = results[: max(len(results) - keep, 0)]
    cleared = [i for i in chosen if messages[i].text != CLEARED]
    if edit.clear_at_least is not None:
        wanted = _count(edit.clear_at_least, "input_tokens", 0, f"{where}.clear_at_least")
        if sum(len(messages[i].text.encode()) for i in cleared) // BYTES_PER_TOKEN < wanted:
            return messages  # Anthropic clears nothing rather than too little (the cache would be lost for little)
    out = list(messages)
    ids = set()
    for i in cleared:
        out[i] = msgspec.structs.replace(out[i], parts=[TextPart(CLEARED)])
        ids.add(out[i].tool_call_id)
    if edit.clear_tool_inputs:
        for i, m in enumerate(out):
            if m.role == "assistant" and any(c.id in ids for c in m.tool_calls):
                calls = [msgspec.structs.replace(c, arguments={}) if c.id in ids else c for c in m.tool_calls]
                out[i] = msgspec.structs.replace(m, tool_calls=calls)
    return out


def clear_thinking(messages: list[Message], edit: wire.ContextEdit, where: str) -> list[Message]:
    if edit.keep == "all":
        return messages
    keep = _count(edit.keep, "thinking_turns", DEFAULT_KEEP_THINKING_TURNS, f"{where}.keep")
    thought = [i for i, m in enumerate(messages) if m.role == "assistant" and m.thinking]
    out = list(messages)
    for i in thought[: max(len(thought) - keep, 0)]:
        out[i] = msgspec.structs.replace(out[i], thinking=None, thinking_signature=None)
    return out


def _count(value: wire.EditCount | str | None, kind: str, default: int, param: str) -> int:
    if value is None:
        return default
    if isinstance(value, str) or value.type != kind:
        shown = value if isinstance(value, str) else value.type
        raise RequestError(f"{param}: type '{shown}' is not taken here; send {{\"type\": \"{kind}\", \"value\": N}}", param=param)
    return value.value


def _triggered(messages: list[Message], trigger: wire.EditCount | None, tool_uses: int, param: str) -> bool:
    if trigger is None:
        return estimated_tokens(messages) > DEFAULT_TRIGGER_TOKENS
    if trigger.type == "input_tokens":
        return estimated_tokens(messages) > trigger.value
    if trigger.type == "tool_uses":
        return tool_uses > trigger.value
    raise RequestError(f"{param}.type: '{trigger.type}' is not a trigger; allowed: input_tokens, tool_uses", param=f"{param}.type")
