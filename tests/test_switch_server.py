"""The switch server on 127.0.0.1: control API, two workers aggregating over UDP, fault
injection, and the CLI's start-up errors and clean shutdown."""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Iterator

import numpy as np
import pytest
from switch_support import NATIVE_BUILT, path  # noqa: F401 (path: the fixture running a test on both cores)

from ina.control import Endpoint, JobSpec
from ina.control.http import ControlClient, ControlError
from ina.protocol import Header, Kind, parse
from ina.switch import SwitchConfig
from ina.switch.server import Faults, SwitchServer

LOOPBACK = ("127.0.0.1", 0)


def bound() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(LOOPBACK)
    sock.settimeout(5.0)
    return sock


def data(job: int, rank: int, seq: int, slot: int, values: list[int]) -> bytes:
    header = Header(Kind.DATA, job=job, seq=seq, rank=rank, bitmap=1 << rank, slot=slot, lane_bits=8)
    return header.pack(np.array(values, dtype=np.uint32))


@pytest.fixture
def server(path):
    with SwitchServer(SwitchConfig(pool=8, words=4), LOOPBACK, LOOPBACK, path=path) as s:
        assert s.path == path
        s.start()
        yield s


def test_two_workers_aggregate_through_the_udp_server_registered_over_http(server):
    workers, ps = [bound(), bound()], bound()
    control = ControlClient(*server.control_address)
    assert control.health() == {"role": "switch", "ok": True}
    assert control.config()["pool"] == 8
    spec = JobSpec(job=4, workers=tuple(Endpoint(*w.getsockname()) for w in workers), window=4, ps=Endpoint(*ps.getsockname()))
    base = control.register(spec)["slot_base"]
    assert control.jobs()[0]["slot_base"] == base and control.jobs()[0]["job"] == 4
    for rank, w in enumerate(workers):
        w.sendto(data(4, rank, 0, base, [rank + 1, 10, 100, 1000]), server.address)
    for receiver in (*workers, ps):
        packet, source = receiver.recvfrom(2048)
        header, payload = parse(packet, 4)
        assert source == server.address and header.kind == Kind.RESULT and payload.tolist() == [3, 20, 200, 2000]
    counters = control.counters()
    assert (counters["rx_packets"], counters["completed"], counters["tx_packets"]) == (2, 1, 3)
    with pytest.raises(ControlError, match="already registered"):
        control.register(spec)
    with pytest.raises(ControlError, match="exceeds the switch's pool"):
        control.register(JobSpec(job=5, workers=spec.workers, window=9, ps=spec.ps))
    control.deregister(4)
    assert control.jobs() == []
    workers[0].sendto(data(4, 0, 1, base + 1, [1, 1, 1, 1]), server.address)
    deadline = time.monotonic() + 5
    while control.counters()["unregistered"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert control.counters()["unregistered"] == 1
    for s in (*workers, ps):
        s.close()


def test_fault_injection_is_applied_and_counted(path):
    with SwitchServer(SwitchConfig(pool=8, words=4), LOOPBACK, LOOPBACK, Faults(drop=0.5, seed=1), path=path) as server:
        server.start()
        sender = bound()
        for _ in range(200):
            sender.sendto(b"garbage", server.address)
        deadline = time.monotonic() + 5
        while server.counters()["fault_in_seen"] < 200 and time.monotonic() < deadline:
            time.sleep(0.01)
        counters = server.counters()
        assert counters["fault_in_seen"] == 200 and 50 < counters["fault_in_dropped"] < 150
        assert counters["malformed"] == 200 - counters["fault_in_dropped"]
        assert server.config()["faults"] == {"drop": 0.5, "duplicate": 0.0, "reorder": 0.0, "seed": 1}
        sender.close()


@contextlib.contextmanager
def one_worker_job(pool: int, path: str, **served) -> Iterator[tuple[SwitchServer, Callable[[int], bytes], socket.socket, socket.socket]]:
    """A started server (pool `pool`, K = 4, `served` its options) with a one-worker job of window `pool`: the
    server, the DATA of chunk seq (which completes it at once), the worker's socket and the PS's."""
    with SwitchServer(SwitchConfig(pool=pool, words=4), LOOPBACK, LOOPBACK, path=path, **served) as server:
        server.start()
        worker, ps = bound(), bound()
        spec = JobSpec(job=1, workers=(Endpoint(*worker.getsockname()),), window=pool, ps=Endpoint(*ps.getsockname()))
        base = ControlClient(*server.control_address).register(spec)["slot_base"]
        try:
            yield server, lambda seq: data(1, 0, seq, (base + seq) % pool, [seq, 0, 0, 0]), worker, ps
        finally:
            worker.close()
            ps.close()


def test_a_packet_rate_cap_paces_what_the_switch_sends(path):
    with one_worker_job(32, path, max_pps=200) as (server, chunk, worker, _):
        started = time.monotonic()
        for seq in range(32):
            worker.sendto(chunk(seq), server.address)
        results = [parse(worker.recvfrom(2048)[0], 4)[0].seq for _ in range(32)]
        elapsed = time.monotonic() - started
        assert sorted(results) == list(range(32))
        assert elapsed >= 31 / 200  # the last RESULT left after 32 packets' service at 200 a second, however slow the machine
        assert server.config()["max_pps"] == 200


def test_a_latency_holds_every_packet_the_switch_sends(path):
    with one_worker_job(4, path, latency=0.05) as (server, chunk, worker, ps):
        for seq in range(4):
            sent = time.monotonic()
            worker.sendto(chunk(seq), server.address)
            assert parse(worker.recvfrom(2048)[0], 4)[0].seq == seq
            assert time.monotonic() - sent >= 0.05  # held 50 ms, however fast the machine
            assert parse(ps.recvfrom(2048)[0], 4)[0].seq == seq  # the PS's copy too
        assert server.config()["latency_ms"] == 50


def test_a_taken_port_is_refused_with_what_to_change():
    taken = bound()
    with pytest.raises(ValueError, match=r"--listen 127\.0\.0\.1:\d+: cannot bind .* choose another --listen"):
        SwitchServer(SwitchConfig(), taken.getsockname(), LOOPBACK)
    taken.close()


def run_cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ina.switch", *args], capture_output=True, text=True, timeout=timeout)


def path_environment(path: str) -> dict[str, str]:
    """The environment that makes `ina switch` run `path` (the native path is the default where built)."""
    return {k: v for k, v in os.environ.items() if k != "INA_NATIVE_PACKETS"} | ({"INA_NATIVE_PACKETS": "0"} if path == "python" else {})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pool", "12"], "pool must be a power of two"),
        (["--words", "0"], "words must be in"),
        (["--listen", "localhost"], "--listen must look like"),
        (["--drop", "1.5"], "drop rate must be in"),
        (["--slot-timeout", "0"], "slot_timeout must be a positive"),
        (["--max-pps", "-1"], "--max-pps must be 0 (no cap) or a positive packet rate"),
        (["--latency", "-1"], "--latency must be 0 (none) or a positive number of milliseconds"),
        (["--policy", "atp", "--no-result-copies"], "policy atp sends every RESULT through the PS"),
    ],
)
def test_the_cli_refuses_a_bad_configuration_at_start(args, message):
    done = run_cli("--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_cli_serves_until_a_signal_then_stops_cleanly(signum, path):
    process = subprocess.Popen([sys.executable, "-m", "ina.switch", "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0",
                                "--pool", "16", "--policy", "fcfs", "--queues", "fifo", "--no-result-copies"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=path_environment(path))  # fmt: skip
    try:
        banner = process.stdout.readline()
        match = re.search(r"data udp://127\.0\.0\.1:(\d+), control http://127\.0\.0\.1:(\d+), pool 16, words 64, policy fcfs, queues fifo, no result copies, "
                          rf"packets {path}$", banner)
        assert match, banner
        assert {k: v for k, v in ControlClient("127.0.0.1", int(match.group(2))).config().items() if k in ("policy", "result_copies")} == \
            {"policy": "fcfs", "result_copies": False}
        process.send_signal(signum)
        out, err = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert "stopped; counters" in out and "Traceback" not in err


def test_the_subcommand_plugs_into_a_parent_cli():
    import argparse

    from ina import switches

    parser = argparse.ArgumentParser(prog="ina")
    switches.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["switch", "--pool", "8", "--policy", "fcfs", "--drop", "0.01", "--fault-seed", "3"])
    assert (args.command, args.target, args.pool, args.policy, args.drop, args.fault_seed) == ("switch", "software", 8, "fcfs", 0.01, 3)
    assert args.run(parser.parse_args(["switch", "--pool", "12"])) == 2  # refused before binding anything
    assert args.run(parser.parse_args(["switch", "--target", "tofino", "--drop", "0.1"])) == 2


def test_the_cli_help_says_how_to_choose_the_path():
    done = run_cli("--help")
    assert "INA_NATIVE_PACKETS=0" in " ".join(done.stdout.split())


@pytest.mark.skipif(not NATIVE_BUILT, reason="the native switch is not built")
def test_the_native_path_is_the_default_where_it_built():
    with SwitchServer(SwitchConfig(pool=8, words=4), LOOPBACK, LOOPBACK) as server:
        assert server.path == "native" and type(server.runner).__name__ == "NativeRunner"
