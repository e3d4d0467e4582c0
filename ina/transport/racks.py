"""A job whose workers sit under several racks' switches (docs/protocol.md, section 10): who sits where, and how
rank 0 registers the job with its PS, its spine and every leaf.

Every worker names its own rack's switch (INA_SWITCH, its leaf) and the job's spine (INA_SPINE). The ranks
gather their leaves; racks are numbered in the order of their first rank, and a worker's place in its rack in
rank order, so every rank computes the same plan without asking anyone. A job whose workers all name one
leaf is a job of that one switch, as before.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from ina.control import Endpoint, JobSpec
from ina.control.http import ControlError
from ina.control.jobs import Uplink
from ina.net.node import Address
from ina.protocol import MAX_WORKERS
from ina.protocol.constants import MAX_RACKS
from ina.transport.errors import TransportError
from ina.transport.udp_setup import Aggregator, Deployment, Registration, deregister, locate

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RackPlan:
    """The job's racks: each one's leaf, and each rank's rack and place in it (rank order within a rack)."""

    leaves: tuple[Aggregator, ...]
    rack_of: tuple[int, ...]
    place: tuple[int, ...]
    sizes: tuple[int, ...]  # workers a rack

    @classmethod
    def of(cls, leaves_by_rank: list[Aggregator]) -> RackPlan:
        """From every rank's leaf, in rank order; TransportError names the limit a job breaks (section 10)."""
        leaves: list[Aggregator] = []
        index: dict[Address, int] = {}
        rack_of, place, sizes = [], [], []
        for leaf in leaves_by_rank:
            rack = index.setdefault(leaf.control, len(leaves))
            if rack == len(leaves):
                leaves.append(leaf)
                sizes.append(0)
            rack_of.append(rack)
            place.append(sizes[rack])
            sizes[rack] += 1
        if len(leaves) > MAX_RACKS or max(sizes) > MAX_WORKERS:
            raise TransportError(f"the job's workers name {len(leaves)} leaves with {sizes} workers: a racked job has at most "
                                 f"{MAX_RACKS} racks of {MAX_WORKERS} workers (nodes) each (docs/protocol.md, section 10); "
                                 "spread it over fewer, fuller racks or give nodes more ranks each")  # fmt: skip
        return cls(tuple(leaves), tuple(rack_of), tuple(place), tuple(sizes))

    @property
    def racks(self) -> int:
        return len(self.leaves)

    def ranks_in(self, rack: int) -> list[int]:
        """The global ranks of `rack`, by their place in it."""
        return [rank for rank, r in enumerate(self.rack_of) if r == rack]


@dataclass(frozen=True)
class RackedDeployment:
    """What every worker of a racked job needs: the spine's deployment (K, pool, the PS, the spine) and each leaf's
    data address, by rack."""

    deployment: Deployment
    leaf_data: tuple[Address, ...]


def locate_racked(ps: Aggregator, spine: Aggregator, plan: RackPlan) -> RackedDeployment:
    """Ask every aggregator how it is set up (rank 0): each leaf must have the spine's K and pool."""
    deployment = locate(ps, spine)
    leaf_data = []
    for rack, leaf in enumerate(plan.leaves):
        config = leaf.describe()
        if (config["words"], config["pool"]) != (deployment.words, deployment.pool):
            raise TransportError(f"the leaf of rack {rack} at {leaf.control[0]}:{leaf.control[1]} has K = {config['words']} and a pool "
                                 f"of {config['pool']}, the spine K = {deployment.words} and {deployment.pool}: start every switch "
                                 "of a racked job with the same --words and --pool")  # fmt: skip
        leaf_data.append(config["listen"])
    return RackedDeployment(deployment, tuple(leaf_data))


def register_racked(ps: Aggregator, spine: Aggregator, plan: RackPlan, racked: RackedDeployment, spec: JobSpec) -> Registration:
    """Register the job with the PS, the spine, then each leaf at the slots the spine chose (rank 0); `spec.workers`
    lists every rank's address in rank order. Whatever refuses, the job leaves every aggregator it reached."""
    deployment = racked.deployment
    ps_endpoint, spine_endpoint = Endpoint(*deployment.ps), Endpoint(*deployment.switch)
    by_rack = [[spec.workers[rank] for rank in plan.ranks_in(rack)] for rack in range(plan.racks)]
    reached: list[Aggregator] = []
    try:
        ps_answer = ps.client().register(replace(spec, workers=tuple(w for rack in by_rack for w in rack), racks=plan.sizes,
                                                 switch=spine_endpoint, leaves=tuple(Endpoint(*a) for a in racked.leaf_data)))  # fmt: skip
        reached.append(ps)
        spine_spec = replace(spec, workers=tuple(Endpoint(*a) for a in racked.leaf_data), ps=ps_endpoint, level="spine")
        answer = spine.client().register(spine_spec)
        reached.append(spine)
        slot_base, span = answer["slot_base"], answer.get("span", deployment.pool)
        leases = [ps_answer.get("lease", 0.0), answer.get("lease", 0.0)]
        for rack, leaf in enumerate(plan.leaves):
            uplink = Uplink(*deployment.switch, rack=rack, racks=plan.racks, slot_base=slot_base, span=span, pool=deployment.pool)
            leases.append(leaf.client().register(replace(spec, workers=tuple(by_rack[rack]), ps=ps_endpoint, uplink=uplink))
                          .get("lease", 0.0))  # fmt: skip
            reached.append(leaf)
    except ControlError:
        deregister(reached, spec.job)
        raise
    return Registration(spec.job, slot_base, span, min((t for t in leases if t), default=0.0))
