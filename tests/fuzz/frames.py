"""Reading what a stream encoder wrote, checking its framing on the way."""

from __future__ import annotations

import json
from typing import Any


def sse_payloads(stream: bytes) -> list[Any]:
    """The JSON payloads of an OpenAI stream, checking its framing on the way."""
    assert stream.endswith(b"data: [DONE]\n\n"), stream[-80:]
    frames = stream.split(b"\n\n")
    assert frames[-1] == b""
    payloads = []
    for frame in frames[:-2]:
        # A bare \r or \n inside a frame would end an SSE line early.
        assert b"\n" not in frame and b"\r" not in frame, frame
        assert frame.startswith(b"data: "), frame
        payload = json.loads(frame[6:])
        assert isinstance(payload, dict)
        payloads.append(payload)
    assert frames[-2] == b"data: [DONE]"
    return payloads


def ndjson_lines(stream: bytes) -> list[dict[str, Any]]:
    """The objects of an Ollama stream, checking its framing on the way."""
    if not stream:
        return []
    assert stream.endswith(b"\n")
    lines = []
    for raw in stream[:-1].split(b"\n"):
        assert raw and b"\r" not in raw, raw
        line = json.loads(raw)
        assert isinstance(line, dict)
        lines.append(line)
    return lines
