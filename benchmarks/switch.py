"""Throughput of the software switch on loopback, and of the P4 switch on BMv2: `python -m benchmarks.switch`.

The switch server runs in its own process, one target after the other in one run: `python` (the
Python reference core), `native` (the C data plane, ina/switch/_native.c) and `bmv2` (BMv2 on a
veth pair this benchmark creates; run as root). Load-generating worker processes run closed
loops (at most `window` chunks outstanding, as real workers do) with batched sends (GSO) and
receives (GRO), each worker over its own UDP socket. The job's PS is ina's own, in a process of
its own: it takes the result copies, and completes the chunks the switch sends it (collisions),
as it does in a deployment; the workers never resend. Rates come from the switch's own counters; "rx pkt/CPU-s"
divides the packets it received by the CPU time (user and kernel) of the switch's process alone.
"fp32-equivalent MB/s" counts the coordinates the switch aggregated per second at 4 bytes
each, with 8-bit lanes carrying 4 coordinates per 32-bit word.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import select
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ina.control import Endpoint, JobSpec
from ina.control.http import ControlClient
from ina.net.frames import Frames
from ina.net.udp import BatchSocket, open_socket
from ina.p4.toolchain import TOOLS
from ina.protocol import HEADER_DTYPE, HEADER_LEN, MAGIC, VERSION, Kind

LOOPBACK = "127.0.0.1"
LANE_BITS = 8


@dataclass(frozen=True)
class Case:
    words: int
    workers: int
    window: int
    pool: int
    seconds: float
    procs: int
    batch: int
    target: str = "native"
    bmv2: str | None = None
    """simple_switch_grpc to run for the bmv2 target (default: as ina finds it)."""

    @property
    def label(self) -> str:
        return f"bmv2:{Path(self.bmv2).parent.parent.name}" if self.bmv2 else self.target


BMV2_HOST, BMV2_SWITCH, BMV2_MAC = "10.97.0.1", "10.97.0.254", "02:00:00:00:00:fe"
"""The load's address on the host side of the veth, and the P4 switch's address behind it."""


def _serve_switch(case: Case, ready: mp.Queue, stop: mp.Event) -> None:
    from ina.switch import SwitchConfig
    from ina.switch.server import SwitchServer

    config = SwitchConfig(pool=case.pool, words=case.words)
    if case.bmv2:
        os.environ[TOOLS["simple_switch_grpc"]] = case.bmv2
    if case.target == "bmv2":
        _serve_bmv2(config, ready, stop)
        return
    with SwitchServer(config, (LOOPBACK, 0), (LOOPBACK, 0), batch=case.batch, path=case.target) as server:
        server.start()
        ready.put((server.address, server.control_address, os.getpid()))
        stop.wait()


def _serve_bmv2(config, ready: mp.Queue, stop: mp.Event) -> None:  # type: ignore[no-untyped-def]
    """BMv2 on a veth pair whose other end holds the load's address: every packet crosses BMv2."""
    import subprocess

    from ina.p4.bmv2_device import Bmv2Device
    from ina.p4.entries import Route
    from ina.p4.server import P4SwitchServer
    from ina.protocol import INA_PORT

    switch_side, host_side = "inabench0", "inabench1"
    run = lambda *command: subprocess.run(command, check=True, capture_output=True)  # noqa: E731
    run("ip", "link", "add", switch_side, "type", "veth", "peer", "name", host_side)
    try:
        for name in (switch_side, host_side):
            run("sysctl", "-q", "-w", f"net.ipv6.conf.{name}.disable_ipv6=1")
            run("ip", "link", "set", name, "up")
        # a DATA the switch forwards to the PS keeps its worker's source, an address of this host too
        run("sysctl", "-q", "-w", f"net.ipv4.conf.{host_side}.accept_local=1")
        run("ip", "addr", "add", f"{BMV2_HOST}/24", "dev", host_side)
        run("ethtool", "-K", host_side, "tx", "off")  # full checksums and no GSO: BMv2 forwards frames as they are
        run("ip", "neigh", "replace", BMV2_SWITCH, "lladdr", BMV2_MAC, "dev", host_side, "nud", "permanent")
        mac = open(f"/sys/class/net/{host_side}/address").read().strip()
        with P4SwitchServer(config, (BMV2_SWITCH, INA_PORT), (LOOPBACK, 0), lambda: Bmv2Device.start({1: switch_side}),
                            [Route(BMV2_HOST, mac, 1)], BMV2_MAC) as server:  # fmt: skip
            server.start()
            ready.put((server.address, server.control_address, server.device.bmv2.process.pid))
            stop.wait()
    finally:
        subprocess.run(["ip", "link", "del", switch_side], capture_output=True)


