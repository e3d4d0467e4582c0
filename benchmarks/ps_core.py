"""Packets per second the PS core handles, without sockets (docs/ps.md, "Performance").

    python benchmarks/ps_core.py [--words 64] [--batch 1 64 256]

Three streams: RESULT copies from the switch (every switch-completed chunk sends one),
PS-only DATA of packed 4-bit indices from 4 workers (table lookup, sums, RESULTs), and
forwarded lanes DATA from 4 workers. Reports CPU time, which is what the PS spends and
what other processes on a busy machine do not distort; best of `--repeat` runs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from ina.control import Endpoint, JobSpec
from ina.net.node import Datagram
from ina.protocol import Header, Kind, pack_fields
from ina.ps import ParameterServer

THC_TABLE = (0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30)
WORKERS = tuple(Endpoint("127.0.0.1", 5000 + r) for r in range(4))
SWITCH = Endpoint("127.0.0.1", 47100)


def result_copies(words: int, count: int, rng: np.random.Generator) -> tuple[JobSpec, list[Datagram]]:
    spec = JobSpec(job=1, workers=WORKERS, window=64, switch=SWITCH)
    packets = [Datagram(Header(Kind.RESULT, 1, seq, lane_bits=8, bitmap=0b1111).pack(_words(rng, words)), SWITCH.addr)
               for seq in range(count)]
    return spec, packets


def indices_data(words: int, count: int, rng: np.random.Generator) -> tuple[JobSpec, list[Datagram]]:
    spec = JobSpec(job=1, workers=WORKERS, window=64, index_bits=4, lane_bits=8, table=THC_TABLE)
    packets = [Datagram(Header(Kind.DATA, 1, seq, rank=r, index_bits=4, lane_bits=8, bitmap=1 << r)
                        .pack(pack_fields(rng.integers(0, 16, words * 8), 4)), WORKERS[r].addr)
               for seq in range(count // 4) for r in range(4)]
    return spec, packets


def forwarded_lanes(words: int, count: int, rng: np.random.Generator) -> tuple[JobSpec, list[Datagram]]:
    spec = JobSpec(job=1, workers=WORKERS, window=64, switch=SWITCH)
    packets = [Datagram(Header(Kind.DATA, 1, seq, rank=r, lane_bits=8, bitmap=1 << r).pack(_words(rng, words)), SWITCH.addr)
               for seq in range(count // 4) for r in range(4)]
    return spec, packets


def _words(rng: np.random.Generator, words: int) -> np.ndarray:
    return rng.integers(0, 2**32, words, dtype=np.uint64).astype(np.uint32)


def rate(build: Callable, words: int, batch: int, count: int, repeat: int) -> float:
    """Best packets per CPU second over `repeat` fresh PSes."""
    spec, packets = build(words, count, np.random.default_rng(0))
    best = 0.0
    for _ in range(repeat):
        ps = ParameterServer(words, result_retention=256)
        ps.register(spec)
        start = time.process_time()
        for i in range(0, len(packets), batch):
            ps.receive(packets[i : i + batch], 0.0)
        best = max(best, len(packets) / (time.process_time() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=64)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name, build in (("result copies", result_copies), ("PS-only 4-bit indices DATA, 4 workers", indices_data),
                        ("forwarded lanes DATA, 4 workers", forwarded_lanes)):
        for batch in args.batch:
            print(f"{name:40s} batch {batch:4d}: {rate(build, args.words, batch, args.count, args.repeat):10,.0f} packets/s")


if __name__ == "__main__":
    main()
