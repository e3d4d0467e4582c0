"""The PS served on UDP (127.0.0.1) with its control API, and its command line."""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from ps_support import make_core, ps_path  # noqa: F401 (ps_path: each test on both PSes)

from ina.control import Endpoint, JobSpec
from ina.control.http import ControlClient, ControlError
from ina.control.jobs import MAX_WORDS
from ina.protocol import (
    HEADER_LEN,
    Flag,
    Header,
    Kind,
    pack_fields,
    parse,
    result_words,
)
from ina.ps.server import PSServer
from ina.transport.errors import TransportError
from ina.transport.udp_setup import Deployment, path_payload, ps_only_words

K = 8
THC_TABLE = (0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30)


@pytest.fixture
def server():
    with PSServer(make_core(K, flush_delay=0.01), ("127.0.0.1", 0), ("127.0.0.1", 0)).start() as running:
        yield running


@pytest.fixture
def sockets():
    opened = []

    def make(count):
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            sock.settimeout(5.0)
            opened.append(sock)
        return opened[-count:]

    yield make
    for sock in opened:
        sock.close()


def receive(sock):
    header, payload = parse(sock.recv(65536), K)
    return header, payload.tolist()


def test_ps_only_job_over_udp_with_the_control_api(server, sockets):
    client = ControlClient(*server.control_address)
    assert client.health() == {"role": "ps", "ok": True}
    assert client.config()["words"] == K
    workers = sockets(4)
    names = [{"host": "localhost" if rank == 0 else "127.0.0.1", "port": w.getsockname()[1]} for rank, w in enumerate(workers)]
    reply = client.register(JobSpec.from_json({"job": 3, "workers": names, "window": 2, "lane_bits": 8,
                                               "index_bits": 4, "table": list(THC_TABLE)}))
    assert reply == {"job": 3, "ring": 64, "lease": 60.0}  # the default lease (docs/protocol.md, section 7)
    with pytest.raises(ControlError, match="already registered"):
        client.register(JobSpec.from_json({"job": 3, "workers": names, "window": 2}))
    rng = np.random.default_rng(1)
    indices = rng.integers(0, 16, size=(4, K * 8))
    for rank, sock in enumerate(workers):
        header = Header(Kind.DATA, 3, 0, rank=rank, index_bits=4, lane_bits=8, bitmap=1 << rank)
        sock.sendto(header.pack(pack_fields(indices[rank], 4)), server.address)
    expected = pack_fields(np.asarray(THC_TABLE)[indices].sum(axis=0), 8).tolist()
    for sock in workers:
        header, payload = receive(sock)
        assert (header.kind, header.job, header.bitmap, payload) == (Kind.RESULT, 3, 0b1111, expected)
    resend = Header(Kind.DATA, 3, 0, Flag.RESEND, rank=2, index_bits=4, lane_bits=8, bitmap=1 << 2)
    workers[2].sendto(resend.pack(pack_fields(indices[2], 4)), server.address)
    assert receive(workers[2])[1] == expected
    counters = client.counters()
    assert (counters["completed"], counters["results_replayed"], counters["send_refused"]) == (1, 1, 0)
    assert client.jobs()[0]["workers"][0]["host"] == "127.0.0.1", "host names are resolved at registration"
    client.deregister(3)
    assert client.jobs() == []
    with pytest.raises(ControlError, match="not registered"):
        client.deregister(3)


def test_flush_requests_reach_the_switch_until_the_chunk_completes(server, sockets):
    worker, switch = sockets(2)
    client = ControlClient(*server.control_address)
    client.register(JobSpec(job=1, workers=(Endpoint(*worker.getsockname()), Endpoint("127.0.0.1", 9)), window=1,
                            switch=Endpoint(*switch.getsockname())))
    sent = time.monotonic()
    switch.sendto(Header(Kind.DATA, 1, 5, rank=0, slot=12, lane_bits=8, bitmap=1).pack(np.ones(K, np.uint32)), server.address)
    flushes = [receive(switch)[0] for _ in range(2)]
    assert time.monotonic() - sent >= 0.01 + 0.02
    assert all((h.kind, h.job, h.seq, h.slot) == (Kind.FLUSH, 1, 5, 12) for h in flushes)
    partial = Header(Kind.PARTIAL, 1, 5, slot=12, lane_bits=8, bitmap=0b10).pack(np.full(K, 2, np.uint32))
    switch.sendto(partial, server.address)
    assert receive(worker)[1] == [3] * K
    assert client.counters()["flush_sent"] >= 2