def _serve_ps(case: Case, host: str, ready: mp.Queue, stop: mp.Event) -> None:
    from ina.ps.native import ps_core
    from ina.ps.server import PSServer

    with PSServer(ps_core(case.words), (host, 0), (LOOPBACK, 0), batch=case.batch) as server:
        server.start()
        ready.put((server.address, server.control_address, os.getpid()))
        stop.wait()


def _data_rows(job: int, rank: int, seqs: np.ndarray, slots: tuple[int, int, int], payload: np.ndarray) -> np.ndarray:
    """DATA packets for consecutive chunks as rows of a uint8 matrix, built with numpy."""
    head = np.zeros(seqs.size, dtype=HEADER_DTYPE)
    head["magic"], head["version"], head["kind"] = MAGIC, VERSION, Kind.DATA
    head["job"], head["rank"], head["seq"] = job, rank, seqs
    slot_base, span, pool = slots
    head["slot"] = (slot_base + seqs % span) % pool  # the job's slots (docs/protocol.md, section 5)
    head["lane_bits"], head["bitmap"] = LANE_BITS, 1 << rank
    body = np.broadcast_to(payload.astype(">u4").view(np.uint8), (seqs.size, 4 * payload.size))
    return np.concatenate([head.view(np.uint8).reshape(seqs.size, HEADER_LEN), body], axis=1)


def _to(address: tuple, rows: np.ndarray) -> Frames:
    count, size = rows.shape
    return Frames(rows.reshape(-1), np.arange(count, dtype=np.int64) * size, np.full(count, size), np.zeros(count, np.int64), [address])


def _seqs(frames: Frames) -> np.ndarray:
    """The seq field of every received packet."""
    at = frames.start[:, None] + np.arange(8, 12)
    return frames.buffer[at].view(">u4").ravel() if len(frames) else np.zeros(0, dtype=np.uint32)


class _Window:
    """A worker's window: which results arrived (a ring of flags), and the first chunk still missing."""

    def __init__(self, window: int) -> None:
        self.window, self.done = window, 0
        self.arrived = np.zeros(4 * window, dtype=bool)

    def receive(self, seqs: np.ndarray) -> None:
        self.arrived[seqs.astype(np.int64) % self.arrived.size] = True
        ahead = (self.done + np.arange(self.window)) % self.arrived.size
        flags = self.arrived[ahead]
        complete = self.window if flags.all() else int(flags.argmin())
        self.arrived[ahead[:complete]] = False
        self.done += complete


