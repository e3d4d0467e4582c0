"""Recycled arrays for a worker's payloads and results.

A reduction of 2^22 PS-only coordinates packs its indices into a fresh 2 MiB array and fills
a fresh 4 MiB one with its results. Allocated anew each time, each is mapped, faulted in page
by page and unmapped again when dropped: about a tenth of a worker's CPU per reduction on the
development VM. `ArrayPool` hands out arrays whose memory goes back to the pool when the last
reference to them (or to any view of them, a tensor's included) dies, so a stream of same-sized
reductions reuses memory that is already mapped. What it keeps is bounded; past that, memory goes back to the allocator.
"""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict

import numpy as np


class ArrayPool:
    """uint32 arrays by length, reused once their last user lets go; at most `max_bytes` kept idle."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._idle: defaultdict[int, list[np.ndarray]] = defaultdict(list)
        self._idle_bytes = 0
        self._lock = threading.Lock()  # arrays die on any thread

    def take(self, length: int) -> np.ndarray:
        """An uninitialized array of `length` uint32 words, recycled when it (and every view of it) dies."""
        with self._lock:
            idle = self._idle.get(length)
            memory = idle.pop() if idle else None
            if memory is not None:
                self._idle_bytes -= memory.nbytes
        if memory is None:
            memory = np.empty(length, dtype=np.uint32)
        # Over a buffer of its own, not as a view of `memory`: numpy collapses a view's base to the
        # array that owns the data, which would let `memory` go back while views of it live on.
        # Views of this array keep this array as their base, so it dies only after all of them.
        array = np.frombuffer(memoryview(memory), dtype=np.uint32)
        weakref.finalize(array, self._recycle, memory).atexit = False
        return array

    @property
    def idle_bytes(self) -> int:
        return self._idle_bytes

    def _recycle(self, memory: np.ndarray) -> None:
        with self._lock:
            if self._idle_bytes + memory.nbytes <= self.max_bytes:
                self._idle[memory.size].append(memory)
                self._idle_bytes += memory.nbytes


ARRAYS = ArrayPool()
"""The process's pool: the native engines' outputs and the PS-only payloads come from it."""
