"""A simulated deployment: the software switch, the PS and jobs of worker engines on one network.

Registers every job with the switch and the PS as the control plane would (the switch
chooses `slot_base`), then builds each rank's `Engine` from the registration, so tests
and the benchmark set up exactly what a real cluster runs. With leaves, the switch is their
spine and a job may sit in racks (docs/protocol.md, section 10), registered as rank 0 registers one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ina.control import Endpoint, JobSpec
from ina.control.jobs import Uplink
from ina.net.node import Address, Node
from ina.ps import ParameterServer
from ina.ps.native import NativeParameterServer, ps_core
from ina.sim.link import Link
from ina.sim.network import Network
from ina.switch import SwitchConfig, SwitchCore
from ina.switch.native import NativeSwitchCore, switch_core
from ina.transport.engine import Engine, EngineConfig
from ina.transport.native import NativeEngine, engine
from ina.transport.priority import PriorityPolicy

SWITCH_ADDR: Address = ("10.0.0.1", 47100)
PS_ADDR: Address = ("10.0.0.2", 47200)


def leaf_address(rack: int) -> Address:
    """Where rack `rack`'s leaf switch is attached."""
    return (f"10.0.0.{101 + rack}", 47100)


@dataclass(frozen=True, slots=True)
class Hosts:
    """How a kind of host is attached: its link, per-packet processing time and receive coalescing."""

    link: Link = Link()
    processing: float = 0.0
    coalesce: float = 0.0


