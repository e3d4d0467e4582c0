"""The last resort of a job whose aggregators are gone: its reductions go on over torch.distributed.

`CollectiveFallback` wraps a UDP transport (the switch and the PS, or the PS alone; it fails over
from the switch to the PS itself, docs/protocol.md section 8). Every reduction goes through the
wrapped transport as before, and a copy of its input is kept until every rank has its result.

A heartbeat thread gathers each rank's state once a `beat` over a gloo group of its own: whether
its aggregators have gone silent (no RESULT, STATUS or FETCH in the `silence` seconds since it
resent a chunk, once it can fail over no further) or its engine gave up, whether it is closing, the oldest
reduction it still lacks and (rank 0) whether the aggregators answer again. Reductions older than the oldest any rank
lacks are done everywhere, so their inputs are dropped. When some rank is silent, every rank
switches at the same beat: from the oldest reduction any rank lacks, each is summed again over a
second gloo group, in submission order, on a thread that issues nothing else there. Results a rank
already received are the same integers, and are dropped; the others complete the hook's futures.
Later reductions go to the collective directly. Each group has only one thread issuing on it, and
every rank issues the same sequence, so nothing interleaves with DDP's own collectives.

On the collective, rank 0 asks the aggregators' control APIs every ``failback`` seconds (the
wrapped transport's option; 0: never) whether they answer again. When they do, every rank reopens
the wrapped transport at the same beat (a fresh socket, engine and registration), holds its next
reduction while the heartbeat gathers how many each rank has submitted, and from the largest count
on the reductions go through the aggregators again; those before it finish over the collective.
A rank that dies leaves the others' collectives waiting; gloo's timeout, set to the transport's
``peer_timeout``, turns that into a TransportError (docs/transport.md, "When something dies").
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Optional

import torch
import torch.distributed as dist

from ina.compression import THCCodec
from ina.transport.base import Transport
from ina.transport.collective import CollectiveTransport
from ina.transport.errors import TransportError

__all__ = ["CollectiveFallback", "FALLBACKS", "checked_fallback", "with_fallback"]

logger = logging.getLogger(__name__)

FALLBACKS = ("ps", "collective")
"""The stages a job may fall back to, in the order it does: the PS behind the switch, then the collective."""

_HEARD = ("delivered", "status", "fetch_answered", "late")  # engine counters that only an answering aggregator moves
_FAILED, _CLOSING, _OLDEST, _BACK = range(4)  # a rank's heartbeat vector


def checked_fallback(fallback: Any) -> tuple[str, ...]:
    """`fallback` as a tuple of stages in order, or ValueError saying what is allowed."""
    chain = (fallback,) if isinstance(fallback, str) else tuple(fallback)
    if any(stage not in FALLBACKS for stage in chain) or list(chain) != sorted(set(chain), key=FALLBACKS.index):
        raise ValueError(f"fallback must list stages of {FALLBACKS} in that order, each once, e.g. ('ps', 'collective') "
                         f"or () for none; got {fallback!r}")  # fmt: skip
    return chain


def with_fallback(transport: Transport, chain: tuple[str, ...]) -> Transport:
    """`transport` with the fallback `chain` applied: the switch's failover to the PS kept only with "ps",
    and a UDP transport (also inside a two-level one) wrapped in `CollectiveFallback` with "collective"."""
    from ina.transport.hierarchy import HierarchicalTransport
    from ina.transport.udp import _UdpTransport

    if isinstance(transport, HierarchicalTransport):
        transport.inner = with_fallback(transport.inner, chain)
        return transport
    if not isinstance(transport, _UdpTransport):
        return transport  # the collective itself, a fallback already, or a transport of the caller's own
    if "ps" not in chain:
        transport.keep_to_the_switch()
    return CollectiveFallback(transport) if "collective" in chain else transport


@dataclass
class _Mark:
    """The last sign that the aggregators may still answer: an answer (a RESULT, STATUS or FETCH), a
    failover to the PS (a new stage), or, while the wrapped transport can still fail over, every
    beat; and when the engine first resent a chunk after it (asked again, with no answer since)."""

    heard: int = -1
    moves: int = 0
    resent: int = 0
    asked: Optional[float] = None

    def update(self, primary: Any, now: float) -> _Mark:
        counters = primary.counters
        heard, moves, resent = sum(counters.get(name, 0) for name in _HEARD), counters.get("failovers", 0), counters.get("resent", 0)
        if heard != self.heard or moves != self.moves or (primary.path == "switch" and primary.timing["failover"]):
            self.heard, self.moves, self.resent, self.asked = heard, moves, resent, None
        elif resent != self.resent and self.asked is None:
            self.asked = now
        return self

    def silent(self, now: float, silence: float) -> bool:
        """Asked again `silence` seconds ago or more, and not answered since."""
        return self.asked is not None and now - self.asked >= silence


@dataclass(eq=False)
class _Reduction:
    """One reduction as the hook handed it over, kept until every rank has its result."""

    index: int
    op: str  # "max" or "sum"
    input: torch.Tensor
    workers: int  # for a sum: how many ranks' values it adds
    indices: bool  # a sum's input holds table indices (PS-only), not table values
    generation: int  # the wrapped transport's reopenings before this reduction was sent through it
    out: torch.futures.Future = field(init=False)
    settled: bool = False  # its result (or error) is set
    primary_error: Optional[BaseException] = None

    def __post_init__(self) -> None:
        # A future that holds CUDA tensors names their device (as the wrapped transport's do), so that
        # its waiters wait for the stream that made the result.
        device = self.input.device
        self.out = torch.futures.Future(devices=[device] if device.type == "cuda" else None)


class CollectiveFallback(Transport):
    """A UDP transport whose job goes on over torch.distributed when its aggregators go silent.

    ``beat``: seconds between heartbeats (default a quarter of the silence, at most 1 s). The silence
    is the wrapped transport's ``failover`` (else 5 s or a quarter of its ``peer_timeout``). Counters:
    the wrapped transport's (its engines' together), plus ``collective_fallbacks``,
    ``collective_failbacks`` and ``collective_reductions``; ``path`` says "collective" while the
    job is there.
    """

    def __init__(self, primary: Any, beat: Optional[float] = None) -> None:
        self.primary = primary
        self.takes_values = primary.takes_values
        self.max_workers = primary.max_workers
        timing = primary.timing
        self.peer_timeout: float = timing["peer_timeout"]
        self.silence: float = timing["failover"] or min(5.0, self.peer_timeout / 4)
        self.beat = beat if beat is not None else min(1.0, self.silence / 4)
        if not 0 < self.beat < self.peer_timeout:
            raise ValueError(f"beat must be in (0, peer_timeout={self.peer_timeout}), got {beat}")
        self._backup: Optional[CollectiveTransport] = None
        self._codec: Optional[THCCodec] = None
        self._values_in = True  # what a sum's input is after attach: table values (else indices)
        self._lock = threading.Lock()
        self._resume = threading.Condition(self._lock)  # a held submission waits on it
        self._kept: dict[int, _Reduction] = {}  # by index, in submission order
        self._next = 0
        self._routes: list[tuple[int, str]] = [(0, "primary")]  # from which reduction each path is taken
        self._held = False
        self._wake = threading.Event()
        self._generation = 0
        self._since_fallback = 0.0  # when the job last went to the collective
        self._earlier: Counter[str] = Counter()  # the counters of the wrapped transport's earlier engines
        self._closing = False
        self._gave_up: Optional[BaseException] = None  # the wrapped engine's error
        self._broken: Optional[BaseException] = None  # the heartbeat's, which ends any fallback
        self._mark = _Mark()
        self.tally: Counter[str] = Counter()
        self._queue: queue.Queue[Optional[_Reduction]] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._groups: list[dist.ProcessGroup] = []
        super().__init__()

    # --- set-up and shut-down ------------------------------------------------------------------

    def attach(self, codec: THCCodec, process_group: dist.ProcessGroup, ranks: Optional[int] = None) -> None:
        """Attach the wrapped transport, make the heartbeat's and the collective's gloo groups (the
        members of `process_group` only) and start their threads."""
        self.primary.attach(codec, process_group, ranks)
        members = dist.get_process_group_ranks(process_group)
        timeout = timedelta(seconds=self.peer_timeout)
        self._groups = [dist.new_group(members, timeout=timeout, backend="gloo", use_local_synchronization=True)
                        for _ in range(2)]  # fmt: skip
        self._codec, self._values_in = codec, self.takes_values or ranks is not None
        self._backup = CollectiveTransport()
        self._backup.attach(codec, self._groups[1])
        self._threads = [threading.Thread(target=self._beat_until_closed, name="ina-heartbeat", daemon=True),
                         threading.Thread(target=self._sum_collectively, name="ina-fallback", daemon=True)]  # fmt: skip
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        """Stop the heartbeat once every rank closes (within the peer timeout), then the collective's
        thread, then the wrapped transport; calling it twice is harmless. The two gloo groups stay:
        torch names a group made by its members alone after them, so one made again by the same
        members after a destroyed one would find the old one's addresses in the store."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self._wake.set()  # beat now, and then without pause, until every rank closes
        if self._threads:
            self._threads[0].join(self.peer_timeout + 2 * self.beat)
            if self._threads[0].is_alive():
                logger.warning("job %s: not every rank closed within %g s; closing anyway", self.job, self.peer_timeout)
            self._queue.put(None)
            self._threads[1].join(self.peer_timeout)
        self.primary.close()

    # --- what the hook and a user see -------------------------------------------------------------

    @property
    def job(self) -> Optional[int]:
        return self.primary.job

    @property
    def words(self) -> int:
        return self.primary.words

    @property
    def path(self) -> str:
        """Where reductions go now: "switch", "ps", or "collective"."""
        return "collective" if self._route(self._next) == "collective" else self.primary.path

    @property
    def counters(self) -> dict[str, int]:
        return dict(self._earlier + Counter(self.primary.counters) + self.tally)

    @property
    def bytes_sent(self) -> int:  # type: ignore[override]
        return self.primary.bytes_sent + (self._backup.bytes_sent if self._backup is not None else 0)

    @bytes_sent.setter
    def bytes_sent(self, value: int) -> None:  # resetting the meter resets both parts
        self.primary.bytes_sent = value
        if self._backup is not None:
            self._backup.bytes_sent = 0

    def norm_max(self, norm: torch.Tensor, *, bucket: int) -> torch.futures.Future[torch.Tensor]:
        kept = norm.detach().clone()
        return self._submit("max", kept, 1, False, lambda: self.primary.norm_max(norm, bucket=bucket))

    def table_sum(self, indices: torch.Tensor, codec: THCCodec, workers: int, *, bucket: int) -> torch.futures.Future[torch.Tensor]:
        kept = indices.clone()  # the wrapped transport may sum into its input
        return self._submit("sum", kept, workers, not self._values_in,
                            lambda: self.primary.table_sum(indices, codec, workers, bucket=bucket))  # fmt: skip

    # --- reductions -----------------------------------------------------------------------------

    def _route(self, index: int) -> str:
        """"primary" or "collective": the path of reduction `index` (under the lock, or a snapshot)."""
        return next(route for start, route in reversed(self._routes) if start <= index)

    def _submit(self, op: str, kept: torch.Tensor, workers: int, indices: bool, send: Any) -> torch.futures.Future[torch.Tensor]:
        with self._lock:
            while self._held:  # the heartbeat is choosing the reduction from which the aggregators take over again
                self._resume.wait()
            reduction = _Reduction(self._next, op, kept, workers, indices, self._generation)
            self._next += 1
            self._kept[reduction.index] = reduction
            collective, broken = self._route(reduction.index) == "collective", self._broken
            if collective and broken is None:
                self._queue.put(reduction)
        if broken is not None and collective:
            self._settle(reduction, error=broken)
        elif not collective:
            try:
                future = send()
            except TransportError as error:  # the engine gave up before: the heartbeat takes it from here
                self._primary_failed(reduction, error)
            else:
                future.add_done_callback(lambda done: self._primary_done(reduction, done))
        return reduction.out

    def _primary_done(self, reduction: _Reduction, done: torch.futures.Future) -> None:
        try:
            value = done.value()
        except Exception as error:  # noqa: BLE001 - an engine that gave up: the collective completes it
            self._primary_failed(reduction, error)
            return
        self._settle(reduction, value)

    def _primary_failed(self, reduction: _Reduction, error: BaseException) -> None:
        with self._lock:
            reduction.primary_error = error
            if self._gave_up is None and reduction.generation == self._generation:  # not a closed engine's
                self._gave_up = error
            broken = self._broken
        if broken is not None:
            self._settle(reduction, error=_cannot_fall_back(error, broken))

    def _settle(self, reduction: _Reduction, value: Optional[torch.Tensor] = None, error: Optional[BaseException] = None) -> None:
        """Complete the hook's future once, with whichever path answered first (both sum the same integers)."""
        with self._lock:
            if reduction.settled:
                return
            reduction.settled = True
        if error is not None:
            reduction.out.set_exception(error)
        else:
            reduction.out.set_result(value)

    def _sum_collectively(self) -> None:
        """The fallback's thread: each queued reduction over the collective's group, in order."""
        assert self._backup is not None and self._codec is not None
        backup, codec = self._backup, self._codec
        while (reduction := self._queue.get()) is not None:
            try:
                value = reduction.input.cpu()
                if reduction.op == "max":
                    total = backup.norm_max(value, bucket=0).wait()
                else:
                    value = codec.table_values(value) if reduction.indices else value
                    total = backup.table_sum(value, codec, reduction.workers, bucket=0).wait()
            except Exception as error:  # noqa: BLE001 - a rank gone: say so on every hook future left
                self._break(TransportError(f"job {self.job}: the collective fallback failed at reduction "
                                           f"{reduction.index}: {error}"))  # fmt: skip
                return
            self.tally["collective_reductions"] += 1
            self._settle(reduction, total.to(reduction.input.device))

    # --- the heartbeat ----------------------------------------------------------------------------

    def _beat_until_closed(self) -> None:
        group = self._groups[0]
        while True:
            self._wake.wait(self.beat)
            mine = self._state(time.monotonic())
            everyone = [torch.zeros(4, dtype=torch.int64) for _ in range(group.size())]
            try:
                dist.all_gather(everyone, mine, group=group)
            except Exception as error:  # noqa: BLE001 - a rank gone or hung: no agreement is possible any more
                self._break(TransportError(f"job {self.job}: a rank stopped answering the heartbeat within "
                                           f"{self.peer_timeout} s: {error}"))  # fmt: skip
                return
            states = torch.stack(everyone)
            oldest = int(states[:, _OLDEST].min())
            self._forget_before(oldest)
            on_collective = self.path == "collective"
            try:
                if states[:, _FAILED].any() and not on_collective:
                    self._fall_back(oldest, [r for r in range(len(everyone)) if states[r, _FAILED]])
                elif states[0, _BACK] and on_collective and not states[:, _CLOSING].any():
                    self._fail_back(group)
            except Exception as error:  # noqa: BLE001 - the ranks may no longer agree: stop here, loudly
                self._break(TransportError(f"job {self.job}: returning to the aggregators failed: {error}"))
                return
            if states[:, _CLOSING].all():
                return

    def _state(self, now: float) -> torch.Tensor:
        """This rank's heartbeat: silent or given up, closing, the oldest reduction it lacks, the aggregators back."""
        mark = self._mark.update(self.primary, now)  # before the lock: the engine's thread takes it to complete a reduction
        back = self._probe(now)
        with self._lock:
            waiting = [r for r in self._kept.values() if not r.settled]
            oldest = waiting[0].index if waiting else self._next
            sent = [r for r in waiting if self._route(r.index) == "primary"]
            silent = sent and mark.silent(now, self.silence)
            failed = self._gave_up is not None or bool(silent)
            return torch.tensor([int(failed), int(self._closing), oldest, int(back)], dtype=torch.int64)

    def _probe(self, now: float) -> bool:
        """Rank 0, on the collective, `failback` seconds after it went there (and after each try):
        whether the aggregators answer again."""
        failback = self.primary.timing["failback"]
        if self._groups[0].rank() != 0 or self.path != "collective" or not failback or now < self._since_fallback + failback:
            return False
        self._since_fallback = now
        return bool(self.primary.reachable())

    def _forget_before(self, oldest: int) -> None:
        """Drop the inputs of reductions every rank has the result of."""
        with self._lock:
            for index in [i for i in self._kept if i < oldest]:
                del self._kept[index]

    def _fall_back(self, oldest: int, silent: list[int]) -> None:
        """Every rank at the same beat: the reductions sent through the aggregators from the oldest any
        rank lacks on, and every later one, go over the collective, in order."""
        with self._lock:
            first = max(oldest, self._routes[-1][0])  # those before it are on the collective already
            self._routes.append((first, "collective"))
            for reduction in self._kept.values():
                if reduction.index >= first:
                    self._queue.put(reduction)
            cause, self._since_fallback = self._gave_up, time.monotonic()
        self.tally["collective_fallbacks"] += 1
        logger.warning("job %s: the aggregators went silent for rank(s) %s (%s): reductions from %d on go over the "
                       "collective", self.job, silent, cause or f"nothing heard for {self.silence:g} s", first)  # fmt: skip

    def _fail_back(self, group: dist.ProcessGroup) -> None:
        """Every rank at the same beat, once rank 0 found the aggregators answering: reopen the wrapped
        transport, hold new reductions, and from the most any rank has submitted on, send them there."""
        with self._lock:
            self._earlier += Counter(self.primary.counters)  # the engine about to close
            self._generation += 1
        try:
            self.primary.reopen(group)  # agreed: every rank raises, or none
        except TransportError as error:
            logger.info("job %s: the aggregators answer but refuse the job again (%s): staying on the collective", self.job, error)
            return
        with self._lock:
            self._gave_up = None
            self._held = True
        counts = [torch.zeros(1, dtype=torch.int64) for _ in range(group.size())]
        first = None
        try:
            dist.all_gather(counts, torch.tensor([self._next], dtype=torch.int64), group=group)
            first = int(torch.cat(counts).max())
        finally:
            with self._lock:
                if first is not None:
                    self._routes.append((first, "primary"))
                self._held = False
                self._resume.notify_all()
        self._mark = _Mark()
        self.tally["collective_failbacks"] += 1
        logger.info("job %s: the aggregators answer again: reductions from %d on go through them (%s)", self.job, first, self.primary.path)

    def _break(self, error: TransportError) -> None:
        """No fallback is possible any more: every reduction the wrapped transport gave up on fails with `error`."""
        with self._lock:
            self._broken = error
            self._held = False
            self._resume.notify_all()
            waiting = [r for r in self._kept.values()
                       if not r.settled and (r.primary_error is not None or self._route(r.index) == "collective")]  # fmt: skip
        for reduction in waiting:
            self._settle(reduction, error=_cannot_fall_back(reduction.primary_error, error))


def _cannot_fall_back(error: Optional[BaseException], why: BaseException) -> TransportError:
    if error is None:
        return why if isinstance(why, TransportError) else TransportError(str(why))
    return TransportError(f"{error}; the collective fallback is not possible: {why}")
