"""Many datagrams in one buffer, without a Python object per datagram.

`Frames` is what a batched socket receives and sends and what a node may process on its
fast path (`FrameNode`); the `Node` interface's `Datagram` lists convert to and from it.
Per-datagram Python objects cost about a microsecond each, more than a switch's whole
per-packet work when it is vectorized.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ina.net.node import Address, Datagram


@dataclass(frozen=True, slots=True)
class Frames:
    """Datagram i is `buffer[start[i] : start[i] + length[i]]`, and its peer (the source when
    received, the destination when sent) is `addresses[peer[i]]`. Received frames may point
    into a socket's receive buffer: they are valid until that socket receives again."""

    buffer: np.ndarray  # uint8, one dimension
    start: np.ndarray  # int64
    length: np.ndarray  # int64
    peer: np.ndarray  # int64 index into addresses
    addresses: list[Address]

    def __len__(self) -> int:
        return self.start.size

    @classmethod
    def of(cls, datagrams: Sequence[Datagram]) -> Frames:
        datas = list(map(attrgetter("data"), datagrams))
        index: dict[Address, int] = {}
        peer = np.array([index.setdefault(a, len(index)) for a in map(attrgetter("addr"), datagrams)], dtype=np.int64)
        length = np.fromiter(map(len, datas), dtype=np.int64, count=len(datas))
        buffer = np.frombuffer(b"".join(datas), dtype=np.uint8)
        return cls(buffer, np.cumsum(length) - length, length, peer, list(index))

    @classmethod
    def of_rows(cls, rows: np.ndarray, address: Address, length: np.ndarray | None = None) -> Frames:
        """Every row of a uint8 matrix (C order) as one datagram to `address`, without copying: the whole row,
        or its first `length[i]` bytes."""
        count, size = rows.shape
        length = np.full(count, size, dtype=np.int64) if length is None else np.asarray(length, dtype=np.int64)
        return cls(rows.reshape(-1), np.arange(count, dtype=np.int64) * size, length, np.zeros(count, dtype=np.int64), [address])

    @classmethod
    def join(cls, parts: Sequence[Frames]) -> Frames:
        """The datagrams of every part, in order, in one buffer (a lone part is returned as it is)."""
        parts = [part for part in parts if len(part)]
        if len(parts) <= 1:
            return parts[0] if parts else cls.empty()
        index: dict[Address, int] = {}
        starts, peers, offset = [], [], 0
        for part in parts:
            remap = np.array([index.setdefault(a, len(index)) for a in part.addresses], dtype=np.int64)
            starts.append(part.start + offset)
            peers.append(remap[part.peer])
            offset += part.buffer.size
        buffer = np.concatenate([part.buffer for part in parts])
        return cls(buffer, np.concatenate(starts), np.concatenate([part.length for part in parts]),
                   np.concatenate(peers), list(index))  # fmt: skip

    @classmethod
    def empty(cls) -> Frames:
        nothing = np.zeros(0, dtype=np.int64)
        return cls(np.zeros(0, dtype=np.uint8), nothing, nothing, nothing, [])

    def slice(self, begin: int, end: int) -> Frames:
        return Frames(self.buffer, self.start[begin:end], self.length[begin:end], self.peer[begin:end], self.addresses)

    def datagrams(self) -> list[Datagram]:
        """The same datagrams as `Datagram` objects (bytes copied out of the buffer)."""
        view = memoryview(self.buffer)
        addresses = self.addresses
        return [Datagram(view[s : s + n].tobytes(), addresses[p])
                for s, n, p in zip(self.start.tolist(), self.length.tolist(), self.peer.tolist())]  # fmt: skip

    def rows(self, size: int) -> np.ndarray:
        """A (len, size) uint8 matrix: every datagram cut or zero-padded to `size` bytes.

        Datagrams of exactly `size` bytes lying back to back (a GRO message) are copied as one block."""
        count = len(self)
        regular = self.length == size
        starts_run = np.ones(count, dtype=bool)
        starts_run[1:] = ~regular[1:] | ~regular[:-1] | (self.start[1:] != self.start[:-1] + size)
        begins = np.flatnonzero(starts_run).tolist()
        if len(begins) == 1 and count and regular[0]:
            return self.buffer[self.start[0] : self.start[0] + count * size].reshape(count, size)
        rows = np.zeros((count, size), dtype=np.uint8)
        for begin, end in zip(begins, [*begins[1:], count]):
            at = int(self.start[begin])
            if regular[begin]:
                rows[begin:end] = self.buffer[at : at + (end - begin) * size].reshape(end - begin, size)
            else:
                n = min(int(self.length[begin]), size)
                rows[begin, :n] = self.buffer[at : at + n]
        return rows


@runtime_checkable
class FrameNode(Protocol):
    """A node that can also process `Frames` directly: what it returns are the datagrams to send."""

    def receive_frames(self, frames: Frames, now: float) -> Frames: ...


@runtime_checkable
class FrameTimers(Protocol):
    """A node whose timers can also answer `Frames` (what `tick` would return, as one buffer)."""

    def tick_frames(self, now: float) -> Frames: ...
