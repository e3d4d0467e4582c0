"""Packet builders and a small rig shared by the switch tests and the test-vector generator, and
the `path` fixture that runs a switch test on both cores (the Python reference and the native one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from ina.control import Endpoint, JobSpec
from ina.net.node import Address, Datagram
from ina.protocol import Flag, Header, Kind, parse
from ina.switch import SwitchConfig, SwitchCore
from ina.switch.native import NativeSwitchCore, native_module, switch_core

HOST = "127.0.0.1"
NATIVE_BUILT = native_module() is not None
PATHS = [pytest.param("python"),
         pytest.param("native", marks=pytest.mark.skipif(not NATIVE_BUILT, reason="the native switch is not built (or INA_NATIVE_PACKETS=0)"))]  # fmt: skip
"""The switch's two paths, for `pytest.mark.parametrize("path", PATHS)`."""


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest) -> str:
    """Each switch core in turn (import this fixture into a test module to use it)."""
    return request.param


def worker_addr(job: int, rank: int) -> Address:
    return (HOST, 10000 + 100 * job + rank)


def ps_addr(job: int) -> Address:
    return (HOST, 20000 + job)


def job_spec(job: int, workers: int, window: int, lane_bits: int = 8, priority_cap: int = 255) -> JobSpec:
    return JobSpec(job=job, workers=tuple(Endpoint(*worker_addr(job, r)) for r in range(workers)), window=window,
                   lane_bits=lane_bits, priority_cap=priority_cap, ps=Endpoint(*ps_addr(job)))  # fmt: skip


@dataclass(frozen=True)
class Out:
    """One output packet, decoded for assertions."""

    addr: Address
    header: Header
    payload: tuple[int, ...]
    data: bytes


def decoded(datagrams: list[Datagram], words: int) -> list[Out]:
    result = []
    for d in datagrams:
        header, payload = parse(d.data, words)
        result.append(Out(d.addr, header, tuple(int(v) for v in payload), d.data))
    return result


@dataclass
class Rig:
    """A switch core with jobs registered, and builders for the packets its jobs send."""

    pool: int = 8
    words: int = 4
    policy: str = "esa"
    slot_timeout: float = 1.0
    path: str = "python"
    core: SwitchCore | NativeSwitchCore = field(init=False)
    bases: dict[int, int] = field(default_factory=dict)
    spans: dict[int, int] = field(default_factory=dict)
    specs: dict[int, JobSpec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.core = switch_core(SwitchConfig(self.pool, self.words, self.policy, self.slot_timeout), self.path)

    def register(self, spec: JobSpec) -> int:
        answer = self.core.register(spec)
        self.bases[spec.job], self.spans[spec.job] = answer["slot_base"], answer["span"]
        self.specs[spec.job] = spec
        return self.bases[spec.job]

    def slot(self, job: int, seq: int) -> int:
        return (self.bases[job] + seq % self.spans.get(job, self.pool)) % self.pool

    def data(self, job: int, rank: int, seq: int, values: list[int] | None = None, *, resend: bool = False,
             prio: int = 0, op_max: bool = False, src: Address | None = None, **changes: int) -> Datagram:  # fmt: skip
        """A DATA packet of `job`'s worker `rank` (payload default: rank+1 in every word)."""
        flags = (Flag.RESEND if resend else Flag.NONE) | (Flag.MAX if op_max else Flag.NONE)
        lane_bits = 32 if op_max else self.specs[job].lane_bits
        header = Header(Kind.DATA, job=job, seq=seq % 2**32, flags=flags, rank=rank, priority=prio,
                        slot=self.slot(job, seq), lane_bits=lane_bits, bitmap=1 << rank).with_(**changes)  # fmt: skip
        words = np.array(values if values is not None else [rank + 1] * self.words, dtype=np.uint32)
        return Datagram(header.pack(words), src or worker_addr(job, rank))

    def flush(self, job: int, seq: int, *, op_max: bool = False, src: Address | None = None) -> Datagram:
        header = Header(Kind.FLUSH, job=job, seq=seq % 2**32, flags=Flag.MAX if op_max else Flag.NONE,
                        slot=self.slot(job, seq), lane_bits=32 if op_max else self.specs[job].lane_bits)  # fmt: skip
        return Datagram(header.pack(), src or ps_addr(job))

    def send(self, *datagrams: Datagram, now: float = 0.0) -> list[Out]:
        return decoded(self.core.receive(list(datagrams), now), self.words)

    def tick(self, now: float) -> list[Out]:
        return decoded(self.core.tick(now), self.words)

    def result(self, job: int, seq: int, values: list[int], *, op_max: bool = False) -> bytes:
        """The exact RESULT bytes the switch must send for a completed chunk."""
        spec = self.specs[job]
        header = Header(Kind.RESULT, job=job, seq=seq % 2**32, flags=Flag.MAX if op_max else Flag.NONE,
                        slot=self.slot(job, seq), lane_bits=32 if op_max else spec.lane_bits, bitmap=spec.full_bitmap)  # fmt: skip
        return header.pack(np.array(values, dtype=np.uint32))

    def returned(self, job: int, seq: int, values: list[int], *, op_max: bool = False, hold: bool = True,
                 bitmap: int | None = None) -> Datagram:
        """The RESULT of a completed chunk as its PS returns it to the switch under atp (flagged HOLD)."""
        spec = self.specs[job]
        flags = (Flag.MAX if op_max else Flag.NONE) | (Flag.HOLD if hold else Flag.NONE)
        header = Header(Kind.RESULT, job=job, seq=seq % 2**32, flags=flags, slot=self.slot(job, seq),
                        lane_bits=32 if op_max else spec.lane_bits, bitmap=spec.full_bitmap if bitmap is None else bitmap)  # fmt: skip
        return Datagram(header.pack(np.array(values, dtype=np.uint32)), ps_addr(job))

    def partial(self, job: int, seq: int, bitmap: int, values: list[int], prio: int = 0, *, op_max: bool = False) -> bytes:
        """The exact PARTIAL bytes for a slot holding `bitmap` of chunk (job, seq)."""
        header = Header(Kind.PARTIAL, job=job, seq=seq % 2**32, flags=Flag.MAX if op_max else Flag.NONE, priority=prio,
                        slot=self.slot(job, seq), lane_bits=32 if op_max else self.specs[job].lane_bits, bitmap=bitmap)  # fmt: skip
        return header.pack(np.array(values, dtype=np.uint32))

    def slot_state(self, job: int, seq: int) -> dict:
        """The registers of chunk (job, seq)'s slot, keys as {job, seq, max} or None."""
        return self.core.slots.describe(self.slot(job, seq))


def register_vector_jobs(target: Any, vector: dict) -> None:
    """Register a vector's jobs with a switch (software or P4), each placed where the vector says: the same
    slot_base, and the same span (the whole pool where the vector gives none)."""
    for job in vector["jobs"]:
        answer = target.register(JobSpec.from_json({k: v for k, v in job.items() if k not in ("slot_base", "span")}))
        assert (answer["slot_base"], answer["span"]) == (job["slot_base"], job.get("span", vector["config"]["pool"]))
