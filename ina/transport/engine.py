"""The worker-side transport engine (docs/protocol.md, sections 3, 4, 8 and 9) as a sans-IO `Node`.

A worker submits reductions (arrays of 32-bit words); the engine cuts them into K-word
chunks numbered by the job's chunk stream, keeps at most W of them outstanding, resends
what times out, and hands back each reduction's sums once every chunk's RESULT is in.
The same object runs behind a UDP socket (`ina.net.udp`) and inside the simulator.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from ina.net.node import Address, Datagram
from ina.protocol import HEADER_DTYPE, Flag, Header, Kind, MalformedPacket, parse, result_words
from ina.protocol.constants import LANE_WIDTHS, MAX_INDEX_BITS, MAX_WORKERS
from ina.transport.chunks import SEQ_MASK, Chunk, Reduction, ResultStore, result_length, split
from ina.transport.errors import TransportError
from ina.transport.priority import MAX_PRIORITY, IntensityPriority, PriorityPolicy
from ina.transport.rto import RttEstimator

_FLAGS_AT = HEADER_DTYPE.fields["flags"][1]
_PRIORITY_AT = HEADER_DTYPE.fields["priority"][1]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """One worker's view of its job's deployment (times in seconds).

    `destination` is where DATA goes: the switch, or the PS in PS-only mode (`ps_only`,
    where every chunk uses slot 0). `sources` are the addresses RESULT and STATUS may
    come from: the switch and the PS (so the PS is the destination in PS-only mode, else
    the other source). `first_seq` is the job's first chunk number (0; tests start near
    2^32 to cross the wrap).
    """

    job: int
    rank: int
    workers: int
    words: int
    window: int
    destination: Address
    sources: frozenset[Address]
    pool: int = 1
    slot_base: int = 0
    ps_only: bool = False
    min_rto: float = 0.005
    max_rto: float = 1.0
    initial_rto: float = 0.05
    peer_timeout: float = 30.0
    first_seq: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.job < 1 << 16:
            raise ValueError(f"job id {self.job} must be in 0..65535")
        if not 1 <= self.workers <= MAX_WORKERS or not 0 <= self.rank < self.workers:
            raise ValueError(f"rank {self.rank} of {self.workers} workers: need 0 <= rank < workers <= {MAX_WORKERS}")
        if self.words < 1:
            raise ValueError(f"words per packet must be positive, got {self.words}")
        if self.pool < 1 or self.pool & (self.pool - 1):
            raise ValueError(f"pool must be a power of two, got {self.pool}")
        if self.window < 1 or (not self.ps_only and self.window > self.pool):
            raise ValueError(f"window must be in 1..pool ({self.pool}), got {self.window}")
        if not 0 < self.min_rto <= self.initial_rto <= self.max_rto < self.peer_timeout:
            raise ValueError("need 0 < min_rto <= initial_rto <= max_rto < peer_timeout")
        if self.destination not in self.sources or len(self.sources) > 2:
            raise ValueError(f"the result sources {set(self.sources)} must be the destination {self.destination} "
                             "and at most one other address (the switch and the PS)")

    @property
    def ps(self) -> Address | None:
        """The job's PS, the only peer whose FETCH a worker answers; None if the config names none."""
        if self.ps_only:
            return self.destination
        others = self.sources - {self.destination}
        return next(iter(others)) if others else None

    def slot(self, seq: int) -> int:
        return 0 if self.ps_only else (self.slot_base + seq) & (self.pool - 1)

    def describe_destination(self) -> str:
        host, port = self.destination
        return f"{'PS' if self.ps_only else 'switch'} at {host}:{port}"


