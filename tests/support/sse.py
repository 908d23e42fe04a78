"""Reading named SSE events (``event: NAME`` + ``data: JSON``) exactly as sent."""

from __future__ import annotations

import json
from typing import Any


def named_events(raw: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each event; the name must agree with the data's ``type``."""
    events = []
    for chunk in raw.split("\n\n"):
        if not chunk:
            continue
        name_line, data_line = chunk.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: "), chunk
        name, data = name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        events.append((name, data))
    return events
