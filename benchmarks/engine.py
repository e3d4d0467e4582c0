"""Throughput of the worker engine on loopback, Python and native side by side: `python -m benchmarks.engine`.

One worker's engine (`UdpEngine`, the Python reference, and `NativeUdpEngine`, ina/transport/_native.c)
reduces a stream of large reductions through a fast peer that answers every DATA with its RESULT: the
native software switch with a one-worker job, in a process of its own (its copies to the PS land in a
socket nobody reads). "pkt/s" counts the engine's DATA sent and RESULTs received per second;
"pkt/CPU-s" divides them by the CPU time (user and kernel, every thread) of the engine's process
alone; "CPU ms per 2^22" is that CPU time per reduction of 2^22 8-bit coordinates (2^20 words).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np

from ina.control import Endpoint, JobSpec
from ina.net.native import NativeRunner
from ina.net.udp import open_socket
from ina.switch.config import SwitchConfig
from ina.switch.native import switch_core
from ina.transport.engine import EngineConfig
from ina.transport.udp_engine import NativeUdpEngine, UdpEngine

LOOPBACK = "127.0.0.1"
JOB = 1


def peer(worker: tuple[str, int], words: int, window: int, answers: mp.Queue, stop: mp.Event) -> None:
    """The native switch with one registered one-worker job: every DATA completes at once."""
    sink = open_socket((LOOPBACK, 0))  # the job's PS: result copies pile up here unread
    core = switch_core(SwitchConfig(pool=window, words=words), "native")
    answer = core.register(JobSpec(JOB, (Endpoint(*worker),), window, 8, ps=Endpoint(*sink.getsockname())))
    runner = NativeRunner.bind(core, (LOOPBACK, 0)).start()
    answers.put((runner.address, sink.getsockname(), answer["slot_base"], answer["span"]))
    stop.wait()
    runner.close()
    sink.close()


def measure(kind: type, words: int, window: int, reduction_words: int, reductions: int) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, packets) for `reductions` reductions through a fresh peer."""
    sock = open_socket((LOOPBACK, 0))
    context = mp.get_context("spawn")
    answers, stop = context.Queue(), context.Event()
    process = context.Process(target=peer, args=(sock.getsockname(), words, window, answers, stop), daemon=True)
    process.start()
    switch, ps, slot_base, span = answers.get(timeout=30)
    config = EngineConfig(job=JOB, rank=0, workers=1, words=words, window=window, destination=switch,
                          sources=frozenset({switch, ps}), pool=window, slot_base=slot_base, span=span,
                          min_rto=0.05, initial_rto=0.05, max_rto=0.5, peer_timeout=30.0)  # fmt: skip
    engine = kind(config, sock)
    payload = np.arange(reduction_words, dtype=np.uint32)
    try:
        engine.submit(payload, lane_bits=8).result(timeout=60)  # warm up
        counted = engine.counters
        cpu, wall = time.process_time(), time.perf_counter()
        for future in [engine.submit(payload, lane_bits=8) for _ in range(reductions)]:
            future.result(timeout=120)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        done = engine.counters
        packets = sum(done[name] - counted[name] for name in ("sent", "resent", "delivered"))
    finally:
        engine.close()
        stop.set()
        process.join(10)
    return wall, cpu, packets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=64, help="K, words per packet")
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    # Python: reductions of 2^16 words (1,024 chunks); native: 2^20 words (16,384 chunks, 2^22 8-bit coordinates).
    cases = [("python", UdpEngine, 1 << 16, 4), ("native", NativeUdpEngine, 1 << 20, 8)]
    print(f"K = {arguments.words}, W = {arguments.window}, {os.cpu_count()} CPUs; best of {arguments.repeats}")
    print(f"{'engine':>8} {'packets':>9} {'wall s':>8} {'pkt/s':>11} {'pkt/CPU-s':>11} {'CPU ms per 2^22':>16}")
    for name, kind, reduction_words, reductions in cases:
        runs = [measure(kind, arguments.words, arguments.window, reduction_words, reductions) for _ in range(arguments.repeats)]
        wall, cpu, packets = min(runs, key=lambda run: run[1] / run[2])
        per_reduction = cpu / reductions * (1 << 20) / reduction_words
        print(f"{name:>8} {packets:>9} {wall:>8.3f} {packets / wall:>11,.0f} {packets / cpu:>11,.0f} {1e3 * per_reduction:>16.1f}")


if __name__ == "__main__":
    main()
