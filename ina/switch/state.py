"""The switch's state: the slot registers and the job table (docs/protocol.md, section 5, "State").

One numpy array per register, as one register array per field on Tofino, so the
per-batch algorithm reads and writes each with one fancy-indexed operation.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from ina.control import Endpoint, JobSpec
from ina.control.policy import caller, check_owner, check_quota, grant
from ina.control.registry import placement
from ina.net.node import Address

_VALID = np.uint64(1 << 49)
_OP_SHIFT = np.uint64(48)
_JOB_SHIFT = np.uint64(32)
NO_ADDRESS = -1
"""Address id of a source that no registered job knows."""


def make_keys(job: np.ndarray, seq: np.ndarray, op: np.ndarray) -> np.ndarray:
    """Chunk keys `(valid, op, job, seq)` packed into uint64; 0 means "no key" (free slot, no redirect)."""
    return (
        _VALID
        | (op.astype(np.uint64) << _OP_SHIFT)
        | (job.astype(np.uint64) << _JOB_SHIFT)
        | seq.astype(np.uint64)
    )


def key_job(keys: np.ndarray) -> np.ndarray:
    return ((keys >> _JOB_SHIFT) & np.uint64(0xFFFF)).astype(np.int64)


def key_seq(keys: np.ndarray) -> np.ndarray:
    return (keys & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def key_op(keys: np.ndarray) -> np.ndarray:
    return ((keys >> _OP_SHIFT) & np.uint64(1)).astype(bool)


class Slots:
    """The P aggregator slots: key, prio, bitmap, value[K], words, redirect and touched registers.

    `words` is the DATA words of the chunk a slot holds (1..K: a short chunk uses the first of value[K])."""

    def __init__(self, pool: int, words: int) -> None:
        self.key = np.zeros(pool, dtype=np.uint64)
        self.prio = np.zeros(pool, dtype=np.int64)
        self.bitmap = np.zeros(pool, dtype=np.uint32)
        self.value = np.zeros((pool, words), dtype=np.uint32)
        self.words = np.zeros(pool, dtype=np.int64)
        self.redirect = np.zeros(pool, dtype=np.uint64)
        self.touched = np.zeros(pool, dtype=np.float64)

    def forget_job(self, job: int) -> None:
        """Invalidate every slot and redirect that holds `job`, so a reused job id meets no stale state."""
        self.key[(self.key != 0) & (key_job(self.key) == job)] = 0
        self.redirect[(self.redirect != 0) & (key_job(self.redirect) == job)] = 0

    def registers(self) -> dict[str, np.ndarray]:
        """Copies of every register, for tests."""
        return {name: array.copy() for name, array in vars(self).items()}

    def describe(self, slot: int) -> dict[str, Any]:
        """One slot's registers as JSON-ready values, keys as {job, seq, max} or None (tests, test vectors)."""
        return {
            "key": _describe_key(self.key[slot]),
            "prio": int(self.prio[slot]),
            "bitmap": int(self.bitmap[slot]),
            "value": self.value[slot].tolist(),
            "words": int(self.words[slot]),
            "redirect": _describe_key(self.redirect[slot]),
            "touched": float(self.touched[slot]),
        }


def _describe_key(key: np.uint64) -> dict[str, Any] | None:
    keys = np.array([key], dtype=np.uint64)
    return {"job": int(key_job(keys)[0]), "seq": int(key_seq(keys)[0]), "max": bool(key_op(keys)[0])} if key else None


@dataclass(frozen=True, slots=True)
class JobEntry:
    """A registered job as the switch keeps it: its slots are `(slot_base + (seq mod span)) mod P`
    (docs/protocol.md, section 4; `span` None: the whole pool), and it holds `slots` of its tenant's quota."""

    spec: JobSpec
    slot_base: int
    span: int | None = None
    slots: int = 0
    owner: str | None = None

    def answer(self, pool: int) -> dict[str, Any]:
        """What a registration answers (docs/protocol.md, section 7): the slots the job was given."""
        return {"job": self.spec.job, "slot_base": self.slot_base, "span": self.span or pool}

    def to_json(self) -> dict:
        """The spec and slot_base; `span` where it is not the whole pool (static), `owner` and the
        `slots` it holds where a tenant registered it."""
        extra: dict = {"slot_base": self.slot_base}
        if self.span is not None:
            extra["span"] = self.span
        if self.owner is not None:
            extra |= {"owner": self.owner, "slots": self.slots}
        return self.spec.to_json() | extra


