"""Tool-call fragments for dialects that announce a call before its arguments stream
(Anthropic's ``tool_use`` block start, Responses' ``function_call`` item): a call opens
once its name is known, then its argument pieces follow as they come.

OpenAI-style upstreams send the name with a call's first fragment; some send it later,
so fragments wait until it arrives (or until something else ends the call). A fragment
of another ``index`` ends the open call, as :class:`adapters.aggregate.ToolCallAccumulator`
has it.
"""

from __future__ import annotations

import msgspec

from dragoman.adapters.canonical import ToolCallFragment


class CallOpened(msgspec.Struct, frozen=True):
    call_id: str | None
    name: str
    arguments: str  # what arrived before the call could open


class MoreArguments(msgspec.Struct, frozen=True):
    arguments: str


Step = CallOpened | MoreArguments


class FragmentOpener:
    def __init__(self) -> None:
        self._open: int | None = None  # index of the call that is open
        self._pending: list[ToolCallFragment] = []

    @property
    def open_index(self) -> int | None:
        return self._open

    def feed(self, fragment: ToolCallFragment) -> list[Step]:
        """What ``fragment`` lets the encoder emit; a ``CallOpened`` means the previous
        call (if any) has ended."""
        if self._open == fragment.index and not self._pending:
            return [MoreArguments(fragment.arguments)] if fragment.arguments else []
        if self._pending and self._pending[0].index == fragment.index:
            self._pending.append(fragment)
            return self.flush() if fragment.name else []
        steps = self.flush()
        self._open = None
        self._pending = [fragment]
        return steps + (self.flush() if fragment.name else [])

    def flush(self) -> list[Step]:
        """Open the waiting call now, named or not (something other than its fragments
        came next, or the reply ended)."""
        if not self._pending:
            return []
        pending, self._pending = self._pending, []
        self._open = pending[0].index
        name = next((f.name for f in pending if f.name), None) or ""
        call_id = next((f.id for f in pending if f.id), None)
        return [CallOpened(call_id, name, "".join(f.arguments for f in pending))]

    def close(self) -> None:
        """The open call ended (its block or item was closed)."""
        self._open = None


__all__ = ["CallOpened", "FragmentOpener", "MoreArguments", "Step"]
