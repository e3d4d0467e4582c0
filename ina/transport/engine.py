"""The worker-side transport engine (docs/protocol.md, sections 3, 4, 8 and 9) as a sans-IO `Node`.

A worker submits reductions (arrays of 32-bit words); the engine cuts them into K-word
chunks (the last one as long as the words left, or padded for a switch of whole chunks)
numbered by the job's chunk stream, keeps at most W of them outstanding, resends what
times out, and hands back each reduction's sums once every chunk's RESULT is in.
The same object runs behind a UDP socket (`ina.net.udp`) and inside the simulator.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from ina.net.frames import Frames
from ina.net.node import Address, Datagram
from ina.protocol import HEADER_DTYPE, Flag, Header, Kind, result_words
from ina.protocol.constants import LANE_WIDTHS, MAX_INDEX_BITS, MAX_RACKS, MAX_WORKERS
from ina.transport.chunks import SEQ_MASK, Chunk, Reduction, ResultStore, result_length
from ina.transport.errors import TransportError
from ina.protocol.batch import read_headers
from ina.transport.packets import data_lengths, data_packets, payloads
from ina.transport.priority import MAX_PRIORITY, IntensityPriority, PriorityPolicy
from ina.transport.rto import RttEstimator

_FLAGS_AT = HEADER_DTYPE.fields["flags"][1]
_PRIORITY_AT = HEADER_DTYPE.fields["priority"][1]
# Plain ints: comparing with an IntEnum or IntFlag member costs several times more, per packet.
_RESULT, _STATUS, _FETCH = int(Kind.RESULT), int(Kind.STATUS), int(Kind.FETCH)
_MAX, _RESEND = int(Flag.MAX), int(Flag.RESEND)


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
    span: int = 0  # slots the job's chunks range over (docs/protocol.md, section 4); 0: the whole pool
    ps_only: bool = False
    min_rto: float = 0.005
    max_rto: float = 1.0
    initial_rto: float = 0.05
    peer_timeout: float = 30.0
    first_seq: int = 0
    failover: float = 0.0
    """Seconds a chunk may go unanswered through the switch before this worker sends its DATA to the
    PS instead (docs/protocol.md, section 8, "Failover"); 0: never. Below peer_timeout."""
    failback: float = 0.0
    """Seconds after a failover before new chunks try the switch again; 0: never."""
    pad: bool = False
    """Every DATA zero-padded to `words`: the switch takes only whole chunks (a P4 switch, docs/protocol.md,
    section 1). Else a reduction's last chunk carries only its words, a MAX one."""
    racks: int = 0
    """A racked job's racks (docs/protocol.md, section 10), whose RESULTs carry one bit a rack: `rank` and `workers`
    are then this worker's place in its rack and the rack's size, and `destination` its rack's leaf. 0: one switch."""
    early_resend: int = 3
    """A chunk is resent at once, not at its timeout, when the RESULT of the chunk sent this many chunks after its
    last transmission arrives (docs/protocol.md, section 8, "Early resends"); 0: only on timeout."""

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
        span = self.span or self.pool
        if span & (span - 1) or span > self.pool or (not self.ps_only and self.window > span):
            raise ValueError(f"span must be a power of two in window ({self.window})..pool ({self.pool}), got {span}")
        if not 0 < self.min_rto <= self.initial_rto <= self.max_rto < self.peer_timeout:
            raise ValueError("need 0 < min_rto <= initial_rto <= max_rto < peer_timeout")
        if not 0 <= self.failover < self.peer_timeout or self.failback < 0:
            raise ValueError(f"need 0 <= failover ({self.failover}) < peer_timeout ({self.peer_timeout}) and failback >= 0")
        if self.early_resend < 0:
            raise ValueError(f"early_resend must be 0 (off) or a number of chunks, got {self.early_resend}")
        if self.racks == 1 or not 0 <= self.racks <= MAX_RACKS:
            raise ValueError(f"racks must be 0 (one switch) or 2..{MAX_RACKS}, got {self.racks}")
        if self.destination not in self.sources or len(self.sources) > 2:
            raise ValueError(f"the result sources {set(self.sources)} must be the destination {self.destination} "
                             "and at most one other address (the switch and the PS)")

    @property
    def result_bitmap(self) -> int:
        """The bitmap of every RESULT: one bit a worker, or a racked job's one bit a rack."""
        return (1 << (self.racks or self.workers)) - 1

    @property
    def ps(self) -> Address | None:
        """The job's PS, the only peer whose FETCH a worker answers; None if the config names none."""
        if self.ps_only:
            return self.destination
        others = self.sources - {self.destination}
        return next(iter(others)) if others else None

    def slot(self, seq: np.ndarray) -> np.ndarray | int:
        """The slots of chunks `seq` (unwrapped): `(slot_base + (seq mod span)) mod pool`, or 0 in PS-only mode."""
        return 0 if self.ps_only else (self.slot_base + (seq & ((self.span or self.pool) - 1))) & (self.pool - 1)

    def describe_destination(self) -> str:
        host, port = self.destination
        return f"{'PS' if self.ps_only else 'switch'} at {host}:{port}"


