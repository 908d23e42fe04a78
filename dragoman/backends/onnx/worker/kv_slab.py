"""The KV cache of every sequence in the batch, as one block of memory.

The exported decoder's attention (GroupQueryAttention) reads and writes the cache in
place when the past and present tensors are one buffer of shape
``[batch, kv_heads, capacity, head_size]`` per layer (the library's
``past_present_share_buffer``), each row with its own length. So the slab is one array
``[2 × layers, rows, kv_heads, capacity, head_size]``: rows ``0..n-1`` of every layer are
contiguous, which is what one batched decode step needs, and any single row is too,
which is what prefilling one sequence needs. Rows grow and the capacity grows (by
copying) as sequences need them; an idle slab is released.
"""

from __future__ import annotations

import itertools

import numpy as np

_allocations = itertools.count(1)  # unique across slabs: a binding cache keys on it
CAPACITY_STEP = 256  # positions: capacity grows to a multiple of this (then by half again)


class KvSlab:
    def __init__(self, layers: int, kv_heads: int, head_size: int, dtype: np.dtype, max_positions: int) -> None:
        self.layers = layers
        self.kv_heads = kv_heads
        self.head_size = head_size
        self.dtype = np.dtype(dtype)
        self.max_positions = max_positions
        self.data: np.ndarray | None = None  # [2L, rows, H, capacity, D]
        # New whenever ``data`` is allocated anew, unique across slabs: pointers bound
        # to an older allocation are stale.
        self.generation = next(_allocations)

    @property
    def rows(self) -> int:
        return 0 if self.data is None else self.data.shape[1]

    @property
    def capacity(self) -> int:
        return 0 if self.data is None else self.data.shape[3]

    @property
    def nbytes(self) -> int:
        return 0 if self.data is None else self.data.nbytes

    def bytes_per_position(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_size * self.dtype.itemsize

    def ensure(self, rows: int, positions: int) -> None:
        """At least ``rows`` rows of at least ``positions`` positions; what is held is kept."""
        if positions > self.max_positions:
            raise ValueError(f"{positions} positions exceed the slab's limit of {self.max_positions}")
        if rows <= self.rows and positions <= self.capacity:
            return
        capacity = self.capacity
        if positions > capacity:
            grown = max(positions, capacity + capacity // 2)
            capacity = min(self.max_positions, -(-grown // CAPACITY_STEP) * CAPACITY_STEP)
        rows = max(rows, self.rows)
        data = np.zeros((2 * self.layers, rows, self.kv_heads, capacity, self.head_size), dtype=self.dtype)
        if self.data is not None:
            data[:, : self.rows, :, : self.capacity] = self.data
        self.data = data
        self.generation = next(_allocations)

    def release(self) -> None:
        self.data = None
        self.generation = next(_allocations)

    def layer_views(self, first: int, count: int) -> list[np.ndarray]:
        """Per cache tensor (key 0, value 0, key 1, …): rows ``first..first+count-1``,
        contiguous, ``[count, H, capacity, D]``."""
        assert self.data is not None
        return [self.data[i, first : first + count] for i in range(self.data.shape[0])]

    def move(self, source: int, target: int, length: int) -> None:
        """Copy the first ``length`` positions of row ``source`` to row ``target``."""
        if source != target and length:
            assert self.data is not None
            self.data[:, target, :, :length] = self.data[:, source, :, :length]

    def swap(self, a: int, b: int, length: int) -> None:
        """Exchange the first ``length`` positions of rows ``a`` and ``b``."""
        if a != b and length:
            assert self.data is not None
            held = self.data[:, a, :, :length].copy()
            self.data[:, a, :, :length] = self.data[:, b, :, :length]
            self.data[:, b, :, :length] = held

    def read(self, row: int, length: int) -> np.ndarray:
        """A compact copy ``[2L, H, length, D]`` of a row's first positions."""
        assert self.data is not None
        return self.data[:, row, :, :length].copy()

    def write(self, row: int, kv: np.ndarray, length: int) -> None:
        """Put the first ``length`` positions of a compact copy into ``row``."""
        assert self.data is not None
        self.data[:, row, :, :length] = kv[:, :, :length]