class TargetSet(IntEnum):
    """The addresses a switch's output packet goes to, one set of each kind per job row: set `SETS * row + kind`."""

    RESULT = 0  # every worker (its RESULT group, else each) and the PS
    PS = 1
    WORKERS = 2  # every worker alone: a RESULT without its PS copy, a held result the PS returned (atp), a RESULT going down
    UP = 3  # a leaf's spine (docs/protocol.md, section 10); a job of one switch: none


class Role(IntEnum):
    """How a switch serves a job (docs/protocol.md, section 10)."""

    ONLY = 0  # the job's only switch
    LEAF = 1  # sums its rack, sends the sum up
    SPINE = 2  # sums the leaves


SETS = len(TargetSet)


def target_set(row: Any, kind: TargetSet) -> Any:
    """The index of job row(s) `row`'s target set `kind` in `Jobs.set_*`."""
    return SETS * row + int(kind)


class Jobs:
    """The job table, plus numpy lookup arrays (rebuilt on every change) for the per-batch checks.

    `policy` is the switch's pool policy: under `static` each job gets a partition of its own
    (docs/protocol.md, section 5, "Configuration"), else it shares the whole pool. Registrations
    and removals obey the operator policy of the control request's caller (`ina.control.policy`).
    """

    def __init__(self, pool: int, policy: str = "esa") -> None:
        self.pool = pool
        self.policy = policy
        self.entries: dict[int, JobEntry] = {}
        self._rebuild()

    def add(self, spec: JobSpec) -> JobEntry:
        """Validate a registration for this switch and its caller's tenant, place it, and add it."""
        who = caller()
        spec = grant(spec, who)
        _check_registration(spec, self.pool, self.entries)
        restored = placement()
        partition = 1 << (spec.window - 1).bit_length()
        if spec.uplink is not None:  # a leaf: the slots its spine gave the job
            slot_base, span, slots = self._uplink_base(spec, partition)
        elif self.policy == "static":
            slot_base, span, slots = self._choose_partition(spec.job, partition, restored), partition, partition
        elif restored is not None:
            slot_base, span, slots = self._restored_base(spec.job, restored), restored[1], spec.window
        elif (free := self._free_partition(partition)) is not None:  # a window that fits beside the others meets none
            slot_base, span, slots = free, (partition if partition < self.pool else None), spec.window
        else:
            slot_base, span, slots = self._choose_slot_base(spec.window), None, spec.window
        check_quota(who, spec.job, slots, sum(e.slots for e in self.entries.values() if e.owner == who.name) if who.name else 0)
        entry = JobEntry(spec, slot_base, span, slots, who.name)
        self.entries[spec.job] = entry
        self._rebuild()
        return entry

    def check_removal(self, job: int) -> JobEntry:
        """The entry `remove(job)` would remove, or why the caller may not: for a controller that
        changes its data plane before it removes the entry (ina/p4/controller.py)."""
        entry = self.entries.get(job)
        if entry is None:
            raise ValueError(f"job {job} is not registered with this switch")
        check_owner(caller(), job, entry.owner)
        return entry

    def remove(self, job: int) -> None:
        self.check_removal(job)
        del self.entries[job]
        self._rebuild()

    def _restored_base(self, job: int, restored: tuple[int, int | None]) -> int:
        """The slot_base a shared-pool job held before a restart (docs/protocol.md, section 7), if this pool has it:
        the same base, and its partition where it had one, still free."""
        slot_base, span = restored
        if not 0 <= slot_base < self.pool or (span is not None and (span >= self.pool or not self._is_free(slot_base, span))):
            raise ValueError(f"job {job} held slot_base {slot_base} (span {span}), which this pool of {self.pool} "
                             f"slots under {self.policy!r} cannot give back")  # fmt: skip
        return slot_base

    def _uplink_base(self, spec: JobSpec, partition: int) -> tuple[int, int | None, int]:
        """slot_base, span and slots held of a leaf's job: those its spine chose, since a chunk has one slot at every
        level (docs/protocol.md, section 10); under static the partition must be free here too."""
        up = spec.uplink
        assert up is not None
        if up.pool != self.pool:
            raise ValueError(f"job {spec.job}: its spine has a pool of {up.pool} slots and this leaf {self.pool}; every switch "
                             "of a racked job needs the same --pool")  # fmt: skip
        span = None if up.span == self.pool else up.span
        if self.policy != "static":
            return up.slot_base, span, spec.window
        if span is None or up.span != partition or not self._is_free(up.slot_base, up.span):
            raise ValueError(f"job {spec.job}: its spine gave it the slots {up.slot_base}..{up.slot_base + up.span - 1}, which "
                             f"this static leaf has not free as a partition of {partition}; free them here (deregister the job "
                             "that holds them) or run the job's switches under a shared policy")  # fmt: skip
        return up.slot_base, span, partition

    def _held(self) -> np.ndarray:
        """Which slots registered jobs may use (a shared-pool job without a partition: every one)."""
        held = np.zeros(self.pool, dtype=bool)
        for entry in self.entries.values():
            if entry.span is None:  # its window slides over the whole pool
                held[:] = True
            else:
                held[entry.slot_base : entry.slot_base + entry.span] = True
        return held

    def _is_free(self, slot_base: int, span: int, held: np.ndarray | None = None) -> bool:
        """Whether `[slot_base, slot_base + span)` is a partition (aligned, in the pool) that no registered job may use."""
        held = self._held() if held is None else held
        return 0 <= slot_base < self.pool and slot_base % span == 0 and not held[slot_base : slot_base + span].any()

    def _free_partition(self, span: int) -> int | None:
        """The lowest multiple of `span` whose `span` slots no registered job may use, if any."""
        if span > self.pool:
            return None
        free = np.flatnonzero(~self._held().reshape(-1, span).any(axis=1))
        return int(free[0]) * span if free.size else None

    def _choose_partition(self, job: int, span: int, restored: tuple[int, int | None] | None = None) -> int:
        """The lowest free partition of `span` slots (static policy), or the partition a restored job held,
        if it is still one and free."""
        held = self._held()
        if restored is not None:
            slot_base, held_span = restored
            if held_span != span or not self._is_free(slot_base, span, held):
                raise ValueError(f"job {job} held the partition of {held_span} slots at {slot_base}, which this static "
                                 f"pool of {self.pool} slots cannot give back")  # fmt: skip
            return slot_base
        free = self._free_partition(span)
        if free is not None:
            return free
        sizes = (1 << k for k in range(self.pool.bit_length() - 1, -1, -1))
        largest = next((size for size in sizes if (~held.reshape(-1, size)).all(axis=1).any()), 0)
        advice = f"register a window of at most {largest}, or deregister a job" if largest else "deregister a job first"
        raise ValueError(f"job {job}: the static pool has no free partition of {span} slots (window {span // 2 + 1}.."
                         f"{span}); {int((~held).sum())} of {self.pool} slots are free, the largest free partition "
                         f"holds {largest}: {advice}")  # fmt: skip

    def _choose_slot_base(self, window: int) -> int:
        """The base whose window overlaps the fewest registered windows (lowest such base on ties)."""
        load = np.zeros(self.pool, dtype=np.int64)
        for entry in self.entries.values():
            load[(entry.slot_base + np.arange(entry.spec.window)) % self.pool] += 1
        running = np.concatenate([[0], np.cumsum(np.concatenate([load, load]))])
        bases = np.arange(self.pool)
        return int(np.argmin(running[bases + window] - running[bases]))

    def _rebuild(self) -> None:
        entries = list(self.entries.values())
        self.addresses: list[Address] = sorted({ep.addr for e in entries for ep in (*e.spec.workers, e.spec.ps, e.spec.group, e.spec.uplink)
                                                if ep})
        self.address_ids: dict[Address, int] = {addr: i for i, addr in enumerate(self.addresses)}
        count = max(len(entries), 1)
        self.index = np.full(1 << 16, -1, dtype=np.int64)
        self.fanin = np.zeros(count, dtype=np.int64)
        self.full = np.zeros(count, dtype=np.uint32)
        self.slot_base = np.zeros(count, dtype=np.int64)
        self.span_mask = np.zeros(count, dtype=np.int64)
        self.priority_cap = np.zeros(count, dtype=np.int64)
        self.lane_bits = np.zeros(count, dtype=np.int64)
        self.role = np.zeros(count, dtype=np.int64)
        self.rack = np.zeros(count, dtype=np.int64)  # a leaf's rack at its spine
        self.racks_full = np.zeros(count, dtype=np.uint32)  # a leaf's job over its racks: a descending RESULT's bitmap
        self.ps_id = np.full(count, NO_ADDRESS - 1, dtype=np.int64)
        self.up_id = np.full(count, NO_ADDRESS - 1, dtype=np.int64)
        self.worker_id = np.full((count, 32), NO_ADDRESS - 1, dtype=np.int64)
        members: list[list[int]] = []  # job row r's target sets, by TargetSet: its RESULT's (the group or the workers, then the PS), ...
        for i, entry in enumerate(entries):
            spec = entry.spec
            assert spec.ps is not None
            self.index[spec.job] = i
            self.fanin[i] = spec.fanin
            self.full[i] = spec.full_bitmap
            self.slot_base[i] = entry.slot_base
            self.span_mask[i] = (entry.span or self.pool) - 1
            self.priority_cap[i] = spec.priority_cap
            self.lane_bits[i] = spec.lane_bits
            self.ps_id[i] = self.address_ids[spec.ps.addr]
            self.worker_id[i, : spec.fanin] = [self.address_ids[w.addr] for w in spec.workers]
            up: list[int] = []
            if spec.uplink is not None:
                self.role[i], self.rack[i] = Role.LEAF, spec.uplink.rack
                self.racks_full[i] = (1 << spec.uplink.racks) - 1
                self.up_id[i] = self.address_ids[spec.uplink.addr]
                up = [int(self.up_id[i])]
            elif spec.level == "spine":
                self.role[i] = Role.SPINE
            receivers = [self.address_ids[spec.group.addr]] if spec.group else self.worker_id[i, : spec.fanin].tolist()
            members += [[*receivers, int(self.ps_id[i])], [int(self.ps_id[i])], receivers, up]
        self.set_size = np.array([len(m) for m in members] or [0], dtype=np.int64)
        self.set_start = np.cumsum(self.set_size) - self.set_size
        self.set_members = np.array([a for m in members for a in m], dtype=np.int64)


