"""Stop strings on decoded text: the library has none, so the worker matches them.

A stop string is never emitted, even when its pieces arrive in different deltas: the
matcher holds back any tail of the text that could still grow into a stop string.
"""

from __future__ import annotations


class StopMatcher:
    """An Aho-Corasick automaton over the stop strings: each character of text costs
    one transition (amortised), however many stop strings there are, and the state
    says at once how much of the text's end could still grow into a stop string."""

    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self._state = 0
        self.stopped = False
        self._goto: list[dict[str, int]] = [{}]
        self._fail = [0]
        self._depth = [0]
        self._match = [0]  # length of the longest stop string ending at this state; 0: none
        for stop in self._stops:
            self._insert(stop)
        self._link()
        self.matched: str | None = None  # the stop string that ended the text

    def feed(self, text: str) -> str:
        """The part of ``held + text`` that is safe to emit now. After a stop string
        matches, :attr:`stopped` is True and the text before it is returned. The
        first stop string to end wins (as a stream would see it)."""
        if self.stopped:
            return ""
        if not self._stops:
            return text
        buffer = self._held + text
        base = len(self._held)
        goto, fail, match = self._goto, self._fail, self._match
        state = self._state
        for i, char in enumerate(text):
            while state and char not in goto[state]:
                state = fail[state]
            state = goto[state].get(char, 0)
            if match[state]:
                self.stopped = True
                self._held = ""
                end = base + i + 1
                self.matched = buffer[end - match[state] : end]
                return buffer[: end - match[state]]
        self._state = state
        keep = self._depth[state]
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """What was held back, once generation has ended without a match."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _insert(self, stop: str) -> None:
        state = 0
        for char in stop:
            nxt = self._goto[state].get(char)
            if nxt is None:
                nxt = len(self._goto)
                self._goto.append({})
                self._fail.append(0)
                self._depth.append(self._depth[state] + 1)
                self._match.append(0)
                self._goto[state][char] = nxt
            state = nxt
        self._match[state] = len(stop)

    def _link(self) -> None:
        """Failure links breadth first; a state matches when it or a suffix of it is a
        stop string (the longest such, which starts earliest)."""
        queue = list(self._goto[0].values())
        for state in queue:
            for char, child in self._goto[state].items():
                queue.append(child)
                fallback = self._fail[state]
                while fallback and char not in self._goto[fallback]:
                    fallback = self._fail[fallback]
                target = self._goto[fallback].get(char, 0)
                self._fail[child] = target if target != child else 0
                if not self._match[child]:
                    self._match[child] = self._match[self._fail[child]]


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
