"""Throughput of the transports on loopback: `python -m benchmarks.transport`.

Worker processes (4 by default) joined by a gloo process group reduce vectors of N THC
coordinates (4-bit indices, g = 30, so 8-bit lanes) through each transport's `table_sum`,
exactly as the hook calls it:

- collective: `CollectiveTransport`, a torch.distributed (gloo) all_reduce of the table values in
  lanes (nine 7-bit sums an int64 for 4 workers, `compression.collective_packing`);
- switch: `SwitchTransport`, table values in 8-bit lanes through a software switch and PS;
- ps: `PSTransport`, 4-bit indices to the PS alone.

The switch and the PS are `ina.launch.LocalAggregators`: threads of the parent process (their
packet loops native where built, with the GIL released; INA_NATIVE_PACKETS=0 runs the Python
references, workers included). The switch has `--pool` slots; K is the job's words per DATA
packet: `--words` through the switch, the most a datagram carries in PS-only mode.
Every reduction starts after a barrier; its time is the slowest rank's, and the table shows
the median over `--repeats` (after one warm-up), and its ratio to the collective's. "chunks/s"
is one worker's DATA packets per second; "fp32 GB/s" is N * 4 bytes per second, the fp32 gradient the
reduction stands for; "worker CPU ms" is the CPU time (user and system, every thread; `time.process_time`,
to the microsecond) of one worker process from the barrier to the reduction's end, the mean over
ranks: what the transport costs a worker, where the seconds also count the aggregators and
waiting. (The barrier is left out: what it costs depends on how far apart the previous
reduction, another transport's, left the ranks.) All transports run in
the same processes, taking turns (one reduction each per round), so their numbers are comparable
even as the machine's load changes; compare rows of one run.

`--modes` runs the UDP transports with RESULTs to the job's group ("multicast", the default where every
worker receives it) and once per worker ("unicast", rows marked "/uni") side by side, each row with
aggregators of its own, so that "PS CPU ms" and "switch CPU ms" (the aggregator thread's CPU time from the
barrier before a reduction to the barrier after it, read by rank 0 from /proc) are that row's alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

LANE_BITS = 8  # 4 workers x g = 30 <= 255
UNICAST = "/uni"  # a row label's suffix: RESULTs once per worker


def _thread_cpu(pid: int, tid: int | None) -> float:
    """A thread's CPU seconds so far (its schedstat, in ns), read from any process; 0 for no thread."""
    if tid is None:
        return 0.0
    with open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
        return int(stat.read().split()[0]) / 1e9


def _worker(rank: int, workers: int, rows: dict[str, tuple[str, dict[str, Any], tuple[int | None, int | None]]],
            sizes: list[int], repeats: int, parent: int) -> dict[tuple[str, int], tuple[list[float], int, float, int, float, float]]:  # fmt: skip
    """On every rank: per (row, N), this rank's seconds per timed reduction, and per reduction the
    bytes it sent, its CPU seconds, the job's K (0 for the collective), and (rank 0) the CPU seconds of
    the row's PS and switch threads in the `parent` process. `rows` maps a label to its transport's
    name, options and aggregator thread ids.

    The transports take turns, one reduction each per round, so that the machine's changing load
    falls on all of them alike."""
    import torch
    import torch.distributed as dist

    from ina.compression import THCCodec, THCConfig
    from ina.transport import create_transport

    codec = THCCodec(THCConfig(bits=4, granularity=30))
    group = dist.group.WORLD
    generator = torch.Generator().manual_seed(rank)
    vectors = {n: torch.randint(0, 16, (n,), dtype=torch.uint8, generator=generator) for n in sizes}
    names = list(rows)
    transports = {}

    def aggregator_cpu(label: str) -> list[float]:
        return [_thread_cpu(parent, tid) if rank == 0 else 0.0 for tid in rows[label][2]]

    try:
        for label, (name, options, _) in rows.items():
            transports[label] = create_transport(name, group, **options)
            transports[label].attach(codec, group)
        measured = {}
        for n in sizes:
            # What the hook's encoder hands each transport, fresh for every reduction (a transport
            # may sum into it): the indices, or their table values.
            encoded = {name: [codec.table_values(vectors[n]) if transport.takes_values else vectors[n]
                              for _ in range(repeats + 1)] for name, transport in transports.items()}  # fmt: skip
            for name, transport in transports.items():
                transport.table_sum(encoded[name].pop(), codec, workers, bucket=0).wait()  # warm-up
            seconds = {name: [] for name in names}
            cpu = dict.fromkeys(names, 0.0)
            served = {name: [0.0, 0.0] for name in names}  # the row's PS and switch threads, rank 0
            sent_before = {name: transport.bytes_sent for name, transport in transports.items()}
            for _ in range(repeats):
                for name, transport in transports.items():
                    dist.barrier()
                    aggregators_before = aggregator_cpu(name)
                    cpu_before, started = time.process_time(), time.perf_counter()
                    transport.table_sum(encoded[name].pop(), codec, workers, bucket=0).wait()
                    seconds[name].append(time.perf_counter() - started)
                    cpu[name] += time.process_time() - cpu_before
                    dist.barrier()  # every rank has its result: the aggregators are done with the reduction
                    for i, (after, before) in enumerate(zip(aggregator_cpu(name), aggregators_before)):
                        served[name][i] += after - before
            for name, transport in transports.items():
                sent = (transport.bytes_sent - sent_before[name]) // repeats
                ps_cpu, switch_cpu = (total / repeats for total in served[name])
                measured[(name, n)] = (seconds[name], sent, cpu[name] / repeats, getattr(transport, "words", 0), ps_cpu, switch_cpu)
        return measured
    finally:
        dist.barrier()  # no rank closes (rank 0 deregisters) while another still needs the job
        for transport in transports.values():
            transport.close()