class Engine:
    """A worker's chunk stream: window, retransmission, delivery (see module docstring).

    Drive it as a `Node`; `submit` queues a reduction and makes `next_deadline()` due so
    the driver's `tick` sends it. Collect results with `completed()`; a peer that stays
    silent for `peer_timeout` sets `error` (a `TransportError`) and stops the engine.
    It keeps its newest 2W results to answer its PS's FETCH (the PS lost a result another
    worker needs). `counters`: sent, resent, delivered, status, fetch_answered, and drops:
    foreign (not from the switch or PS), malformed, unexpected (wrong job, kind, format,
    or a FETCH not from the PS), late (no such outstanding chunk), fetch_missing (a FETCH
    for a result not kept); failed.
    Not thread-safe: a transport that submits from the training thread while a runner
    thread feeds packets must serialize the calls and wake the runner after `submit`.
    """

    def __init__(self, config: EngineConfig, policy: PriorityPolicy | None = None) -> None:
        self.config = config
        self.policy: PriorityPolicy = policy if policy is not None else IntensityPriority()
        self.rtt = RttEstimator(config.initial_rto, config.min_rto, config.max_rto)
        self.counters: Counter[str] = Counter()
        self.error: TransportError | None = None
        self._full = (1 << config.workers) - 1
        self._next_seq = config.first_seq
        self._next_handle = 0
        self._queue: deque[Chunk] = deque()
        self._outstanding: dict[int, Chunk] = {}
        self._timers: list[tuple[float, int]] = []
        self._reductions: deque[Reduction] = deque()
        self._results = ResultStore(2 * config.window)

    # ----------------------------------------------------------------- the worker's side

    def submit(
        self,
        words: np.ndarray,
        *,
        op: Literal["sum", "max"] = "sum",
        lane_bits: int,
        index_bits: int = 0,
        now: float,
    ) -> int:
        """Queue one reduction of uint32 `words`; returns its handle (handles count up from 0).

        `lane_bits` is the width of the sum lanes (32 for `max`); `index_bits > 0` sends packed
        THC indices for the PS to look up (PS-only mode). The result has `len(words)` words
        for lanes, and `result_words(K, index_bits, lane_bits)` words per chunk for indices.
        """
        if self.error is not None:
            raise self.error
        words = np.asarray(words)
        if words.dtype != np.uint32 or words.ndim != 1 or words.size == 0:
            raise ValueError(f"submit a non-empty 1-D uint32 array, got {words.dtype} of shape {words.shape}")
        if op not in ("sum", "max"):
            raise ValueError(f"op must be 'sum' or 'max', got {op!r}")
        if lane_bits not in LANE_WIDTHS or (op == "max" and lane_bits != 32):
            raise ValueError(f"lane_bits must be one of {LANE_WIDTHS} (32 for max), got {lane_bits}")
        if not 0 <= index_bits <= MAX_INDEX_BITS or (index_bits and (op == "max" or not self.config.ps_only)):
            raise ValueError(f"index_bits {index_bits}: indices (1..{MAX_INDEX_BITS}) are summed only by the PS, in PS-only mode")
        config = self.config
        payloads = split(words, config.words)
        per_result = result_words(config.words, index_bits, lane_bits)
        length = result_length(words.size, len(payloads), config.words, index_bits, lane_bits)
        reduction = Reduction(self._next_handle, len(payloads), per_result, length)
        self._next_handle += 1
        self._reductions.append(reduction)
        flags = Flag.MAX if op == "max" else Flag.NONE
        for index, payload in enumerate(payloads):
            seq = self._next_seq
            self._next_seq += 1
            header = Header(
                Kind.DATA, config.job, seq & SEQ_MASK, flags, config.rank, 0,
                config.slot(seq), index_bits, lane_bits, 1 << config.rank,
            )
            self._queue.append(Chunk(seq, reduction, index, header, header.pack(payload), now))
        self.policy.observe(4 * words.size, now)
        return reduction.handle

    def completed(self) -> list[tuple[int, np.ndarray]]:
        """Reductions finished since the last call, as (handle, sums), in submission order."""
        done = []
        while self._reductions and self._reductions[0].done:
            reduction = self._reductions.popleft()
            done.append((reduction.handle, reduction.words()))
        return done

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing outstanding."""
        return not self._queue and not self._outstanding

    # ----------------------------------------------------------------- the Node interface

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        if self.error is not None:
            return []
        out: list[Datagram] = []
        for datagram in datagrams:
            self._accept(datagram, now, out)
        return out + self._pump(now)

    def tick(self, now: float) -> list[Datagram]:
        if self.error is not None:
            return []
        out = []
        while self._timers and self._timers[0][0] <= now:
            deadline, seq = heapq.heappop(self._timers)
            chunk = self._outstanding.get(seq)
            if chunk is None or chunk.deadline != deadline:
                continue
            if now >= chunk.first_sent + self.config.peer_timeout:
                self._fail(chunk)
                return []
            chunk.retries += 1
            self.counters["resent"] += 1
            out.append(self._transmit(chunk, now))
        return out + self._pump(now)

    def next_deadline(self) -> float | None:
        if self.error is not None:
            return None
        timers = self._timers
        while timers and self._stale(timers[0]):
            heapq.heappop(timers)
        due = timers[0][0] if timers else None
        if self._queue and self._window_open():
            ready = self._queue[0].queued_at
            due = ready if due is None else min(due, ready)
        return due

    # ----------------------------------------------------------------- internals

    def _stale(self, timer: tuple[float, int]) -> bool:
        chunk = self._outstanding.get(timer[1])
        return chunk is None or chunk.deadline != timer[0]

    def _window_open(self) -> bool:
        """The head of the queue may go: every chunk <= seq - W has its result."""
        if not self._outstanding:
            return True
        oldest = next(iter(self._outstanding))
        return self._queue[0].seq < oldest + self.config.window

    def _pump(self, now: float) -> list[Datagram]:
        out = []
        while self._queue and self._window_open():
            chunk = self._queue.popleft()
            chunk.first_sent = now
            self._outstanding[chunk.seq] = chunk
            self.counters["sent"] += 1
            out.append(self._transmit(chunk, now))
        return out

    def _transmit(self, chunk: Chunk, now: float) -> Datagram:
        """Send (or resend) a chunk and arm its timer."""
        chunk.last_sent = now
        timeout = self.rtt.backoff(chunk.retries)
        chunk.deadline = min(now + timeout, chunk.first_sent + self.config.peer_timeout)
        heapq.heappush(self._timers, (chunk.deadline, chunk.seq))
        packet = bytearray(chunk.packet)
        packet[_PRIORITY_AT] = max(0, min(self.policy.priority(chunk.queued_at, now), MAX_PRIORITY))
        if chunk.retries:
            packet[_FLAGS_AT] |= Flag.RESEND
        return Datagram(bytes(packet), self.config.destination)

    def _accept(self, datagram: Datagram, now: float, out: list[Datagram]) -> None:
        """Take one arriving datagram: a RESULT or STATUS for an outstanding chunk, a FETCH from
        the PS (its answer goes to `out`), or count why not."""
        if datagram.addr not in self.config.sources:
            self.counters["foreign"] += 1
            return
        try:
            header, payload = parse(datagram.data, self.config.words)
        except MalformedPacket:
            self.counters["malformed"] += 1
            return
        if header.job != self.config.job or header.kind not in (Kind.RESULT, Kind.STATUS, Kind.FETCH):
            self.counters["unexpected"] += 1
            return
        if header.kind == Kind.FETCH:
            self._answer_fetch(header, datagram.addr, out)
            return
        chunk = self._lookup(header.seq)
        if chunk is None:
            self.counters["late"] += 1
            return
        if header.kind == Kind.STATUS:
            chunk.status = header.bitmap
            self.counters["status"] += 1
            return
        expected = chunk.header
        if (
            header.is_max != expected.is_max
            or header.lane_bits != expected.lane_bits
            or header.index_bits != expected.index_bits
            or header.bitmap != self._full
        ):
            self.counters["unexpected"] += 1
            return
        del self._outstanding[chunk.seq]
        if chunk.retries == 0:
            self.rtt.sample(now - chunk.first_sent)
        chunk.reduction.fill(chunk.index, payload)
        self._results.put(chunk.seq, bytes(datagram.data))
        self.counters["delivered"] += 1

    def _answer_fetch(self, header: Header, source: Address, out: list[Datagram]) -> None:
        """The PS lost a result that another worker needs: send it ours, as received.

        Only the job's PS may ask (the switch never does), so a worker never sends results
        anywhere else; a chunk not among our newest 2W results is counted, not answered.
        """
        if source != self.config.ps:
            self.counters["unexpected"] += 1
            return
        packet = self._results.get(header.seq)
        if packet is None:
            self.counters["fetch_missing"] += 1
            return
        out.append(Datagram(packet, source))
        self.counters["fetch_answered"] += 1

    def _lookup(self, wire_seq: int) -> Chunk | None:
        """The outstanding chunk a 32-bit wire seq names (outstanding seqs span less than W)."""
        if not self._outstanding:
            return None
        oldest = next(iter(self._outstanding))
        return self._outstanding.get(oldest + ((wire_seq - oldest) & SEQ_MASK))

    def _fail(self, chunk: Chunk) -> None:
        config = self.config
        if chunk.status is None:
            missing = "no STATUS came from the PS, so it is down or unreachable too, or never got the chunk"
        elif chunk.status == self._full:
            missing = ("every rank contributed (the PS's STATUS is full) but the result was lost: the RESULT, "
                       "the PS's copy and the other workers' answers to the PS's FETCH all failed to arrive")
        else:
            ranks = [r for r in range(config.workers) if not chunk.status >> r & 1]
            missing = f"the PS holds no contribution from ranks {ranks}"
        self.error = TransportError(
            f"job {config.job}: chunk {chunk.seq & SEQ_MASK} (reduction {chunk.reduction.handle}) got no result "
            f"within peer_timeout={config.peer_timeout}s from the {config.describe_destination()} "
            f"after {chunk.retries} resends; {missing}"
        )
        self.counters["failed"] += 1
