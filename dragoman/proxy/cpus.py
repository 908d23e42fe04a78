"""How many cores this process may use: sizes the worker count and the token-counting pool."""

from __future__ import annotations

import os


def cpu_cores() -> int:
    """The cores this process may run on (a container's share, not the host's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # Windows, macOS
        return max(1, os.cpu_count() or 1)
