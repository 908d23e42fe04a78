"""Go-style durations, as Ollama's ``keep_alive`` takes them ("5m", "1h30m", "300ms").

A number means seconds; a negative value means "forever"; a unit-less non-zero
string is refused, as Ollama refuses it, because "10" is ambiguous. A duration longer
than a century also means forever (``-1.0``): no backend can schedule an unload past
what its clock represents (``timedelta`` overflows near 2.7 million years).
"""

from __future__ import annotations

import math
import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
FOREVER_AFTER = 100 * 365.25 * 24 * 3600.0  # seconds
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(value: float | int | str) -> float:
    """Seconds from a number or a Go duration string; raises ``ValueError`` with a hint."""
    seconds = _seconds(value)
    return -1.0 if math.isinf(seconds) or seconds > FOREVER_AFTER else seconds


def _seconds(value: float | int | str) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 300, \"5m\" or \"-1\", got a boolean")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # an int past float's range
            return math.inf if value > 0 else -math.inf
        if math.isnan(seconds):
            raise ValueError("a duration cannot be NaN")
        return seconds
    text = value.strip()
    if text in ("0", "-0", "+0"):
        return 0.0
    if re.fullmatch(r"[+-]?\d+(?:\.\d+)?", text):
        raise ValueError(f"duration '{value}' has no unit; write e.g. '{text}s', '{text}m' or the number {text}")
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    parts = _PART.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise ValueError(f"duration '{value}' is not valid; use forms like '30s', '5m', '1h30m' or '-1'")
    return sign * sum(float(number) * _UNITS[unit] for number, unit in parts)
