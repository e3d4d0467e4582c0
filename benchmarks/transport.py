"""Throughput of the transports on loopback: `python -m benchmarks.transport`.

Worker processes (4 by default) joined by a gloo process group reduce vectors of N THC
coordinates (4-bit indices, g = 30, so 8-bit lanes) through each transport's `table_sum`,
exactly as the hook calls it:

- collective: torch.distributed (gloo) all_reduce of the uint8 table values;
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
"""

from __future__ import annotations

import argparse
import statistics
import time

LANE_BITS = 8  # 4 workers x g = 30 <= 255


def _worker(rank: int, workers: int, names: list[str], options: dict[str, dict[str, str]], sizes: list[int],
            repeats: int) -> dict[tuple[str, int], tuple[list[float], int, float, int]]:  # fmt: skip
    """On every rank: per (transport, N), this rank's seconds per timed reduction, and per reduction the
    bytes it sent, its CPU seconds, and the job's K (0 for the collective).

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
    transports = {}
    try:
        for name in names:
            transports[name] = create_transport(name, group, **options.get(name, {}))
            transports[name].attach(codec, group)
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
            sent_before = {name: transport.bytes_sent for name, transport in transports.items()}
            for _ in range(repeats):
                for name, transport in transports.items():
                    dist.barrier()
                    cpu_before, started = time.process_time(), time.perf_counter()
                    transport.table_sum(encoded[name].pop(), codec, workers, bucket=0).wait()
                    seconds[name].append(time.perf_counter() - started)
                    cpu[name] += time.process_time() - cpu_before
            for name, transport in transports.items():
                sent = (transport.bytes_sent - sent_before[name]) // repeats
                measured[(name, n)] = (seconds[name], sent, cpu[name] / repeats, getattr(transport, "words", 0))
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
    per_chunk = {"switch": words * (32 // LANE_BITS), "ps": words * (32 // 4)}.get(name)
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
    args = parser.parse_args()

    from ina.launch import LocalAggregators, run_workers

    sizes = [1 << s for s in args.sizes]
    window = {} if args.window is None else {"window": args.window}
    with LocalAggregators(words=args.words, pool=args.pool) as local:
        options = {name: {**local.options(name), **window} for name in args.transports if name != "collective"}
        reports = run_workers(_worker, args.workers, args.transports, options, sizes, args.repeats, timeout=600.0)
    print(f"{args.workers} workers, pool {args.pool}, 4-bit THC, {LANE_BITS}-bit lanes; median of {args.repeats}")
    print(f"{'transport':<11}{'N':>10}{'K':>6}{'s/reduction':>13}{'vs gloo':>8}{'chunks/s':>10}{'fp32 GB/s':>11}{'kB sent':>9}"
          f"{'worker CPU ms':>15}")  # fmt: skip
    gloo = {n: _median_slowest(reports, "collective", n, args.repeats) for n in sizes} if "collective" in args.transports else {}
    for name in args.transports:
        for n in sizes:
            seconds = _median_slowest(reports, name, n, args.repeats)
            words = reports[0][(name, n)][3]
            chunks = _chunks(name, n, words)
            rate = f"{chunks / seconds:,.0f}" if chunks else "-"
            ratio = f"{seconds / gloo[n]:.2f}x" if n in gloo else "-"
            sent = reports[0][(name, n)][1] / 1000
            cpu = statistics.mean(report[(name, n)][2] for report in reports) * 1000
            print(f"{name:<11}{n:>10,}{words or '-':>6}{seconds:>13.4f}{ratio:>8}{rate:>10}{4 * n / seconds / 1e9:>11.3f}"
                  f"{sent:>9,.0f}{cpu:>15.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