class _Outgoing:
    """What one call sends, in order: answers to FETCHes (to the PS), then runs of DATA rows (each packet the
    first `lengths[i]` bytes of its row), each to where DATA went when it was added (the switch, or the PS
    after a failover)."""

    __slots__ = ("answers", "runs")

    def __init__(self) -> None:
        self.answers: list[Datagram] = []
        self.runs: list[tuple[np.ndarray, np.ndarray, Address]] = []

    def add(self, rows: np.ndarray, lengths: np.ndarray, destination: Address) -> None:
        self.runs.append((rows, lengths, destination))

    def frames(self) -> Frames:
        """One buffer of everything (the rows are copied: they may be views of a reduction's packets)."""
        data = [Frames.of_rows(rows, destination, lengths) for rows, lengths, destination in self.runs]
        return Frames.join([Frames.of(self.answers), *data])

    def datagrams(self) -> list[Datagram]:
        """The same as `Datagram`s (the `Node` interface's form)."""
        out = list(self.answers)
        for rows, lengths, destination in self.runs:
            out += [Datagram(row[:length].tobytes(), destination) for row, length in zip(rows, lengths.tolist())]
        return out


class Engine:
    """A worker's chunk stream: window, retransmission, delivery (see module docstring).

    Drive it as a `Node`, or with `receive_frames` and `tick_frames`, the same with `Frames`
    (what a batched socket moves); `submit` queues a reduction and makes `next_deadline()`
    due so the driver's `tick` sends it. Collect results with `completed()`;
    a peer that stays silent for `peer_timeout` sets `error` (a `TransportError`) and stops the engine.
    With a switch, it keeps its newest 2W results to answer its PS's FETCH (the PS lost a result
    another worker needs); in PS-only mode the PS's own ring holds them all, and it keeps none
    (docs/protocol.md, section 8). `counters`: sent, resent (of them early_resent: overtaken by a later chunk's RESULT),
    held_back (timed out behind the oldest, left to their next timeout), delivered, status, fetch_answered, padding_bytes
    (zeros sent to fill chunks to K for a switch that takes only whole chunks), and drops: foreign (not from
    the switch or PS), malformed, unexpected (wrong job, kind, format, length, or a FETCH not from the PS), late (no such outstanding chunk), fetch_missing (a FETCH
    for a result not kept); failed.
    Packets are built a reduction at a time, sent a burst at a time, and read a batch at a time
    (`ina.transport.packets`); what remains per packet is the window's bookkeeping, in arrival order.
    Not thread-safe: a transport that submits from the training thread while a runner
    thread feeds packets must serialize the calls and wake the runner after `submit`.
    """

    def __init__(self, config: EngineConfig, policy: PriorityPolicy | None = None) -> None:
        self.config = config
        self.policy: PriorityPolicy = policy if policy is not None else IntensityPriority()
        self.rtt = RttEstimator(config.initial_rto, config.min_rto, config.max_rto)
        self.counters: Counter[str] = Counter()
        self.error: TransportError | None = None
        self._full = config.result_bitmap
        self._next_seq = config.first_seq  # the next chunk submitted
        self._next_send = config.first_seq  # the next chunk sent for the first time
        self._next_handle = 0
        self._via_ps_since: float | None = None  # when this worker's DATA went to the PS instead of the switch
        self._unsent: deque[Reduction] = deque()  # reductions with chunks not sent yet, the first holds _next_send
        self._outstanding: dict[int, Chunk] = {}  # in seq order
        self._timers: list[tuple[float, int]] = []
        self._answered = config.first_seq - 1  # the newest chunk whose RESULT came
        self._unresent = config.first_seq  # chunks before it that were never resent are overtaken or answered
        self._resent: deque[tuple[int, int]] = deque()  # (overtaken_by, seq) of resends, overtaken_by non-decreasing
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
        out: np.ndarray | None = None,
    ) -> int:
        """Queue one reduction of uint32 `words`; returns its handle (handles count up from 0).

        `lane_bits` is the width of the sum lanes (32 for `max`); `index_bits > 0` sends packed
        THC indices for the PS to look up (PS-only mode). The result has `len(words)` words
        for lanes, and `result_words(K, index_bits, lane_bits)` words per chunk for indices (the
        last chunk's zero beyond those of its RESULT);
        it is `out` when given (a writable uint32 array of that length, which may be `words`
        itself for lanes: a chunk's sums replace its words only once they are no longer sent).
        """
        if self.error is not None:
            raise self.error
        words = checked_submission(self.config, words, op, lane_bits, index_bits)
        config = self.config
        chunks = -(-words.size // config.words)
        length = result_length(words.size, chunks, config.words, index_bits, lane_bits)
        seqs = np.arange(self._next_seq, self._next_seq + chunks, dtype=np.int64)
        flags = Flag.MAX if op == "max" else Flag.NONE
        template = Header(Kind.DATA, config.job, 0, flags, config.rank, 0, 0, index_bits, lane_bits, 1 << config.rank)
        padding = 4 * (chunks * config.words - words.size) if config.pad else 0
        reduction = Reduction(
            self._next_handle, self._next_seq, data_packets(template, seqs, config.slot(seqs), words, config.words),
            data_lengths(words.size, config.words, config.pad), padding, (int(flags), lane_bits, index_bits),
            result_words(config.words, index_bits, lane_bits), length, now, checked_output(out, length),
        )  # fmt: skip
        self._next_handle += 1
        self._next_seq += chunks
        self._reductions.append(reduction)
        self._unsent.append(reduction)
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
        return self._next_send == self._next_seq and not self._outstanding

    # ----------------------------------------------------------------- the Node interface

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        return self._receive(datagrams, None, now).datagrams()

    def tick(self, now: float) -> list[Datagram]:
        return self._tick(now).datagrams()

    def receive_frames(self, frames: Frames, now: float) -> Frames:
        """`receive` for a batch in one buffer; the datagrams to send come back the same way."""
        return self._receive(frames.datagrams(), frames, now).frames()

    def tick_frames(self, now: float) -> Frames:
        """`tick`, with the datagrams to send in one buffer."""
        return self._tick(now).frames()

    # ----------------------------------------------------------------- internals

    def _receive(self, datagrams: Sequence[Datagram], frames: Frames | None, now: float) -> _Outgoing:
        out = _Outgoing()
        if self.error is None:
            if datagrams:
                self._accept(datagrams, frames, now, out)
            self._pump(now, out)
            self._shorten_tail(now)
        return out

    def _tick(self, now: float) -> _Outgoing:
        out = _Outgoing()
        if self.error is not None:
            return out
        due = []
        while self._timers and self._timers[0][0] <= now:
            deadline, seq = heapq.heappop(self._timers)
            chunk = self._outstanding.get(seq)
            if chunk is None or chunk.deadline != deadline:
                continue
            if now >= chunk.first_sent + self.config.peer_timeout:
                self._fail(chunk)
                return out
            self._maybe_fail_over(chunk, now)
            chunk.timeouts += 1
            chunk.deadline = math.inf  # re-armed below: an older entry of the same deadline is stale too
            due.append(chunk)
        if due:
            self._resend(self._hold_back(due, now), now, out)
        self._pump(now, out)
        self._shorten_tail(now)
        return out

    def _shorten_tail(self, now: float) -> None:
        """Once every chunk still outstanding is among the last `early_resend` sent (all before them answered, none
        after them to overtake them: a MAX chunk the worker waits on, a reduction's last chunks), their timers count
        from the short timeout (section 8, "Early resends")."""
        early, outstanding = self.config.early_resend, self._outstanding
        if not early or not outstanding or next(iter(outstanding)) < self._next_send - early:
            return
        for chunk in outstanding.values():
            if chunk.short_timer:
                continue
            chunk.short_timer = True
            if self._next_timeout(chunk, now) < chunk.deadline:
                self._arm(chunk, now)

    def _hold_back(self, due: list[Chunk], now: float) -> list[Chunk]:
        """Of the chunks whose timers expired, those to resend (section 8, "Early resends"): with early resends, the
        `early_resend` oldest and every one that timed out before. The rest, first timeouts behind them, usually wait
        on what the oldest wait on (a late peer: resending would flush their partials to the PS), so their timers
        restart, doubled; a later chunk's RESULT overtakes them first if they were lost."""
        early = self.config.early_resend
        if not early or len(due) <= early:
            return due
        newest_probe = sorted(chunk.seq for chunk in due)[early - 1]
        resend = []
        for chunk in due:
            if chunk.seq <= newest_probe or chunk.timeouts > 1:
                resend.append(chunk)
                continue
            self._arm(chunk, now)
            self.counters["held_back"] += 1
        return resend

    def _next_timeout(self, chunk: Chunk, now: float) -> float:
        return self._timeout_after(chunk.first_sent, chunk.timeouts, chunk.short_timer, now)

    def _timeout_after(self, first_sent: float, timeouts: int, short_timer: bool, now: float) -> float:
        """When a chunk first sent at `first_sent` times out next if armed `now`: its backoff (from the short timeout
        where only a loss can hold it), or sooner the moment it fails over to the PS while DATA still goes to the
        switch (section 8, "Failover": not a doubled backoff later), at most `peer_timeout` after its first sending."""
        deadline = min(now + self.rtt.backoff(timeouts, short_timer), first_sent + self.config.peer_timeout)
        failover = first_sent + self.config.failover
        return min(deadline, failover) if self._may_fail_over() and now < failover else deadline

    def _arm(self, chunk: Chunk, now: float) -> None:
        chunk.deadline = self._next_timeout(chunk, now)
        heapq.heappush(self._timers, (chunk.deadline, chunk.seq))

    def next_deadline(self) -> float | None:
        if self.error is not None:
            return None
        timers, outstanding = self._timers, self._outstanding
        while timers:  # drop the timers of chunks completed or re-armed since
            deadline, seq = timers[0]
            chunk = outstanding.get(seq)
            if chunk is not None and chunk.deadline == deadline:
                break
            heapq.heappop(timers)
        due = timers[0][0] if timers else None
        if self._next_send < self._next_seq and self._window_open():
            ready = self._unsent[0].queued_at
            due = ready if due is None else min(due, ready)
        return due

    def _oldest(self) -> int:
        """The oldest chunk without its result (the next to send if none is outstanding)."""
        return next(iter(self._outstanding)) if self._outstanding else self._next_send

    def _window_open(self) -> bool:
        """The next chunk may go: every chunk <= seq - W has its result."""
        return self._next_send < self._oldest() + self.config.window

    def _pump(self, now: float, out: _Outgoing) -> None:
        """Send every queued chunk the window lets go, a reduction's run of rows at a time."""
        limit = min(self._next_seq, self._oldest() + self.config.window)
        if self._next_send >= limit:
            return
        self._maybe_fail_back(now)
        deadline = self._timeout_after(now, 0, False, now)
        outstanding, timers = self._outstanding, self._timers
        while self._next_send < limit:
            reduction = self._unsent[0]
            first = reduction.first_seq
            begin, end = self._next_send - first, min(reduction.chunks, limit - first)
            rows = reduction.packets[begin:end]
            rows[:, _PRIORITY_AT] = self._priority(reduction, now)
            out.add(rows.copy(), reduction.lengths[begin:end], self.destination)
            for index in range(begin, end):
                outstanding[first + index] = Chunk(first + index, reduction, index, now, deadline)
                heapq.heappush(timers, (deadline, first + index))
            self.counters["sent"] += end - begin
            self._next_send = first + end
            if end == reduction.chunks:
                self._count_padding(reduction.padding)
                self._unsent.popleft()

    def _resend(self, chunks: list[Chunk], now: float, out: _Outgoing) -> None:
        """Send chunks again, flagged RESEND; arm their timers for the next timeout (doubled by each timeout so far)
        and note which chunk's RESULT would show this resend lost (section 8, "Early resends")."""
        rows = np.stack([chunk.reduction.packets[chunk.index] for chunk in chunks])
        rows[:, _FLAGS_AT] |= _RESEND
        rows[:, _PRIORITY_AT] = [self._priority(chunk.reduction, now) for chunk in chunks]
        out.add(rows, np.array([chunk.reduction.lengths[chunk.index] for chunk in chunks]), self.destination)
        self._count_padding(sum(c.reduction.padding for c in chunks if c.index == c.reduction.chunks - 1))
        self.counters["resent"] += len(chunks)
        overtaken_by = self._next_send + self.config.early_resend - 1
        for chunk in chunks:
            chunk.retries += 1
            self._arm(chunk, now)
            if self.config.early_resend and chunk.overtaken_by != overtaken_by:  # else its entry is still queued
                chunk.overtaken_by = overtaken_by
                self._resent.append((overtaken_by, chunk.seq))

    def _resend_overtaken(self, now: float, out: _Outgoing) -> None:
        """Resend at once every chunk whose last transmission the RESULT of a chunk sent `early_resend` chunks after
        it overtook: on a path that keeps order that transmission, or its RESULT, was lost (section 8, "Early
        resends"). The timeout is not doubled (none expired), and counts from the short timeout: every worker sent
        the chunk."""
        answered, outstanding, early = self._answered, self._outstanding, self.config.early_resend
        due: dict[int, Chunk] = {}  # by seq: a STATUS clears a chunk's mark, so a later resend may queue a second one
        resent = self._resent
        while resent and resent[0][0] <= answered:
            overtaken_by, seq = resent.popleft()
            chunk = outstanding.get(seq)
            if chunk is not None and chunk.overtaken_by == overtaken_by:
                due[seq] = chunk
        while self._unresent <= answered - early:
            chunk = outstanding.get(self._unresent)
            if chunk is not None and not chunk.retries:  # one resent before it was overtaken waits in `resent`
                due[chunk.seq] = chunk
            self._unresent += 1
        if due:
            self.counters["early_resent"] += len(due)
            for chunk in due.values():
                chunk.short_timer = True
            self._resend(list(due.values()), now, out)

    def _count_padding(self, padding: int) -> None:
        """Zero bytes sent to fill a chunk to K (only where there are any: a counter is listed once it counts)."""
        if padding:
            self.counters["padding_bytes"] += padding

    def _priority(self, reduction: Reduction, now: float) -> int:
        """The policy's priority for the reduction's chunks sent at `now` (they were all queued at once)."""
        return max(0, min(self.policy.priority(reduction.queued_at, now), MAX_PRIORITY))

    def _accept(self, datagrams: Sequence[Datagram], frames: Frames | None, now: float, out: _Outgoing) -> None:
        """Take a batch of datagrams (also in one buffer, `frames`, if the caller has it), in order:
        RESULTs and STATUSes for outstanding chunks, FETCHes from the PS (their answers go to `out`);
        count why not for the rest. Headers are read and checked a batch at a time
        (`ina.protocol.batch.read_headers`), and the accepted RESULTs' sums copied into their reductions
        a batch at a time."""
        config, counters, outstanding = self.config, self.counters, self._outstanding
        # Outstanding seqs span less than W, so a 32-bit wire seq names the same chunk whichever
        # outstanding chunk it is unwrapped from, before or after the batch completes some.
        oldest = next(iter(outstanding)) if outstanding else self._next_send
        accepted: dict[Reduction, tuple[list[int], list[bytes]]] = {}  # chunk indices and RESULTs by reduction
        spans = None if frames is None else (frames.buffer, frames.start, frames.length)
        headers = read_headers([data for data, _ in datagrams], config.words, spans)
        for h, (data, source) in zip(headers, datagrams):
            if source not in config.sources:
                counters["foreign"] += 1
            elif h is None:
                counters["malformed"] += 1
            elif h.job != config.job or h.kind not in (_RESULT, _STATUS, _FETCH):
                counters["unexpected"] += 1
            elif h.kind == _FETCH:
                self._answer_fetch(h.seq, source, out)
            elif (chunk := outstanding.get(oldest + ((h.seq - oldest) & SEQ_MASK))) is None:
                counters["late"] += 1
            elif h.kind == _STATUS:  # the PS holds its resend and sends the RESULT once it has one: not lost
                chunk.status = h.bitmap
                chunk.overtaken_by = 0
                counters["status"] += 1
            elif (h.flags & _MAX, h.lane_bits, h.index_bits) != chunk.reduction.format or h.bitmap != self._full \
                    or len(data) != chunk.reduction.result_bytes(chunk.index):  # fmt: skip
                counters["unexpected"] += 1
            else:
                del outstanding[chunk.seq]
                if chunk.retries == 0:
                    self.rtt.sample(now - chunk.first_sent)
                self._answered = max(self._answered, chunk.seq)
                group = accepted.get(chunk.reduction)
                if group is None:
                    group = accepted[chunk.reduction] = ([], [])
                group[0].append(chunk.index)
                group[1].append(bytes(data))
                if not config.ps_only:
                    self._results.put(chunk.seq, group[1][-1])
                counters["delivered"] += 1
        for reduction, (indices, packets) in accepted.items():
            reduction.fill(np.array(indices, dtype=np.int64), payloads(packets, reduction.words_per_result))
        if accepted and config.early_resend:
            self._resend_overtaken(now, out)

    def _answer_fetch(self, wire_seq: int, source: Address, out: _Outgoing) -> None:
        """The PS lost a result that another worker needs: send it ours, as received.

        Only the job's PS may ask (the switch never does), so a worker never sends results
        anywhere else; a chunk not among our newest 2W results is counted, not answered.
        """
        if source != self.config.ps:
            self.counters["unexpected"] += 1
            return
        packet = self._results.get(wire_seq)
        if packet is None:
            self.counters["fetch_missing"] += 1
            return
        out.answers.append(Datagram(packet, source))
        self.counters["fetch_answered"] += 1

    @property
    def destination(self) -> Address:
        """Where DATA goes now: the configured destination, or the PS after a failover."""
        return self.config.destination if self._via_ps_since is None else self.config.ps  # type: ignore[return-value]

    def _maybe_fail_over(self, chunk: Chunk, now: float) -> None:
        """A chunk unanswered through the switch for `failover` seconds: send DATA to the PS instead
        (docs/protocol.md, section 8, "Failover"); whatever the switch held is resent there, exactly once."""
        if self._may_fail_over() and now >= chunk.first_sent + self.config.failover:
            self._via_ps_since = now
            self.counters["failovers"] += 1

    def _may_fail_over(self) -> bool:
        """DATA goes to a switch, and the job has a PS to fail over to."""
        config = self.config
        return self._via_ps_since is None and bool(config.failover) and not config.ps_only and config.ps is not None

    def _maybe_fail_back(self, now: float) -> None:
        """`failback` seconds after a failover, new chunks try the switch again."""
        if self._via_ps_since is not None and self.config.failback and now >= self._via_ps_since + self.config.failback:
            self._via_ps_since = None
            self.counters["failbacks"] += 1

    def _fail(self, chunk: Chunk) -> None:
        self.error = TransportError(failure_message(self.config, chunk.seq, chunk.reduction.handle, chunk.retries, chunk.status))
        self.counters["failed"] += 1


def checked_submission(config: EngineConfig, words: np.ndarray, op: str, lane_bits: int, index_bits: int) -> np.ndarray:
    """`words` as an array, if the reduction is one the protocol can carry (`Engine.submit`); else ValueError."""
    words = np.asarray(words)
    if words.dtype != np.uint32 or words.ndim != 1 or words.size == 0:
        raise ValueError(f"submit a non-empty 1-D uint32 array, got {words.dtype} of shape {words.shape}")
    if op not in ("sum", "max"):
        raise ValueError(f"op must be 'sum' or 'max', got {op!r}")
    if lane_bits not in LANE_WIDTHS or (op == "max" and lane_bits != 32):
        raise ValueError(f"lane_bits must be one of {LANE_WIDTHS} (32 for max), got {lane_bits}")
    if not 0 <= index_bits <= MAX_INDEX_BITS or (index_bits and (op == "max" or not config.ps_only)):
        raise ValueError(f"index_bits {index_bits}: indices (1..{MAX_INDEX_BITS}) are summed only by the PS, in PS-only mode")
    return words


def checked_output(out: np.ndarray | None, length: int) -> np.ndarray | None:
    """`out`, if it can hold a result of `length` words in place (`Engine.submit`); else ValueError."""
    if out is not None and (not isinstance(out, np.ndarray) or out.dtype != np.uint32 or out.shape != (length,)
                            or not out.flags.c_contiguous or not out.flags.writeable):  # fmt: skip
        raise ValueError(f"out must be a writable contiguous uint32 array of the result's {length} words")
    return out


def failure_message(config: EngineConfig, seq: int, handle: int, retries: int, status: int | None) -> str:
    """What a worker says when chunk `seq` got no result within peer_timeout (docs/protocol.md, section 8):
    the job, the chunk, where it went, and from the PS's latest STATUS bitmap, who is missing."""
    full = (1 << config.workers) - 1
    if status is None:
        missing = "no STATUS came from the PS, so it is down or unreachable too, or never got the chunk"
    elif status == full:
        missing = ("every rank contributed (the PS's STATUS is full) but the result was lost: the RESULT, "
                   "the PS's copy and the other workers' answers to the PS's FETCH all failed to arrive")
    else:
        ranks = [r for r in range(config.workers) if not status >> r & 1]
        missing = f"the PS holds no contribution from ranks {ranks}"
    return (f"job {config.job}: chunk {seq & SEQ_MASK} (reduction {handle}) got no result "
            f"within peer_timeout={config.peer_timeout}s from the {config.describe_destination()} "
            f"after {retries} resends; {missing}")