def test_a_racked_job_registers_by_host_names_and_completes_from_both_levels(server, sockets):
    workers, leaves, (spine,) = sockets(3), sockets(2), sockets(1)
    client = ControlClient(*server.control_address)
    named = [{"host": "localhost", "port": s.getsockname()[1]} for s in leaves]
    body = {"job": 4, "workers": [Endpoint(*w.getsockname()).addr for w in workers], "window": 2, "racks": [2, 1],
            "switch": "localhost:%d" % spine.getsockname()[1], "leaves": named}
    with pytest.raises(ControlError, match="leaves\\[1\\] .* both .* own data address"):
        client.register(JobSpec.from_json({**body, "leaves": [named[0], list(workers[0].getsockname())]}))
    client.register(JobSpec.from_json(body))
    assert [leaf["host"] for leaf in client.jobs()[0]["leaves"]] == ["127.0.0.1"] * 2, "host names are resolved at registration"
    for rank, sock in enumerate(workers[:2]):
        sock.sendto(Header(Kind.DATA, 4, 0, rank=rank, slot=5, lane_bits=8, bitmap=1 << rank).pack(np.ones(K, np.uint32)), server.address)
    rack = Header(Kind.DATA, 4, 0, Flag.SPINE, rank=1, slot=5, lane_bits=8, bitmap=0b10)  # rack 1's sum, through the spine
    spine.sendto(rack.pack(np.full(K, 5, np.uint32)), server.address)
    for sock in workers:
        header, payload = receive(sock)
        assert (header.kind, header.flags, header.bitmap, header.slot, payload) == (Kind.RESULT, Flag.SPINE, 0b11, 5, [7] * K)


def test_a_bad_configuration_or_a_busy_port_fails_at_start_with_a_message(sockets):
    (busy,) = sockets(1)
    port = busy.getsockname()[1]
    with pytest.raises(ValueError, match=f"--listen 127.0.0.1:{port}: cannot bind"):
        PSServer(make_core(K), ("127.0.0.1", port), ("127.0.0.1", 0))
    with pytest.raises(ValueError, match="flush_delay"):
        make_core(K, flush_delay=0)


def test_a_ps_only_job_with_the_largest_words_a_datagram_carries_over_udp(server, sockets):
    """Loopback carries a whole datagram: 4-bit indices come back as 8-bit lanes, twice their size."""
    client = ControlClient(*server.control_address)
    assert client.config()["max_words"] == MAX_WORDS
    deployment = Deployment(K, 1, server.address, None, max_words=client.config()["max_words"])
    big = ps_only_words(deployment, 4, 8)
    workers = sockets(2)
    names = [{"host": "127.0.0.1", "port": w.getsockname()[1]} for w in workers]
    client.register(JobSpec.from_json({"job": 4, "workers": names, "window": 2, "index_bits": 4, "table": list(THC_TABLE), "words": big}))
    indices = np.random.default_rng(4).integers(0, 16, size=(2, big * 8))
    for rank, sock in enumerate(workers):
        sock.sendto(Header(Kind.DATA, 4, 0, rank=rank, index_bits=4, lane_bits=8, bitmap=1 << rank).pack(pack_fields(indices[rank], 4)),
                    server.address)  # fmt: skip
    expected = pack_fields(np.asarray(THC_TABLE)[indices].sum(axis=0), 8)
    for sock in workers:
        header, payload = parse(sock.recv(65536), big)
        assert (header.kind, header.bitmap) == (Kind.RESULT, 0b11) and np.array_equal(payload, expected)
    assert HEADER_LEN + 4 * result_words(big, 4, 8) <= 65507 and client.counters()["malformed"] == 0