def _median_slowest(reports: list[dict], name: str, n: int, repeats: int) -> float:
    """The median over the timed reductions of the slowest rank's seconds."""
    return statistics.median(max(report[(name, n)][0][i] for report in reports) for i in range(repeats))


def _chunks(name: str, n: int, words: int) -> int:
    """DATA packets one worker sends for N coordinates with K = `words` (0 for the collective); the PS-only
    transport registers its own K, the most its path carries."""
    per_chunk = {"switch": words * (32 // LANE_BITS), "ps": words * (32 // 4)}.get(name.removesuffix(UNICAST))
    return -(-n // per_chunk) if per_chunk else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 20], help="log2 of N, the coordinates per reduction")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--words", type=int, default=64, help="K, 32-bit words per packet through the switch")
    parser.add_argument("--pool", type=int, default=4096, help="the switch's aggregator slots (a Tofino's 4096 by default)")
    parser.add_argument("--window", type=int, help="chunks in flight per worker (default: the transports' own)")
    parser.add_argument("--transports", nargs="+", default=["collective", "switch", "ps"],
                        choices=["collective", "switch", "ps"])  # fmt: skip
    parser.add_argument("--modes", nargs="+", default=["multicast", "unicast"], choices=["multicast", "unicast"],
                        help="how the aggregators send RESULTs: to the job's group, once per worker, or both side by side")
    args = parser.parse_args()

    from contextlib import ExitStack

    from ina.launch import LocalAggregators, run_workers

    sizes = [1 << s for s in args.sizes]
    window = {} if args.window is None else {"window": args.window}
    rows: dict[str, tuple[str, dict[str, Any], tuple[int | None, int | None]]] = {}
    with ExitStack() as stack:
        for name in args.transports:
            if name == "collective":
                rows[name] = (name, {}, (None, None))
                continue
            for mode in args.modes:
                local = stack.enter_context(LocalAggregators(words=args.words, pool=args.pool))
                threads = (local.ps.runner.native_id, local.switch.runner.native_id if name == "switch" else None)
                label = name + ("" if mode == "multicast" else UNICAST)
                rows[label] = (name, {**local.options(name), **window, "multicast": mode == "multicast"}, threads)
        reports = run_workers(_worker, args.workers, rows, sizes, args.repeats, os.getpid(), timeout=600.0)
    print(f"{args.workers} workers, pool {args.pool}, 4-bit THC, {LANE_BITS}-bit lanes; median of {args.repeats}; "
          f"'{UNICAST}': RESULTs once per worker, else to the job's group")
    print(f"{'transport':<13}{'N':>10}{'K':>6}{'s/reduction':>13}{'vs gloo':>8}{'chunks/s':>10}{'fp32 GB/s':>11}{'kB sent':>9}"
          f"{'worker CPU ms':>15}{'PS CPU ms':>11}{'switch CPU ms':>15}")  # fmt: skip
    gloo = {n: _median_slowest(reports, "collective", n, args.repeats) for n in sizes} if "collective" in rows else {}
    for label, (name, _, threads) in rows.items():
        for n in sizes:
            seconds = _median_slowest(reports, label, n, args.repeats)
            words = reports[0][(label, n)][3]
            chunks = _chunks(label, n, words)
            rate = f"{chunks / seconds:,.0f}" if chunks else "-"
            ratio = f"{seconds / gloo[n]:.2f}x" if n in gloo else "-"
            sent = reports[0][(label, n)][1] / 1000
            cpu = statistics.mean(report[(label, n)][2] for report in reports) * 1000
            served = [f"{reports[0][(label, n)][4 + i] * 1000:.1f}" if tid else "-" for i, tid in enumerate(threads)]
            print(f"{label:<13}{n:>10,}{words or '-':>6}{seconds:>13.4f}{ratio:>8}{rate:>10}{4 * n / seconds / 1e9:>11.3f}"
                  f"{sent:>9,.0f}{cpu:>15.1f}{served[0]:>11}{served[1]:>15}")  # fmt: skip


if __name__ == "__main__":
    main()
