"""THC-like reductions and a driver that runs them on a simulated cluster (engines, switch, PS).

Shared by the exactness tests: each reduction knows every rank's words and the direct sum
a collective all_reduce of the same table values would give. A test module that imports
`packet_path` runs every test on both paths: the Python references (switch, PS and engines) and
the native cores, chosen as users choose them (INA_NATIVE_PACKETS).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from ina.net.native import DISABLE
from ina.net.node import Address, Datagram
from ina.protocol import Kind, MalformedPacket, pack_fields, parse, result_words
from ina.protocol.packing import fields_per_word
from ina.ps.native import native_module as native_ps
from ina.sim.cluster import Cluster
from ina.switch.native import native_module as native_switch
from ina.transport.native import native_module as native_engine
from ina.transport.errors import TransportError

_NATIVE_BUILT = all(module() is not None for module in (native_switch, native_ps, native_engine))


@pytest.fixture(autouse=True, params=["python", pytest.param("native", marks=pytest.mark.skipif(
    not _NATIVE_BUILT, reason="the native switch, PS or worker engine is not built (or INA_NATIVE_PACKETS=0)"))])  # fmt: skip
def packet_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every simulated cluster of the test runs on this path (a Cluster's default follows INA_NATIVE_PACKETS)."""
    if request.param == "python":
        monkeypatch.setenv(DISABLE, "0")
    return request.param


THC_TABLE = (0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30)
"""The THC table for b = 4, g = 30 (DESIGN.md, THC step 6): 8-bit lanes hold its sums for n <= 8."""


@dataclass(frozen=True)
class Reduction:
    """What every rank submits for one reduction, and the result all of them must receive."""

    op: str
    words: tuple[np.ndarray, ...]
    expected: np.ndarray
    lane_bits: int = 8
    index_bits: int = 0


def lanes(rng: np.random.Generator, workers: int, coordinates: int) -> Reduction:
    """Table values in 8-bit lanes, each <= g = 255 // workers so the sum never carries."""
    g = 255 // workers
    values = rng.integers(0, g + 1, size=(workers, coordinates), dtype=np.uint32)
    collective = values.sum(axis=0, dtype=np.uint8)  # what all_reduce of uint8 tensors returns
    return Reduction("sum", tuple(pack_fields(v, 8) for v in values), pack_fields(collective, 8))


def norms(rng: np.random.Generator, workers: int) -> Reduction:
    """Each rank's float32 norm as its bit pattern; the result is the largest norm."""
    values = (rng.random(workers) * 1e3).astype(np.float32)
    bits = values.view(np.uint32)
    return Reduction("max", tuple(np.array([b], dtype=np.uint32) for b in bits),
                     np.array([values.max()], dtype=np.float32).view(np.uint32), lane_bits=32)


def indices(rng: np.random.Generator, workers: int, chunks: int, words: int, index_bits: int = 4) -> Reduction:
    """PS-only mode: packed THC indices; the PS sums table values into 8-bit lanes, chunk by chunk."""
    table = np.array(THC_TABLE, dtype=np.uint32)
    per_chunk = words * fields_per_word(index_bits)
    idx = rng.integers(0, 1 << index_bits, size=(workers, chunks * per_chunk), dtype=np.uint32)
    collective = table[idx].sum(axis=0, dtype=np.uint8)
    expected = np.concatenate([pack_fields(collective[c * per_chunk:(c + 1) * per_chunk], 8) for c in range(chunks)])
    assert expected.size == chunks * result_words(words, index_bits, 8)
    return Reduction("sum", tuple(pack_fields(i, index_bits) for i in idx), expected, index_bits=index_bits)


def submit_all(cluster: Cluster, plan: dict[int, list[Reduction]], start: dict[tuple[int, int], float] | None = None) -> None:
    """Every rank of every job submits its reductions in order, at `start[(job, rank)]` (default 0)."""
    for index, (job, reductions) in enumerate(plan.items()):
        for rank, engine in enumerate(cluster.jobs[job]):
            at = (start or {}).get((job, rank), 0.0)
            for reduction in reductions:
                def submit(now: float, engine=engine, r=reduction, rank=rank) -> None:
                    engine.submit(r.words[rank], op=r.op, lane_bits=r.lane_bits, index_bits=r.index_bits, now=now)

                cluster.net.invoke(cluster.address(index, rank), submit, at=at)


def collect(cluster: Cluster, plan: dict[int, list[Reduction]], timeout: float) -> dict[tuple[int, int], list[np.ndarray]]:
    """Run until every rank has every result (raising the first TransportError); results by (job, rank)."""
    got: dict[tuple[int, int], list[np.ndarray]] = {(j, r): [] for j in plan for r in range(len(cluster.jobs[j]))}

    def done() -> bool:
        for (job, rank), results in got.items():
            engine = cluster.jobs[job][rank]
            if engine.error is not None:
                raise engine.error
            results += [words for _, words in engine.completed()]
        return all(len(results) == len(plan[job]) for (job, _), results in got.items())

    if not cluster.net.run_until(done, timeout):
        raise TransportError(f"no error and no result after {timeout} simulated seconds: a hang")
    return got


def assert_exact(got: dict[tuple[int, int], list[np.ndarray]], plan: dict[int, list[Reduction]]) -> None:
    for (job, rank), results in got.items():
        for number, (result, reduction) in enumerate(zip(results, plan[job])):
            assert np.array_equal(result, reduction.expected), f"job {job} rank {rank} reduction {number}"


def lose_first(cluster: Cluster, kind: Kind, job: int, seq: int, source: Address, destination: Address, copies: int = 1) -> None:
    """Lose the first `copies` packets of `kind` for chunk `seq` of `job` sent from `source` to `destination`."""
    left = [copies]

    def rule(datagram: Datagram, sender: Address) -> bool:
        if not left[0] or sender != source or datagram.addr != destination:
            return False
        try:
            header, _ = parse(datagram.data, cluster.words)
        except MalformedPacket:
            return False
        if (header.kind, header.job, header.seq) != (kind, job, seq):
            return False
        left[0] -= 1
        return True

    cluster.net.drop_when(rule)
