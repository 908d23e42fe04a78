"""What the route layer needs to know of one client dialect, as one object per adapter
package (``DIALECT`` in adapters/openai, ollama, anthropic, responses), so proxy/ reads
fields of it instead of switching on the dialect's name.

A new dialect is a new package with its own ``DIALECT``, added to
:data:`adapters.dialects.DIALECTS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from dragoman.adapters.errors import DragomanError
from dragoman.adapters.model_listing import ModelListing

DialectName = Literal["openai", "ollama", "anthropic", "responses"]


def own_status(err: DragomanError) -> int:
    """The error's own status: every dialect but one that maps them differently."""
    return err.status


def chat_message_field(index: int, role: str) -> str:
    """In the chat dialects canonical message ``index`` is the client's own."""
    return f"messages[{index}].content"


def call_named(call_id: str | None, name: str) -> str:
    """An earlier tool call as an error names it: by its id, else by the tool's name."""
    return f"id '{call_id}'" if call_id else f"name '{name}'"


def chat_call_field(index: int, position: int, call_id: str | None, name: str) -> str:
    return f"messages[{index}].tool_calls[{position}].function.arguments"


@dataclass(frozen=True)
class Dialect:
    """One client dialect. ``field_names`` maps a canonical field (as OpenAI chat spells
    it, or one of the names the bounds use: ``stop``, ``schema``, ``tool_schema``,
    ``conversation``) to this dialect's spelling; a field not there is spelled the same."""

    name: DialectName
    # The request paths that are its own, tried in DIALECTS order ("" matches every path).
    path_prefixes: tuple[str, ...]
    render_error: Callable[[DragomanError], bytes]
    field_names: Mapping[str, str]
    error_status: Callable[[DragomanError], int] = own_status
    # Where the client wrote canonical message ``index`` of ``role`` (limits name it).
    message_field: Callable[[int, str], str] = chat_message_field
    # Where it wrote the arguments of an earlier tool call: (message, position, id, name).
    call_field: Callable[[int, int, str | None, str], str] = chat_call_field
    # A header that claims a request on another dialect's shared path for this one
    # (the anthropic SDK lists /v1/models too, sending anthropic-version).
    claim_header: str | None = None
    # Whether a request on its paths is another dialect's when it sends that one's claim_header.
    shares_paths: bool = False
    # How to send an API key, as this dialect's clients are told (401s).
    key_hint: str = "'Authorization: Bearer <key>' or 'x-api-key: <key>'"
    # How it lists the served models on GET /v1/models, when its clients list them there.
    model_listing: ModelListing | None = None

    def field(self, canonical: str) -> str:
        """``canonical`` as this dialect's clients spell it."""
        return self.field_names.get(canonical, canonical)