@dataclass(slots=True)
class Cluster:
    """One switch (pool `pool`, policy `policy`, RESULTs copied to the PS unless not `result_copies`), one PS and
    the jobs added with `add_job`.

    With `switch=False` there is no switch: jobs run in PS-only mode. `leaves` more switches (the same pool, words
    and policy) at `leaf_address(r)` are racks' leaves under the switch as their spine, for jobs added with `racks`. `engine` holds the
    EngineConfig timing fields every worker gets (min_rto, max_rto, initial_rto, peer_timeout).
    `path` picks the switch, the PS and the engines: "python" (the references), "native" (the C
    cores), or None for native where built, as `ina switch`, `ina ps` and the transports do.
    """

    words: int
    pool: int = 64
    policy: str = "esa"
    result_copies: bool = True
    switch: bool = True
    leaves: int = 0
    seed: int = 0
    frame_overhead: int = 0
    workers: Hosts = Hosts()
    ps_host: Hosts = Hosts()
    switch_host: Hosts = Hosts()
    engine: dict[str, float] = field(default_factory=dict)
    ps_options: dict[str, Any] = field(default_factory=dict)
    path: str | None = None
    net: Network = field(init=False)
    switch_core: SwitchCore | NativeSwitchCore | None = field(init=False)
    leaf_cores: list[SwitchCore | NativeSwitchCore] = field(init=False, default_factory=list)
    ps: ParameterServer | NativeParameterServer = field(init=False)
    jobs: dict[int, list[Engine | NativeEngine]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.net = Network(self.seed, self.frame_overhead)
        self.ps = ps_core(self.words, self.path, **self.ps_options)
        self.net.attach(PS_ADDR, self.ps, self.ps_host.link, processing=self.ps_host.processing,
                        coalesce=self.ps_host.coalesce)
        self.switch_core = None
        if self.leaves and not self.switch:
            raise ValueError("leaves need the switch: it is their spine")
        if self.switch:
            config = SwitchConfig(pool=self.pool, words=self.words, policy=self.policy, result_copies=self.result_copies)
            self.switch_core = switch_core(config, self.path)
            self.leaf_cores = [switch_core(config, self.path) for _ in range(self.leaves)]
            for addr, core in [(SWITCH_ADDR, self.switch_core), *((leaf_address(r), c) for r, c in enumerate(self.leaf_cores))]:
                self.net.attach(addr, core, self.switch_host.link, processing=self.switch_host.processing,
                                coalesce=self.switch_host.coalesce)

    def add_job(
        self,
        job: int,
        workers: int,
        window: int,
        *,
        lane_bits: int = 8,
        priority_cap: int = 255,
        ps_only: bool | None = None,
        index_bits: int = 0,
        table: tuple[int, ...] = (),
        policy: Callable[[], PriorityPolicy] | None = None,
        wrap: Callable[[Engine | NativeEngine], Node] | None = None,
        first_seq: int = 0,
        racks: tuple[int, ...] = (),
    ) -> list[Engine | NativeEngine]:
        """Register a job of `workers` ranks and attach one engine per rank (wrapped by `wrap`, if given).

        `ps_only` (default: when the cluster has no switch) sends the job's chunks to the PS;
        indices (`index_bits`, with the THC `table`) need it. `racks` (workers a rack, adding up to `workers`,
        ranks rack by rack) puts the job under that many leaves, each rank sending to its rack's.
        """
        ps_only = not self.switch if ps_only is None else ps_only
        index = len(self.jobs)
        addrs = [self.address(index, rank) for rank in range(workers)]
        endpoints = tuple(Endpoint(*a) for a in addrs)
        if racks:
            slot_base, span = self._register_racked(JobSpec(job, endpoints, window, lane_bits, priority_cap), racks)
            places = [(rack, place, n) for rack, n in enumerate(racks) for place in range(n)]
        else:
            slot_base, span = self._register(JobSpec(job, endpoints, window, lane_bits, priority_cap, index_bits=index_bits,
                                                     table=table), ps_only)  # fmt: skip
            places = [(None, rank, workers) for rank in range(workers)]
        engines = []
        for addr, (rack, place, rack_workers) in zip(addrs, places):
            destination = PS_ADDR if ps_only else SWITCH_ADDR if rack is None else leaf_address(rack)
            config = EngineConfig(
                job=job, rank=place, workers=rack_workers, words=self.words, window=window, pool=self.pool,
                slot_base=slot_base, span=span, ps_only=ps_only, destination=destination,
                sources=frozenset({destination, PS_ADDR}), first_seq=first_seq, racks=len(racks), **self.engine,
            )
            worker = engine(config, policy() if policy is not None else None, self.path)
            engines.append(worker)
            self.net.attach(addr, wrap(worker) if wrap else worker, self.workers.link,
                            processing=self.workers.processing, coalesce=self.workers.coalesce)
        self.jobs[job] = engines
        return engines

    def _register(self, spec: JobSpec, ps_only: bool) -> tuple[int, int]:
        """Register a job of one switch (or PS-only) with the PS and the switch; its slot_base and span."""
        self.ps.register(replace(spec, switch=None if ps_only else Endpoint(*SWITCH_ADDR)))
        if ps_only:
            return 0, 0
        assert self.switch_core is not None, "a job that uses the switch needs a cluster with one"
        answer = self.switch_core.register(replace(spec, ps=Endpoint(*PS_ADDR), index_bits=0, table=()))  # it adds lanes only
        return answer["slot_base"], answer["span"]

    def _register_racked(self, spec: JobSpec, racks: tuple[int, ...]) -> tuple[int, int]:
        """Register a racked job with the PS, the spine, then each leaf at the spine's slots (ina.transport.racks);
        its slot_base and span."""
        if self.switch_core is None or len(racks) > self.leaves or sum(racks) != len(spec.workers):
            raise ValueError(f"racks {list(racks)} need a switch, as many leaves ({self.leaves}) and {len(spec.workers)} workers in all")
        leaves = tuple(Endpoint(*leaf_address(r)) for r in range(len(racks)))
        ps, spine = Endpoint(*PS_ADDR), Endpoint(*SWITCH_ADDR)
        self.ps.register(replace(spec, racks=racks, switch=spine, leaves=leaves))
        answer = self.switch_core.register(replace(spec, workers=leaves, ps=ps, level="spine"))
        slot_base, span = answer["slot_base"], answer["span"]
        offsets = [sum(racks[:r]) for r in range(len(racks))]
        for rack, (offset, n) in enumerate(zip(offsets, racks)):
            uplink = Uplink(*SWITCH_ADDR, rack=rack, racks=len(racks), slot_base=slot_base, span=span, pool=self.pool)
            self.leaf_cores[rack].register(replace(spec, workers=spec.workers[offset:offset + n], ps=ps, uplink=uplink))
        return slot_base, span

    @staticmethod
    def address(index: int, rank: int) -> Address:
        """Where rank `rank` of the `index`-th job added is attached."""
        return (f"10.1.{index + 1}.{rank + 1}", 5000)
