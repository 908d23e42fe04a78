"""How deeply decoded JSON nests, measured without recursion.

msgspec stops decoding at Python's recursion limit (about 1,000 levels) with a
``RecursionError``; what decodes below that can still be too deep for what follows
(templates, grammar compilers, re-encoding for the client, which all recurse). Real
schemas and tool arguments nest a dozen levels; 64 leaves room and stops the rest.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 64
TOO_DEEP = "nested too deeply to decode"  # what msgspec's RecursionError means


def depth(value: Any, stop_after: int | None = None) -> int:
    """Levels of containers in ``value``: a scalar is 0, ``[]`` and ``{}`` are 1,
    ``[[1]]`` is 2. With ``stop_after``, the walk ends as soon as it passes that
    depth (the answer is then ``stop_after + 1``)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        if level > deepest:
            deepest = level
            if stop_after is not None and deepest > stop_after:
                return deepest
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list, tuple)))
    return deepest


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    return depth(value, stop_after=limit) > limit


__all__ = ["MAX_DEPTH", "TOO_DEEP", "depth", "too_deep"]