def _load(ranks: list[int], case: Case, switch: tuple, ports: mp.Queue, go: mp.Queue, results: mp.Queue) -> None:
    """Closed loops of the workers `ranks` in one process: each keeps `window` chunks
    outstanding (it sends chunk `seq` once it holds every result below `seq - window`)."""
    host = BMV2_HOST if case.target == "bmv2" else LOOPBACK
    sockets = {rank: BatchSocket(open_socket((host, 0))) for rank in ranks}
    for rank, io in sockets.items():
        ports.put((rank, io.sock.getsockname()[1]))
    job, slots, deadline = go.get()
    payload = np.random.default_rng(ranks[0]).integers(0, 30, case.words, dtype=np.uint32)
    sent = dict.fromkeys(ranks, 0)
    windows = {rank: _Window(case.window) for rank in ranks}
    rank_of = {io.fileno(): rank for rank, io in sockets.items()}
    readers = list(sockets.values())
    while time.time() < deadline:
        for rank, io in sockets.items():
            limit = windows[rank].done + case.window
            if sent[rank] < limit:
                seqs = np.arange(sent[rank], limit, dtype=np.uint32)
                io.send_frames(_to(switch, _data_rows(job, rank, seqs, slots, payload)))
                sent[rank] = limit
        readable, _, _ = select.select(readers, [], [], 0.05)
        for io in readable:
            windows[rank_of[io.fileno()]].receive(_seqs(io.recv_frames()))
    results.put(min(w.done for w in windows.values()))


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(case: Case, warmup: float = 0.5) -> dict:
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    switch = ctx.Process(target=_serve_switch, args=(case, ready, stop))
    switch.start()
    data_addr, control_addr, pid = ready.get(timeout=30)
    host = BMV2_HOST if case.target == "bmv2" else LOOPBACK
    ps = ctx.Process(target=_serve_ps, args=(case, host, ready, stop))
    ps.start()
    ps_addr, ps_control_addr, ps_pid = ready.get(timeout=30)
    ports, results = ctx.Queue(), ctx.Queue()
    groups = [list(range(case.workers))[i :: case.procs] for i in range(case.procs)]
    gos = [ctx.Queue() for _ in groups]
    loads = [ctx.Process(target=_load, args=(ranks, case, data_addr, ports, go, results)) for ranks, go in zip(groups, gos)]
    for process in loads:
        process.start()
    by_rank = dict(ports.get(timeout=30) for _ in range(case.workers))
    control = ControlClient(*control_addr)
    spec = JobSpec(job=1, workers=tuple(Endpoint(host, by_rank[r]) for r in range(case.workers)), window=case.window,
                   lane_bits=LANE_BITS, ps=Endpoint(*ps_addr), switch=Endpoint(*data_addr))  # fmt: skip
    ControlClient(*ps_control_addr).register(spec)
    placed = control.register(spec)
    slots = (placed["slot_base"], placed["span"], case.pool)
    deadline = time.time() + warmup + case.seconds
    for q in gos:
        q.put((spec.job, slots, deadline))
    time.sleep(warmup)
    load_cpu = lambda: sum(_cpu_seconds(process.pid) for process in loads)  # noqa: E731
    before, cpu_before, load_before, ps_before, t0 = control.counters(), _cpu_seconds(pid), load_cpu(), _cpu_seconds(ps_pid), time.time()
    time.sleep(case.seconds)
    after, cpu_after, load_after, ps_after, t1 = control.counters(), _cpu_seconds(pid), load_cpu(), _cpu_seconds(ps_pid), time.time()
    chunks = [results.get(timeout=30) for _ in loads]
    for process in loads:
        process.join()
    stop.set()
    switch.join()
    ps.join()
    elapsed = t1 - t0
    rx = (after["rx_packets"] - before["rx_packets"]) / elapsed
    return {
        "target": case.label, "words": case.words, "workers": case.workers, "window": case.window,
        "rx_pps": rx, "tx_pps": (after["tx_packets"] - before["tx_packets"]) / elapsed,
        "chunks_per_s": (after["completed"] - before["completed"]) / elapsed,
        "fp32_MBps": rx * case.words * (32 // LANE_BITS) * 4 / 1e6,
        "switch_cpu": (cpu_after - cpu_before) / elapsed,
        "capacity_pps": (after["rx_packets"] - before["rx_packets"]) / max(cpu_after - cpu_before, 1e-9),
        "load_cpu": (load_after - load_before) / elapsed,
        "ps_cpu": (ps_after - ps_before) / elapsed,
        "stalled": min(chunks) == 0 or after["completed"] == before["completed"],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, nargs="+", default=[64, 256], help="K values to measure")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--window", type=int, default=1024, help="outstanding chunks per worker")
    parser.add_argument("--pool", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per K; the table shows the median run (by rx pkt/s) and the best")
    parser.add_argument("--procs", type=int, default=2, help="load-generating processes sharing the workers")
    parser.add_argument("--batch", type=int, default=1024, help="the switch runner's datagrams per call")
    parser.add_argument("--target", nargs="+", choices=("python", "native", "bmv2"), default=["python", "native"],
                        help="switches to measure, one after the other in this run: the software switch's Python or "
                             "native core, or the P4 switch on BMv2 (root, p4c and BMv2) (default: %(default)s)")
    parser.add_argument("--bmv2", nargs="+", metavar="SIMPLE_SWITCH_GRPC", default=[None],
                        help="BMv2 builds to measure side by side for the bmv2 target, each a simple_switch_grpc "
                             "(default: the one ina finds on PATH or at $INA_SIMPLE_SWITCH_GRPC)")
    args = parser.parse_args()
    print(f"{'target':>14} {'K':>5} {'run':>6} {'rx pkt/s':>10} {'tx pkt/s':>10} {'chunks/s':>9} {'fp32-eq MB/s':>12} {'switch CPU':>10} "
          f"{'rx pkt/CPU-s':>12} {'load CPU':>8} {'PS CPU':>6}")  # fmt: skip
    targets = [(target, bmv2) for target in args.target for bmv2 in (args.bmv2 if target == "bmv2" else [None])]
    for (target, bmv2), words in itertools.product(targets, args.words):
        case = Case(words, args.workers, args.window, args.pool, args.seconds, args.procs, args.batch, target, bmv2)
        runs = sorted((measure(case) for _ in range(args.repeat)), key=lambda r: r["rx_pps"])
        for label, r in (("median", runs[len(runs) // 2]), ("best", runs[-1])):
            print(f"{case.label:>14} {words:>5} {label:>6} {r['rx_pps']:>10,.0f} {r['tx_pps']:>10,.0f} {r['chunks_per_s']:>9,.0f} "
                  f"{r['fp32_MBps']:>12,.1f} {r['switch_cpu']:>10.0%} {r['capacity_pps']:>12,.0f} {r['load_cpu']:>8.0%} {r['ps_cpu']:>6.0%}"
                  + ("  STALLED" if any(run["stalled"] for run in runs) else ""))  # fmt: skip
    print(f"({args.workers} workers in {args.procs} load processes, window {args.window}, pool {args.pool}, "
          f"switch batch {args.batch}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