def _check_registration(spec: JobSpec, pool: int, entries: dict[int, JobEntry]) -> None:
    """What a JobSpec cannot express alone: this switch's pool, its PS, numeric addresses, no duplicates."""
    if spec.job in entries:
        raise ValueError(f"job {spec.job} is already registered; deregister it first (DELETE /jobs/{spec.job}) or use another job id")
    if spec.ps is None:
        raise ValueError(
            f"job {spec.job} has no 'ps': the switch sends collisions, preempted partials and result copies "
            "to the job's PS; register it with 'ps': {'host', 'port'}"
        )
    if spec.window > pool:
        raise ValueError(f"job {spec.job}: window {spec.window} exceeds the switch's pool of {pool} slots; register window <= {pool} or start the switch with a larger --pool")
    if spec.index_bits:
        raise ValueError(
            f"job {spec.job} has index_bits {spec.index_bits} (PS-only mode) but the switch only adds lanes: "
            "register it with index_bits 0, or with the PS alone"
        )
    if spec.racks:
        raise ValueError(f"job {spec.job}: 'racks' and 'leaves' describe a racked job to its PS; register it with a switch as "
                         "its spine ('level': 'spine', the leaves as workers) or as a leaf ('uplink')")  # fmt: skip
    if (spec.level or spec.uplink) and spec.group is not None:
        raise ValueError(f"job {spec.job}: a racked job's RESULTs are unicast (docs/protocol.md, section 10); register it without 'group'")
    uplink = [("uplink", Endpoint(spec.uplink.host, spec.uplink.port))] if spec.uplink else []
    for name, endpoint in [(f"workers[{r}]", w) for r, w in enumerate(spec.workers)] + [("ps", spec.ps)] + uplink:
        _check_ipv4(endpoint, f"job {spec.job} {name}")


def _check_ipv4(endpoint: Endpoint, what: str) -> None:
    try:
        ipaddress.IPv4Address(endpoint.host)
    except ValueError:
        raise ValueError(
            f"{what}: host {endpoint.host!r} is not a numeric IPv4 address; the switch matches packet sources "
            "against registered addresses (as a P4 table does), so register e.g. '127.0.0.1'"
        ) from None
