"""Packets per second the PS handles, the Python reference and the native PS side by side (docs/ps.md, "Performance").

    python -m benchmarks.ps_core [--words 64] [--batch 1 64 256] [--served-seconds 2]

Core (no sockets): three streams, RESULT copies from the switch (every switch-completed chunk
sends one), PS-only DATA of packed 4-bit indices from 4 workers (table lookup, sums, RESULTs)
and forwarded lanes DATA from 4 workers; packets per CPU second of the calling process, best of
`--repeat` runs.

Served on UDP (loopback): the PS (`PSServer`, each path) runs in a process of its own, and this
process plays a PS-only job's 4 workers, keeping `--in-flight` chunks outstanding with batched GSO
sends. Reported: DATA packets in per second, and per CPU second of the PS process (user and
kernel time of all its threads, from its own rusage), at K = `--words` and at the largest K a
datagram carries (the words a PS-only job registers on loopback).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ina.control import Endpoint, JobSpec
from ina.control.http import ControlClient
from ina.control.jobs import MAX_WORDS
from ina.net.frames import Frames
from ina.net.native import to_native
from ina.net.node import Datagram
from ina.net.udp import BatchSocket, open_socket
from ina.protocol import Header, Kind, pack_fields, result_words
from ina.ps.native import NativeParameterServer, native_module, ps_core
from ina.ps.server import PSServer
from ina.transport.udp_setup import Deployment, ps_only_words

THC_TABLE = (0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30)
WORKERS = tuple(Endpoint("127.0.0.1", 5000 + r) for r in range(4))
SWITCH = Endpoint("127.0.0.1", 47100)
PATHS = ("python", "native")


# --- the PS core, without sockets ----------------------------------------------------------


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


def core_rate(path: str, build: Callable, words: int, batch: int, count: int, repeat: int) -> float:
    """Best packets per CPU second over `repeat` fresh PSes on `path`. The native PS gets its batches as
    the buffers its packet loop hands it (no Python object per datagram), the Python one as Datagrams."""
    spec, packets = build(words, count, np.random.default_rng(0))
    batches = [packets[i : i + batch] for i in range(0, len(packets), batch)]
    native = [to_native(Frames.of(b)) for b in batches] if path == "native" else []
    best = 0.0
    for _ in range(repeat):
        ps = ps_core(words, path, result_retention=256)
        ps.register(spec)
        start = time.process_time()
        if isinstance(ps, NativeParameterServer):
            receive = ps._core.receive  # what NativeRunner's loop does per datagram, minus the socket
            for frames in native:
                receive(*frames, 0.0)
        else:
            for part in batches:
                ps.receive(part, 0.0)
        best = max(best, len(packets) / (time.process_time() - start))
    return best


# --- served on UDP ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    packets: int  # DATA packets the PS received
    seconds: float  # wall time of the load
    cpu: float  # the PS process's CPU seconds (user + system) meanwhile
    lost: int  # DATA the load sent that the PS never counted (socket overflow)


def _serve_ps(path: str, words: int, max_words: int, ready: multiprocessing.connection.Connection) -> None:
    """The PS process: serve until told to stop; report its counters and CPU time at each request."""
    os.environ["INA_NATIVE_PACKETS"] = "1" if path == "native" else "0"
    core = ps_core(words, path, result_retention=64, max_words=max_words)
    with PSServer(core, ("127.0.0.1", 0), ("127.0.0.1", 0), batch=256).start() as server:
        ready.send((server.address, server.control_address))
        while ready.recv() != "stop":
            usage = resource.getrusage(resource.RUSAGE_SELF)
            ready.send((server.counters()["rx_data"], usage.ru_utime + usage.ru_stime))


def served_rate(path: str, words: int, seconds: float, in_flight: int) -> Served:
    """Drive a PS-only job of 4 workers (4-bit indices, `words` per packet) through a PS process on `path`."""
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe()
    process = context.Process(target=_serve_ps, args=(path, 64, MAX_WORDS, theirs), daemon=True)
    process.start()
    socks = [open_socket(("127.0.0.1", 0)) for _ in range(4)]
    try:
        address, control = mine.recv()
        window = max(1, in_flight)
        spec = JobSpec(job=1, workers=tuple(Endpoint(*s.getsockname()) for s in socks), window=window, index_bits=4,
                       lane_bits=8, table=THC_TABLE, words=words)  # fmt: skip
        ControlClient(*control).register(spec)
        io = [BatchSocket(s, messages=64) for s in socks]
        step = max(1, window // 2)
        payload = pack_fields(np.random.default_rng(1).integers(0, 16, size=step * words * 8), 4).reshape(step, words)
        blocks = []  # each worker's next `step` DATA packets, rewritten in place with their seqs
        for rank in range(4):
            head = np.frombuffer(Header(Kind.DATA, 1, 0, rank=rank, index_bits=4, lane_bits=8, bitmap=1 << rank).pack(), dtype=np.uint8)
            blocks.append(np.concatenate([np.tile(head, (step, 1)), payload.astype(">u4").view(np.uint8).reshape(step, -1)], axis=1))
        seqs = np.arange(step, dtype=np.uint32)

        def send(first: int) -> None:
            column = (seqs + np.uint32(first)).astype(">u4").view(np.uint8).reshape(step, 4)
            for rank in range(4):
                blocks[rank][:, 8:12] = column
                io[rank].send_frames(Frames.of_rows(blocks[rank], address))

        mine.send("count")
        before, cpu_before = mine.recv()
        start = time.monotonic()
        sent = received = 0
        deadline, stalled = start + seconds, start
        while time.monotonic() < deadline:
            got = len(io[0].recv_frames())
            for other in io[1:]:
                other.recv_frames()
            received += got
            if got:
                stalled = time.monotonic()
            elif time.monotonic() - stalled > 0.05:  # something was lost: top the window up again
                received, stalled = max(received, sent - window), time.monotonic()
            while sent - received <= window - step:
                send(sent)
                sent += step
        elapsed = time.monotonic() - start
        time.sleep(0.05)
        mine.send("count")
        after, cpu_after = mine.recv()
        return Served(after - before, elapsed, cpu_after - cpu_before, 4 * sent - (after - before))
    finally:
        mine.send("stop")
        process.join(10)
        for s in socks:
            s.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=64)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--served-seconds", type=float, default=2.0, help="load time of each served run (0: none)")
    parser.add_argument("--in-flight", type=int, default=128, help="chunks outstanding per worker in the served runs")
    args = parser.parse_args()
    paths = [p for p in PATHS if p == "python" or native_module() is not None]
    print(f"PS core, K = {args.words}: packets per CPU second")
    print(f"{'stream':40s} {'batch':>5s}" + "".join(f"{p:>14s}" for p in paths) + ("      ratio" if len(paths) == 2 else ""))
    for name, build in (("result copies", result_copies), ("PS-only 4-bit indices DATA, 4 workers", indices_data),
                        ("forwarded lanes DATA, 4 workers", forwarded_lanes)):
        for batch in args.batch:
            rates = [core_rate(p, build, args.words, batch, args.count, args.repeat) for p in paths]
            ratio = f"{rates[1] / rates[0]:10.1f}x" if len(rates) == 2 else ""
            print(f"{name:40s} {batch:5d}" + "".join(f"{r:14,.0f}" for r in rates) + ratio)
    if args.served_seconds <= 0:
        return
    large = ps_only_words(Deployment(args.words, 1, ("127.0.0.1", 9), None, max_words=MAX_WORDS), 4, 8)
    print(f"\nServed on loopback UDP, PS-only 4-bit indices from 4 workers, {args.in_flight} chunks in flight "
          f"(large K: the most one datagram carries, {large} words, RESULTs of {4 * result_words(large, 4, 8) + 20} bytes)")
    print(f"{'path':8s} {'K':>6s} {'DATA in/s':>12s} {'DATA in/CPU s':>14s} {'PS CPU':>7s} {'MB/s in':>8s} {'lost':>6s}")
    for path in paths:
        for words in (args.words, large):
            in_flight = max(1, min(args.in_flight, (1 << 20) // (4 * words)))
            run = served_rate(path, words, args.served_seconds, in_flight)
            print(f"{path:8s} {words:6d} {run.packets / run.seconds:12,.0f} {run.packets / max(run.cpu, 1e-9):14,.0f} "
                  f"{run.cpu / run.seconds:6.0%} {run.packets * (20 + 4 * words) / run.seconds / 1e6:8.1f} {run.lost:6d}")


if __name__ == "__main__":
    main()
