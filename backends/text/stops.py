"""Stop strings on decoded text: the library has none, so the worker matches them.

A stop string is never emitted, even when its pieces arrive in different deltas: the
matcher holds back any tail of the text that could still grow into a stop string.
"""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """The part of ``held + text`` that is safe to emit now. After a stop string
        matches, :attr:`stopped` is True and the text before it is returned."""
        if self.stopped:
            return ""
        if not self._stops:
            return text
        buffer = self._held + text
        cut = min((i for i in (buffer.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return buffer[:cut]
        keep = partial_suffix_length(buffer, self._stops)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """What was held back, once generation has ended without a match."""
        held, self._held = self._held, ""
        return "" if self.stopped else held


def partial_suffix_length(text: str, needles: list[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a needle:
    what to hold back because the next delta may complete it."""
    best = 0
    for needle in needles:
        for size in range(min(len(needle) - 1, len(text)), best, -1):
            if text.endswith(needle[:size]):
                best = size
                break
    return best
