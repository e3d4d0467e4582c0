"""THC reductions through the software (or a P4) switch and the parameter server, over UDP.

`SwitchTransport` sends table values in lanes to the switch, which adds them and hands what
it cannot finish to the PS; `PSTransport` sends b-bit table indices to the PS alone, which
looks them up and adds them (docs/protocol.md, section 3). Either way the sums are exact
integers, bit-identical to `CollectiveTransport`'s.

Each worker runs the protocol's engine (window, resends, delivery) on a UDP socket of its own,
on a background thread (`ina.transport.udp_engine`). CUDA buckets cross to the host once each
way through pinned memory (`_on_host`, `_on_device`). When THCState attaches the transport,
the workers exchange their addresses over the process group and rank 0 registers the job
(`ina.transport.udp_setup`); `close()` (rank 0) deregisters it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import weakref
from abc import abstractmethod
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.distributed as dist

from ina.compression import THCCodec, THCConfig, sum_lane_bits
from ina.control import Endpoint, JobSpec
from ina.control.http import ControlError
from ina.net.multicast import enabled as multicast_enabled
from ina.net.udp import SOCKET_BUFFER_BYTES
from ina.protocol import MAX_WORKERS, result_words
from ina.protocol.constants import MAX_RACKS
from ina.protocol.packing import fields_per_word
from ina.transport.base import Transport, norm_word, word_norm
from ina.transport.engine import EngineConfig
from ina.transport.errors import TransportError, too_many_workers
from ina.transport.groups import result_group
from ina.transport.payload import pack_words, unpack_words
from ina.transport.priority import PriorityPolicy
from ina.transport.racks import RackedDeployment, RackPlan, locate_racked, register_racked
from ina.transport.udp_engine import ServedEngine, serve_engine
from ina.transport.udp_setup import (
    ENVIRONMENT,
    Aggregator,
    Deployment,
    LeaseKeeper,
    Registration,
    agree,
    bind_socket,
    deregister,
    derived_job,
    free_job,
    locate,
    ps_only_words,
    register,
)

__all__ = ["PSTransport", "SwitchTransport"]

logger = logging.getLogger(__name__)
_INITIAL_RTO = 0.05


class _UdpTransport(Transport):
    """What both transports share: bootstrap, the engine on its thread, the MAX of the norms, the SUM's payload.

    A SUM sends the table values in lanes, except in PS-only mode, where it sends the b-bit indices
    for the PS to look up; the leaders of a two-level job (attached with ``ranks``) hand node sums,
    which are no indices, so they send lanes to the PS too (docs/protocol.md, section 3).

    Options (seconds for times):
        bind: the worker's numeric IPv4 address (``host`` or ``host:port``; default INA_BIND,
            else the local address that routes to the switch or PS).
        job: the job id (default INA_JOB, else derived from the workers' addresses and moved to
            the first id free at the switch and the PS).
        window: most chunks in flight per worker (the protocol's W).
        priority_cap: the highest priority the switch grants this job's packets.
        policy: the end-host priority policy (default: ESA's intensity policy with ageing).
        min_rto, max_rto: bounds of the adaptive resend timeout (default 20 ms, and 1 s or a
            quarter of ``peer_timeout``); ``min_rto`` should exceed the usual skew between
            workers, since a resend flushes the chunk from the switch to the PS.
        peer_timeout: a chunk without a result this long fails the training step with a
            TransportError that says who did not answer.
        failover: a chunk unanswered this long through the switch sends this worker's DATA to the
            PS instead, exactly (docs/protocol.md, section 8, "Failover"); 0: never. Default 5 s, at
            most a quarter of ``peer_timeout``.
        failback: this long after a failover, new chunks try the switch again; 0: never. Default 30 s.
        multicast: let the aggregators send RESULTs to the job's group where every rank receives it
            (docs/protocol.md, section 7, "RESULT groups"); False keeps them unicast. Default: INA_MULTICAST
            (on unless 0).
    """

    def __init__(
        self,
        ps: Aggregator,
        switch: Optional[Aggregator],
        spine: Optional[Aggregator] = None,
        *,
        bind: Optional[str] = None,
        job: Optional[int] = None,
        window: Optional[int] = None,
        priority_cap: int = 255,
        policy: Optional[PriorityPolicy] = None,
        min_rto: float = 0.02,
        max_rto: Optional[float] = None,
        peer_timeout: float = 30.0,
        failover: Optional[float] = None,
        failback: float = 30.0,
        multicast: Optional[bool] = None,
    ) -> None:
        self._engine: Optional[ServedEngine] = None  # before the base sets bytes_sent
        super().__init__()
        if job is None and os.environ.get(ENVIRONMENT["job"]):
            job = int(os.environ[ENVIRONMENT["job"]])
        if job is not None and not 0 <= job < 1 << 16:
            raise ValueError(f"job must be in 0..65535, got {job}")
        if window is not None and window < 1:
            raise ValueError(f"window must be at least 1 chunk, got {window}")
        if max_rto is None:
            max_rto = max(min_rto, min(1.0, peer_timeout / 4))
        if not 0 < min_rto <= max_rto < peer_timeout:
            raise ValueError(f"need 0 < min_rto <= max_rto < peer_timeout, got {min_rto}, {max_rto}, {peer_timeout}")
        if failover is None:
            failover = min(5.0, peer_timeout / 4)
        if not 0 <= failover < peer_timeout or failback < 0:
            raise ValueError(f"need 0 <= failover < peer_timeout and failback >= 0, got {failover}, {peer_timeout}, {failback}")
        self._ps, self._switch, self._spine = ps, switch, spine
        if spine is not None:
            self.max_workers = MAX_WORKERS * MAX_RACKS  # racks of 32 (docs/protocol.md, section 10)
        self._bind, self._job, self._window = bind, job, window
        self._priority_cap, self._policy = priority_cap, policy
        self._multicast = multicast_enabled() if multicast is None else multicast
        self._timing = {"min_rto": min_rto, "max_rto": max_rto, "peer_timeout": peer_timeout,
                        "initial_rto": min(max(_INITIAL_RTO, min_rto), max_rto), "failover": failover, "failback": failback}  # fmt: skip
        self._config: Optional[THCConfig] = None
        self._workers = 0
        self._ranks = 0  # the ranks whose values the sums hold: the workers, or a two-level job's total
        self._lane_bits = 0
        self._index_bits = 0  # what a SUM's DATA carries: 0 for lanes, b for indices to the PS
        self._words = 0
        self.job: Optional[int] = None
        self._closer: Optional[weakref.finalize] = None
        self._moves = (0, 0)  # the engine's failovers and fail-backs, as last logged
        self._reductions = 0  # submitted so far (a norm's MAX and a bucket's SUM each count one)
        self._attached: Optional[tuple[THCCodec, Optional[int]]] = None  # attach's codec and ranks, for reopen

    @property
    def words(self) -> int:
        """K, the 32-bit words of each DATA packet the job registered (0 before `attach`)."""
        return self._words

    # --- bootstrap --------------------------------------------------------------------

    max_workers = MAX_WORKERS  # a chunk's bitmap holds one bit a worker (docs/protocol.md, section 1)

    def attach(self, codec: THCCodec, process_group: dist.ProcessGroup, ranks: Optional[int] = None) -> None:
        """Bind the socket, exchange addresses, register the job (rank 0) and start the engine."""
        if self._engine is not None:
            raise ValueError("this transport serves a THCState already; build one transport per THCState")
        group, config = process_group, codec.config
        rank, workers = group.rank(), group.size()
        plan = self._rack_plan(group)
        if plan is None and workers > MAX_WORKERS:
            raise too_many_workers(workers, MAX_WORKERS, nodes=ranks is not None)
        self._config, self._workers, self._ranks = config, workers, ranks or workers
        self._attached = (codec, ranks)
        self._lane_bits = sum_lane_bits(self._ranks, config.granularity)
        self._index_bits = config.bits if self._switch is None and ranks is None else 0
        if plan is None:
            engine_config, sock, member, aggregators, lease = self._register_one_switch(group)
        else:
            engine_config, sock, member, aggregators, lease = self._register_racked(group, plan)
        self.job, self._words = engine_config.job, engine_config.words
        self._engine = serve_engine(engine_config, sock, self._policy, member)  # native where it is built
        owner = (aggregators, engine_config.job) if rank == 0 else None
        keeper = None
        if owner is not None and lease:
            keeper = LeaseKeeper(aggregators, engine_config.job, lease)
        self._closer = weakref.finalize(self, _shut_down, self._engine, owner, keeper)
        dist.barrier(group=group)
        logger.info("job %d, rank %d: %s at %s:%d, window %d", engine_config.job, rank, type(self).__name__,
                    *self._engine.address, engine_config.window)  # fmt: skip

    def _rack_plan(self, group: dist.ProcessGroup) -> Optional[RackPlan]:
        """With a spine, every rank's leaf gathered into racks (docs/protocol.md, section 10); None for a job of one
        switch: no spine, or every worker under the same leaf."""
        if self._spine is None or self._switch is None:
            return None
        leaves: list[Any] = [None] * group.size()
        dist.all_gather_object(leaves, self._switch, group=group)
        plan = RackPlan.of(leaves)
        return plan if plan.racks > 1 else None

    def _register_one_switch(self, group: dist.ProcessGroup) -> tuple[EngineConfig, Any, Any, list[Aggregator], float]:
        """The job under one switch (or PS-only): the engine's config, its socket and RESULT group socket, the
        aggregators the job is registered with and its lease there (seconds; 0: for ever)."""
        deployment: Deployment = agree(group, lambda: self._deployment(locate(self._ps, self._switch)))
        sock = bind_socket(self._bind, deployment.destination)
        aggregators = [a for a in (self._ps, self._switch) if a is not None]
        member = None
        try:
            spec = self._spec(deployment, self._gather_addresses(group, sock))
            if self._job is None:
                spec = replace(spec, job=agree(group, lambda: free_job(aggregators, deployment, spec.job)))
            member, address, grouped = result_group(group, aggregators, spec.job, deployment.destination[1], sock.getsockname()[0],
                                                    self._multicast)  # fmt: skip
            spec = replace(spec, group=Endpoint(*address))
            registration: Registration = agree(
                group, lambda: register(self._ps, self._switch, deployment, spec, pick_job=False, grouped=grouped)
            )
        except BaseException:
            for opened in filter(None, (sock, member)):
                opened.close()
            raise
        config = EngineConfig(
            job=registration.job, rank=group.rank(), workers=group.size(), words=deployment.words, window=spec.window,
            destination=deployment.destination, sources=frozenset(filter(None, (deployment.switch, deployment.ps))),
            pool=deployment.pool, slot_base=registration.slot_base, span=registration.span, ps_only=self._switch is None,
            pad=not deployment.short_chunks, **self._timing,
        )  # fmt: skip
        return config, sock, member, aggregators, registration.lease

    def _register_racked(self, group: dist.ProcessGroup, plan: RackPlan) -> tuple[EngineConfig, Any, None, list[Aggregator], float]:
        """The job over its racks' leaves and the spine (docs/protocol.md, section 10), as `_register_one_switch`
        returns it: each worker sends to its leaf, as its place in its rack; RESULTs are unicast."""
        assert self._spine is not None
        racked: RackedDeployment = agree(group, lambda: locate_racked(self._ps, self._spine, plan))
        deployment, rank = racked.deployment, group.rank()
        rack = plan.rack_of[rank]
        leaf = racked.leaf_data[rack]
        sock = bind_socket(self._bind, leaf)
        aggregators = [self._ps, self._spine, *plan.leaves]
        try:
            spec = self._spec(deployment, self._gather_addresses(group, sock))
            if self._job is None:
                spec = replace(spec, job=agree(group, lambda: free_job(aggregators, deployment, spec.job)))
            registration: Registration = agree(group, lambda: register_racked(self._ps, self._spine, plan, racked, spec))
        except BaseException:
            sock.close()
            raise
        config = EngineConfig(
            job=registration.job, rank=plan.place[rank], workers=plan.sizes[rack], words=deployment.words, window=spec.window,
            destination=leaf, sources=frozenset((leaf, deployment.ps)), pool=deployment.pool, slot_base=registration.slot_base,
            span=registration.span, pad=not deployment.short_chunks, racks=plan.racks, **self._timing,
        )  # fmt: skip
        return config, sock, None, aggregators, registration.lease

    @staticmethod
    def _gather_addresses(group: dist.ProcessGroup, sock: Any) -> list[tuple[str, int]]:
        """Every rank's socket address, in rank order."""
        addresses: list[Any] = [None] * group.size()
        dist.all_gather_object(addresses, sock.getsockname()[:2], group=group)
        return [tuple(a) for a in addresses]

    def _spec(self, deployment: Deployment, workers: list[tuple[str, int]]) -> JobSpec:
        """The job as rank 0 registers it (the PS-only form: the switch gets it without index_bits and table)."""
        window = self._window or self._default_window(deployment)
        job = self._job if self._job is not None else derived_job(workers)
        return JobSpec(
            job=job, workers=tuple(Endpoint(*w) for w in workers), window=window, lane_bits=self._lane_bits,
            priority_cap=self._priority_cap, index_bits=self._index_bits,
            table=self._config.table if self._index_bits else (), words=deployment.words if self._switch is None else 0,
        )  # fmt: skip

    def _deployment(self, deployment: Deployment) -> Deployment:
        """The deployment this job runs in (rank 0 decides): the switch's K for a job through a switch."""
        return deployment

    @abstractmethod
    def _default_window(self, deployment: Deployment) -> int:
        """The window when none is asked for: a power of two (under a static policy a partition is no larger)."""

    # --- reductions -------------------------------------------------------------------

    @property
    def bytes_sent(self) -> int:  # type: ignore[override]
        """UDP payload bytes this worker has sent: headers, resends and the norms' MAX chunks included."""
        return self._sent_before + (self._engine.bytes_sent if self._engine is not None else 0)

    @bytes_sent.setter
    def bytes_sent(self, value: int) -> None:  # resetting the meter keeps counting from there
        self._sent_before = value - (self._engine.bytes_sent if self._engine is not None else 0)

    def norm_max(self, norm: torch.Tensor, *, bucket: int) -> torch.futures.Future[torch.Tensor]:
        """One MAX chunk holding the norm's word (base.norm_word), whose unsigned order is the numeric one."""
        word = _on_host(norm_word(norm)).numpy().view(np.uint32)
        device = norm.device

        def scalar(result: np.ndarray) -> torch.Tensor:
            return _on_device(word_norm(torch.from_numpy(result[:1].view(np.int32).copy())), device)

        return _torch_future(self._running().submit(word, op="max", lane_bits=32), scalar, device)

    def table_sum(
        self, encoded: torch.Tensor, codec: THCCodec, workers: int, *, bucket: int
    ) -> torch.futures.Future[torch.Tensor]:
        engine = self._running()
        if workers != self._ranks or codec.config != self._config:
            raise ValueError(
                f"this transport was attached for {self._ranks} workers and {self._config}, "
                f"not {workers} workers and {codec.config}"
            )
        index_bits = self._index_bits
        words = pack_words(_on_host(encoded), index_bits or self._lane_bits)
        count, device = encoded.numel(), encoded.device

        def sums(result: np.ndarray) -> torch.Tensor:
            return _on_device(self._unpack(result, index_bits, count), device)

        # Lane sums replace the words in place: pack_words' fresh words, or (8-bit lanes of the
        # table values a transport that takes them was handed) the input's own bytes.
        future = engine.submit(words, op="sum", lane_bits=self._lane_bits, index_bits=index_bits,
                               out=None if index_bits else words)  # fmt: skip
        return _torch_future(future, sums, device)

    def _unpack(self, words: np.ndarray, index_bits: int, count: int) -> torch.Tensor:
        """The first `count` lane sums, as the collective would return them (uint8 for 8-bit lanes, else int32)."""
        return unpack_words(words, self._lane_bits, count)

    def _running(self) -> ServedEngine:
        if self._engine is None:
            raise RuntimeError(
                f"{type(self).__name__} is not attached: pass it to THCState(transport=...), "
                "or call transport.attach(state.codec, process_group) on every worker"
            )
        self._note_path(self._engine)
        self._reductions += 1
        return self._engine

    @property
    def timing(self) -> dict[str, float]:
        """The transport's times in seconds: min_rto, max_rto, initial_rto, peer_timeout, failover, failback."""
        return dict(self._timing)

    def reachable(self) -> bool:
        """Whether every aggregator's control API answers now (one of this worker's own requests)."""
        try:
            locate(self._ps, self._switch)
            if self._spine is not None:  # the PS and the leaf answered above
                self._spine.describe()
        except (TransportError, ControlError) as error:
            logger.debug("job %s: aggregators not back yet: %s", self.job, error)
            return False
        return True

    def reopen(self, group: dist.ProcessGroup) -> None:
        """Start again, every rank of `group` at once: the engine stops (rank 0 deregisters the job
        wherever it is still registered), then a fresh socket, engine and registration, as `attach`
        makes them. How a job returns from the collective fallback (`ina.transport.fallback`) to
        aggregators that are back; TransportError on every rank if they refuse it."""
        if self._attached is None or self._closer is None:
            raise RuntimeError(f"{type(self).__name__} is not attached: there is nothing to reopen")
        if self._engine is not None:  # else a reopening that was refused closed it
            engine = self._engine
            self._closer()
            self._sent_before += engine.bytes_sent
            self._engine, self._moves = None, (0, 0)
        self.attach(self._attached[0], group, self._attached[1])

    def keep_to_the_switch(self) -> None:
        """Never fail over to the PS (THCState's ``fallback`` without "ps"); before `attach`."""
        self._timing["failover"] = 0.0

    @property
    def counters(self) -> dict[str, int]:
        """The engine's counters (sent, resent, delivered, failovers, failbacks, ...); empty before `attach`."""
        return dict(self._engine.counters) if self._engine is not None else {}

    @property
    def path(self) -> str:
        """Where this worker's DATA goes now: "switch", or "ps" (PS-only, or after a failover)."""
        counters = self.counters  # the engine's, as of now: the training thread may be waiting
        return "ps" if self._switch is None or counters.get("failovers", 0) > counters.get("failbacks", 0) else "switch"

    def _note_path(self, engine: ServedEngine) -> None:
        """Log each failover and fail-back once, with the reduction it was noticed at (docs/transport.md)."""
        counters = engine.counters
        moves = (counters["failovers"], counters["failbacks"])
        if moves != self._moves:
            self._moves = moves
            if self.path == "ps":
                logger.warning("job %s: no result through the switch for %g s: this worker sends to the PS from reduction %d "
                               "on (failover %d)", self.job, self._timing["failover"], self._reductions, moves[0])  # fmt: skip
            else:
                logger.info("job %s: back on the switch from reduction %d (fail-back %d)", self.job, self._reductions, moves[1])

    def close(self) -> None:
        """Stop the engine and release the socket; rank 0 also deregisters the job.

        Close every rank once all are done (after a barrier): a rank still waiting for a lost
        result needs the job registered to get it back.
        """
        if self._closer is not None:
            self._closer()


class SwitchTransport(_UdpTransport):
    """THC table values in lanes of ``w = sum_lane_bits(workers, granularity)`` bits, added by the switch.

    ``switch`` and ``ps`` are UDP data addresses (``host:port``; default INA_SWITCH and INA_PS,
    else what the control APIs report); ``switch_control`` and ``ps_control`` their control APIs
    (default INA_SWITCH_CONTROL and INA_PS_CONTROL, else the data host at ports 47180 and 47181,
    else 127.0.0.1). The window defaults to the switch's whole pool, at most 1024 chunks.

    In racks (docs/protocol.md, section 10), ``switch`` is this worker's rack's switch (its leaf) and ``spine``
    (``spine_control``; default INA_SPINE and INA_SPINE_CONTROL) the job's spine: a job whose workers name
    several leaves sums each rack at its leaf and the racks at the spine; one whose workers share a leaf
    runs under that switch alone.
    See :class:`_UdpTransport` for the other options.

    Example::
        >>> # xdoctest: +SKIP
        >>> transport = SwitchTransport(switch="10.0.0.1:47100", ps="10.0.0.2:47101", peer_timeout=10.0)
        >>> ddp_model.register_comm_hook(THCState(transport=transport), thc_hook)
    """

    def __init__(
        self,
        switch: Optional[str] = None,
        ps: Optional[str] = None,
        *,
        switch_control: Optional[str] = None,
        ps_control: Optional[str] = None,
        spine: Optional[str] = None,
        spine_control: Optional[str] = None,
        **options: Any,
    ) -> None:
        racked = spine or spine_control or os.environ.get(ENVIRONMENT["spine"]) or os.environ.get(f"{ENVIRONMENT['spine']}_CONTROL")
        super().__init__(
            Aggregator.configure("ps", ps, ps_control), Aggregator.configure("switch", switch, switch_control),
            Aggregator.configure("spine", spine, spine_control) if racked else None, **options,
        )

    def _default_window(self, deployment: Deployment) -> int:
        """The whole pool, at most 1024 chunks and what the tenant's quota leaves (docs/protocol.md, section 7).

        A large window means few round trips per reduction: each costs the worker a wake-up and a few
        system calls, whatever the chunks it moves (1024 chunks of K = 64 are 280 kB in flight)."""
        free = deployment.slots_free
        window = min(deployment.pool, 1024, deployment.pool if free is None else max(free, 1))
        return _power_of_two_at_most(window)

    takes_values = True  # the switch adds table values: the encoder looks them up in its own pass


class PSTransport(_UdpTransport):
    """THC table indices (b bits each) to the PS, which looks them up and adds them: no switch.

    The leaders of a two-level job (``ina.transport.hierarchy``) send their nodes' sums of table
    values instead, in lanes as to a switch, and register the job without a table.

    ``ps`` is the PS's UDP data address and ``ps_control`` its control API, as for
    :class:`SwitchTransport`. ``words`` (default INA_WORDS) is K, the words per packet; by default
    the most that fit one unfragmented datagram to the PS (docs/protocol.md, section 7). The window
    defaults to 64 chunks, fewer when packets are large: all workers' DATA in flight together fits
    the PS's receive buffer (``ina.net.udp.SOCKET_BUFFER_BYTES``; 2 MiB a worker for 4 workers).
    """

    def __init__(self, ps: Optional[str] = None, *, ps_control: Optional[str] = None, words: Optional[int] = None,
                 **options: Any) -> None:  # fmt: skip
        super().__init__(Aggregator.configure("ps", ps, ps_control), None, **options)
        self._requested_words = words

    def _deployment(self, deployment: Deployment) -> Deployment:
        """This job's own K: not bound by a switch's, the most the path to the PS allows."""
        return replace(deployment, words=ps_only_words(deployment, self._index_bits, self._lane_bits, self._requested_words))

    def _default_window(self, deployment: Deployment) -> int:
        """At most 64 chunks, and together the workers' DATA in flight fits the PS's receive buffer."""
        per_worker = SOCKET_BUFFER_BYTES // self._workers
        return _power_of_two_at_most(max(1, min(64, per_worker // (4 * deployment.words))))

    def _unpack(self, words: np.ndarray, index_bits: int, count: int) -> torch.Tensor:
        """Each chunk's RESULT holds the lanes of its K * floor(32/b) indices, padded to whole words."""
        if not index_bits:
            return super()._unpack(words, index_bits, count)
        per_chunk = self._words * fields_per_word(index_bits)
        lanes_per_result = result_words(self._words, index_bits, self._lane_bits) * fields_per_word(self._lane_bits)
        chunks = words.size // result_words(self._words, index_bits, self._lane_bits)
        lanes = unpack_words(words, self._lane_bits, chunks * lanes_per_result)
        return lanes.view(chunks, lanes_per_result)[:, :per_chunk].reshape(-1)[:count]


def _power_of_two_at_most(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def _torch_future(
    future: Future, convert: Callable[[np.ndarray], torch.Tensor], device: torch.device
) -> torch.futures.Future[torch.Tensor]:
    """A torch future that completes with `convert(sums)` (a tensor on `device`), or with the engine's error.

    It completes on the engine's thread; on a GPU, `convert` runs on the device's copy stream
    (`_copy_stream`) and whoever waits for the future waits for that stream, as for NCCL's futures.
    """
    cuda = device.type == "cuda"
    result: torch.futures.Future[torch.Tensor] = torch.futures.Future(devices=[device] if cuda else None)

    def done(finished: Future) -> None:
        with torch.cuda.stream(_copy_stream(device)) if cuda else contextlib.nullcontext():
            try:
                value = convert(finished.result())
            except Exception as error:  # noqa: BLE001 - the hook's future carries it to the training step
                result.set_exception(error)
            else:
                result.set_result(value)

    future.add_done_callback(done)
    return result


def _on_host(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the host for the engine: a CPU tensor itself; a CUDA one copied once into pinned memory.

    Waits for that copy only (the stream's work up to it), since the engine reads the bytes at once.
    """
    if tensor.device.type != "cuda":
        return tensor
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record(torch.cuda.current_stream(tensor.device))
    copied.synchronize()
    return host


def _on_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Host ``tensor`` on ``device``: itself for the CPU; for a GPU, pinned and copied on the current stream without waiting.

    The pinned block is reused only once the copy is done (torch's host allocator records it).
    """
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


@functools.cache
def _copy_stream(device: torch.device) -> torch.cuda.Stream:
    """The stream results reach ``device`` on: neither waits for nor holds up the training stream."""
    return torch.cuda.Stream(device)


def _shut_down(engine: ServedEngine, owner: Optional[tuple[list[Aggregator], int]], keeper: Optional[LeaseKeeper]) -> None:
    """Stop the engine; the owner (rank 0) stops renewing the job's lease and deregisters it. A finalizer: it must not hold the transport."""
    engine.close()
    if keeper is not None:
        keeper.close()
    if owner is not None:
        deregister(*owner)
