"""Holding an upstream to a ``tool_choice`` it cannot be told.

Ollama has no ``tool_choice``: ``required`` or a named function reaches it as an
extension field that only a dragoman upstream honours (a real Ollama ignores it and
may well answer in prose). So the reply is checked: its events are held until the
first tool call, and a reply that ends without one — or calls another function — is
an error naming the upstream, never a silent ``auto``. Nothing is sent before the
call arrives, so the error is a clean HTTP error, not a broken stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from dragoman.adapters.canonical import ErrorEvent, Event, Finish, ToolCallDone, ToolCallFragment, ToolChoice
from dragoman.adapters.errors import BackendError

MAX_HELD = 4096  # events held while waiting for the call (one per token, about)


class ToolChoiceNotHonoured(BackendError):
    """The upstream answered against ``tool_choice``; 502: the gateway's upstream failed."""


async def require_tool_call(events: AsyncIterator[Event], choice: ToolChoice, upstream: str) -> AsyncIterator[Event]:
    """``events`` unchanged once a call of the right name arrives; an error if none does."""
    wanted = f"'{choice.name}'" if choice.mode == "function" else "a tool"
    held: list[Event] | None = []
    async for event in events:
        name = _called(event)
        if name and choice.mode == "function" and name != choice.name:
            message = f"{upstream} called '{name}' although tool_choice names {wanted}; it cannot be made to call a given tool"
            if held is None:
                yield ErrorEvent(message, status=502)
                return
            raise ToolChoiceNotHonoured(message)
        if held is None:
            yield event
            continue
        if name is not None:
            for earlier in held:
                yield earlier
            held = None
            yield event
        elif isinstance(event, ErrorEvent):
            for earlier in held:
                yield earlier
            yield event
            return
        elif isinstance(event, Finish) or len(held) >= MAX_HELD:
            mode = f"names {wanted}" if choice.mode == "function" else "is 'required'"
            raise ToolChoiceNotHonoured(
                f"{upstream} answered without calling {wanted} although tool_choice {mode}; "
                "it cannot be made to call a tool (a dragoman upstream can: tool_choice is forwarded to it)"
            )
        else:
            held.append(event)


def _called(event: Event) -> str | None:
    """The function a call event names; "" for a fragment that does not (yet) say."""
    if isinstance(event, ToolCallDone):
        return event.call.name
    if isinstance(event, ToolCallFragment):
        return event.name or ""
    return None
