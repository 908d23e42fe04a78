"""KV state of recent prompts, kept so the next request that starts the same way
continues from it instead of computing it again.

Chat clients send the whole conversation every turn and agents send the same long
system prompt and tool list with every request, so the next prompt usually begins
with one seen before. An entry is a prompt's token ids and a compact copy of its KV
(``[2 × layers, kv_heads, length, head_size]``); a new prompt takes the entry sharing
its longest prefix. Entries are bounded in bytes and in number and evicted least
recently used; an entry that is a prefix of a newer one is dropped as the newer one
arrives (the newer serves every prompt the older would).

Only KV computed while prefilling is kept, never a generated token's: a one-token
step gives KV that differs from a prefill's in the last bits, and reusing it would
make a turn's greedy answer depend on whether the cache held the previous turn.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class Entry:
    ids: np.ndarray  # int32 token ids
    kv: np.ndarray  # [2L, H, len(ids), D]

    @property
    def nbytes(self) -> int:
        return self.kv.nbytes + self.ids.nbytes


def shared_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens ``a`` and ``b`` have in common."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    different = np.flatnonzero(a[:n] != b[:n])
    return int(different[0]) if different.size else n


class PrefixCache:
    def __init__(self, max_bytes: int, max_entries: int, min_tokens: int = 16) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.min_tokens = min_tokens  # shorter shared prefixes are not worth a copy
        self._entries: collections.OrderedDict[int, Entry] = collections.OrderedDict()
        self._keys = iter(range(1 << 62))
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, ids: np.ndarray) -> tuple[Entry | None, int]:
        """The entry sharing the longest prefix with ``ids`` and that length (0 and None
        when none shares ``min_tokens``); the entry becomes the most recently used."""
        best, best_key, length = None, None, 0
        for key, entry in self._entries.items():
            shared = shared_prefix(entry.ids, ids)
            if shared > length:
                best, best_key, length = entry, key, shared
        if best is None or best_key is None or length < self.min_tokens:
            self.misses += 1
            return None, 0
        self._entries.move_to_end(best_key)
        self.hits += 1
        return best, length

    def put(self, ids: np.ndarray, kv: np.ndarray) -> bool:
        """Keep ``kv`` (the KV of ``ids``); False when it is too short or too big to keep."""
        return self.keep(ids, kv.nbytes, lambda: kv)

    def keep(self, ids: np.ndarray, kv_bytes: int, read: Callable[[], np.ndarray]) -> bool:
        """Keep the KV of ``ids`` (``kv_bytes`` long), copied by ``read`` only once there
        is room for it: the entries never hold more than ``max_bytes``, not even while
        the new one is copied, and a prompt too big to keep costs no copy at all."""
        ids = np.array(ids, dtype=np.int32)
        size = kv_bytes + ids.nbytes
        if len(ids) < self.min_tokens or size > self.max_bytes or self.max_entries < 1:
            return False
        for key, entry in list(self._entries.items()):
            if len(entry.ids) <= len(ids) and shared_prefix(entry.ids, ids) == len(entry.ids):
                self._drop(key)  # the new entry covers everything this one does
        while self._entries and (self.nbytes + size > self.max_bytes or len(self._entries) >= self.max_entries):
            self._drop(next(iter(self._entries)))  # least recently used first
        entry = Entry(ids, read())
        self._entries[next(self._keys)] = entry
        self.nbytes += entry.nbytes
        return True

    def covers(self, ids: np.ndarray) -> bool:
        """Whether an entry already holds all of ``ids`` (keeping it again adds nothing)."""
        return any(len(e.ids) >= len(ids) and shared_prefix(e.ids, ids) == len(ids) for e in self._entries.values())

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key)
        self.nbytes -= entry.nbytes