def test_ps_only_workers_pick_the_most_words_the_path_carries_capped_by_the_ps(monkeypatch):
    deployment = Deployment(64, 1, ("127.0.0.1", 47101), None, max_words=MAX_WORDS)
    assert path_payload(deployment.ps) == 65507, "loopback: a whole datagram"
    k = ps_only_words(deployment, 4, 8)
    assert HEADER_LEN + 4 * result_words(k, 4, 8) <= 65507 < HEADER_LEN + 4 * result_words(k + 1, 4, 8)
    assert ps_only_words(deployment, 0, 8) == MAX_WORDS and ps_only_words(deployment, 2, 8) == k // 2
    assert ps_only_words(Deployment(64, 1, deployment.ps, None, max_words=1000), 4, 8) == 1000
    assert ps_only_words(Deployment(64, 1, deployment.ps, None), 4, 8) == 64, "a PS that reports no max_words: its words"
    assert ps_only_words(deployment, 4, 8, requested=500) == 500
    monkeypatch.setenv("INA_WORDS", "300")
    assert ps_only_words(deployment, 4, 8) == 300
    with pytest.raises(TransportError, match="1..1000"):
        ps_only_words(Deployment(64, 1, deployment.ps, None, max_words=1000), 4, 8, requested=1001)


def _ps_command(*args, env=None):
    return subprocess.Popen([sys.executable, "-m", "ina.ps", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)  # fmt: skip


def test_command_line_serves_until_sigterm_and_reports_counters(ps_path):  # noqa: F811
    env = {**os.environ, "INA_NATIVE_PACKETS": "1" if ps_path == "native" else "0"}
    process = _ps_command("--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--words", str(K), env=env)
    try:
        line = process.stdout.readline()
        assert f"packets {ps_path}" in line, line
        match = re.search(r"control http://([\d.]+):(\d+)", line)
        assert match, line
        assert ControlClient(match[1], int(match[2])).config()["words"] == K
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert "stopped; counters" in out


def test_command_line_rejects_a_bad_configuration():
    process = _ps_command("--listen", "nowhere", "--control", "127.0.0.1:0")
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2 and "--listen must look like" in err


def _wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def test_with_the_software_switch_a_preempted_chunk_completes_at_the_ps_and_results_are_replayed(server, sockets):
    from ina.switch.config import SwitchConfig
    from ina.switch.server import SwitchServer

    with SwitchServer(SwitchConfig(pool=1, words=K, policy="esa"), ("127.0.0.1", 0), ("127.0.0.1", 0)).start() as switch:
        a, b = sockets(2), sockets(2)
        ps_client = ControlClient(*server.control_address)
        for job, workers in ((1, a), (2, b)):
            spec = JobSpec(job=job, workers=tuple(Endpoint(*w.getsockname()) for w in workers), window=1,
                           ps=Endpoint(*server.address), switch=Endpoint(*switch.address))
            ControlClient(*switch.control_address).register(spec)
            ps_client.register(spec)
        values = {(job, rank): np.full(K, 10 * job + rank, np.uint32) for job in (1, 2) for rank in (0, 1)}

        def send(job, rank, priority, flags=Flag.NONE):
            sock = (a, b)[job - 1][rank]
            header = Header(Kind.DATA, job, 0, flags, rank=rank, priority=priority, lane_bits=8, bitmap=1 << rank)
            sock.sendto(header.pack(values[job, rank]), switch.address)

        send(1, 0, priority=1)  # job 1 claims the only slot
        _wait_for(lambda: switch.counters()["claimed"] == 1)
        send(2, 0, priority=5)  # job 2 preempts it: job 1's partial goes to the PS
        _wait_for(lambda: server.counters()["rx_partial"] == 1)
        send(1, 1, priority=1)  # redirected to the PS, which completes job 1
        send(2, 1, priority=5)  # completes job 2 in the switch; a copy goes to the PS
        for job, workers in ((1, a), (2, b)):
            for sock in workers:
                assert receive(sock)[1] == (values[job, 0] + values[job, 1]).tolist()
        _wait_for(lambda: server.counters()["result_copies"] == 1)
        send(2, 1, priority=5, flags=Flag.RESEND)  # its result lost: the switch forwards, the PS replays
        assert receive(b[1])[1] == (values[2, 0] + values[2, 1]).tolist()
        counts = server.counters()
        assert (counts["completed"], counts["results_replayed"], counts["unregistered"]) == (1, 1, 0)
        assert switch.counters()["preempted"] == 1
