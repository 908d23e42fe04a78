"""Items as the store keeps them and ``input_items`` lists them: every item complete,
with an ``id`` and a ``type``, content always a list of parts. Stored items decode back
into request items, so a stored conversation goes through the same converter."""

from __future__ import annotations

from typing import Any

import msgspec

from dragoman.adapters.responses import wire
from dragoman.adapters.responses.ids import new_compaction_id, new_function_call_id, new_message_id, new_output_id, new_reasoning_id

_item_list = msgspec.json.Decoder(list[wire.InputItem])
_IDS = {"message": new_message_id, "function_call": new_function_call_id,
        "function_call_output": new_output_id, "reasoning": new_reasoning_id, "compaction": new_compaction_id}  # fmt: skip


def stored_item(item: wire.InputItem) -> dict[str, Any]:
    """One request item, completed for the store."""
    raw = {k: v for k, v in msgspec.to_builtins(item).items() if v is not None}
    kind = item.type or "message"
    raw["type"] = kind
    raw.setdefault("id", _IDS.get(kind, new_message_id)())
    if kind == "message":
        if isinstance(item.content, str) or item.content is None:
            part = "output_text" if item.role == "assistant" else "input_text"
            raw["content"] = [{"type": part, "text": item.content or ""}]
        raw.setdefault("status", "completed")
    elif kind in ("function_call", "function_call_output"):
        raw.setdefault("status", "completed")
        if kind == "function_call":
            raw.setdefault("arguments", "")
    elif kind == "reasoning":
        raw.setdefault("summary", [])
    return raw


def output_items(response: wire.Response | wire.ResponseOutput) -> list[dict[str, Any]]:
    """A response's output, as input items of the next turn."""
    return [msgspec.to_builtins(item) for item in response.output]


def decode_items(raw: bytes) -> list[wire.InputItem]:
    return _item_list.decode(raw)


__all__ = ["decode_items", "output_items", "stored_item"]
