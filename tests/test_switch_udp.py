"""ina.net.udp on loopback: batched I/O in every mode (mmsg + GSO/GRO, mmsg, plain) keeps
every datagram, its bytes, source and per-destination order; the runner serves a Node,
ticks it at its deadlines and stops cleanly; so does a served switch on either path."""

import select
import threading
import time

import numpy as np
import pytest
from switch_support import path  # noqa: F401 (the fixture running a test on both switch cores)

from ina.control import Endpoint, JobSpec
from ina.net.frames import Frames
from ina.net.node import Datagram
from ina.net.udp import MAX_PAYLOAD, MAX_SEGMENTS, BatchSocket, UdpRunner, _plan, open_socket, parse_address
from ina.protocol import Header, Kind, parse
from ina.switch import SwitchConfig
from ina.switch.server import SwitchServer

MODES = {"mmsg+gso": dict(mmsg=True, gso=True), "mmsg": dict(mmsg=True, gso=False), "plain": dict(mmsg=False, gso=False)}
LOOPBACK = ("127.0.0.1", 0)


def drain(io: BatchSocket, count: int, timeout: float = 5.0) -> list[Datagram]:
    got, end = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < end:
        more = io.recv()
        got += more
        if not more:
            select.select([io], [], [], 0.05)
    return got


@pytest.mark.parametrize("mode", MODES)
def test_batch_sockets_deliver_every_datagram_exactly_in_order_per_destination(mode):
    sender = BatchSocket(open_socket(LOOPBACK), **MODES[mode])
    receivers = [BatchSocket(open_socket(LOOPBACK), **MODES[mode]) for _ in range(2)]
    sizes = [276] * 150 + [100, 276, 276, 0, 1044, 1044, 3, 9000, MAX_PAYLOAD] + [64] * 70
    datagrams = [Datagram(bytes([i % 251]) * size, receivers[i % 2].sock.getsockname()) for i, size in enumerate(sizes)]
    assert sender.send(datagrams) == 0
    for n, receiver in enumerate(receivers):
        mine = [d.data for d in datagrams if d.addr == receiver.sock.getsockname()]
        got = drain(receiver, len(mine))
        assert [d.data for d in got] == mine
        assert {d.addr for d in got} == {sender.sock.getsockname()}
    for io in (sender, *receivers):
        io.sock.close()


def test_send_plans_group_per_destination_by_size_keeping_order():
    a, b = ("127.0.0.1", 1), ("127.0.0.1", 2)
    sizes = [10, 10, 10, 4, 10, 12, 12, 0, 0]
    frames = Frames.of([Datagram(bytes([i]) * s, a) for i, s in enumerate(sizes)] + [Datagram(b"x", b), Datagram(bytes(10), a)])

    def shape(plan):
        return list(zip(plan.addresses, plan.count.tolist(), plan.segment.tolist()))

    plan = _plan(frames, MAX_SEGMENTS)
    assert shape(plan) == [(a, 3, 10), (a, 1, 0), (a, 1, 0), (a, 2, 12), (a, 1, 0), (a, 1, 0), (a, 1, 0), (b, 1, 0)]
    assert plan.order.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 9]  # stable per destination
    assert shape(_plan(Frames.of([Datagram(bytes(8), a)] * 150), MAX_SEGMENTS)) == [(a, 64, 8), (a, 64, 8), (a, 22, 8)]
    assert shape(_plan(Frames.of([Datagram(bytes(30000), a)] * 3), MAX_SEGMENTS)) == [(a, 2, 30000), (a, 1, 0)]
    assert shape(_plan(Frames.of([Datagram(bytes(8), a)] * 3), 1)) == [(a, 1, 0)] * 3


def test_frames_hold_datagrams_in_one_buffer_and_convert_back():
    datagrams = [Datagram(b"abc", ("127.0.0.1", 1)), Datagram(b"", ("127.0.0.1", 2)), Datagram(b"defgh", ("127.0.0.1", 1))]
    frames = Frames.of(datagrams)
    assert len(frames) == 3 and frames.datagrams() == datagrams
    assert frames.slice(1, 3).datagrams() == datagrams[1:]
    assert frames.rows(4).tolist() == [list(b"abc\0"), [0, 0, 0, 0], list(b"defg")]
    regular = Frames.of([Datagram(b"ab", ("127.0.0.1", 1)), Datagram(b"cd", ("127.0.0.1", 1))])
    assert regular.rows(2).tolist() == [list(b"ab"), list(b"cd")]
    assert len(Frames.empty()) == 0 and Frames.empty().datagrams() == []


@pytest.mark.parametrize("mode", MODES)
def test_frames_go_out_and_come_in_without_datagram_objects(mode):
    sender, receiver = (BatchSocket(open_socket(LOOPBACK), **MODES[mode]) for _ in range(2))
    rows = np.arange(200 * 30, dtype=np.uint32).astype(np.uint8).reshape(200, 30)
    to = receiver.sock.getsockname()
    frames = Frames(rows.reshape(-1), np.arange(200) * 30, np.full(200, 30), np.zeros(200, dtype=np.int64), [to])
    assert sender.send_frames(frames) == 0
    got, end = [], time.monotonic() + 5
    while len(got) < 200 and time.monotonic() < end:
        received = receiver.recv_frames()
        got += [(d.data, d.addr) for d in received.datagrams()]
        if not len(received):
            select.select([receiver], [], [], 0.05)
    assert got == [(row.tobytes(), sender.sock.getsockname()) for row in rows]
    for io in (sender, receiver):
        io.sock.close()


class Recorder:
    """A Node that echoes, and emits b"tick" when its deadline passes."""

    def __init__(self, deadline: float | None = None) -> None:
        self.received: list[Datagram] = []
        self.deadline = deadline
        self.ticked = threading.Event()

    def receive(self, datagrams, now):
        self.received += datagrams
        return [Datagram(d.data.upper(), d.addr) for d in datagrams]

    def tick(self, now):
        if self.deadline is None or now < self.deadline:
            return []
        self.deadline = None
        self.ticked.set()
        return [Datagram(b"tick", self.received[-1].addr)]

    def next_deadline(self):
        return self.deadline


@pytest.mark.parametrize("mode", MODES)
def test_the_runner_serves_a_node_in_bounded_batches_and_ticks_it_at_its_deadline(mode):
    node = Recorder()
    runner = UdpRunner.bind(node, LOOPBACK, batch=7, **MODES[mode]).start()
    client = BatchSocket(open_socket(LOOPBACK), **MODES[mode])
    messages = [Datagram(b"hello %d" % i, runner.address) for i in range(100)]
    client.send(messages)
    assert [d.data for d in drain(client, 100)] == [m.data.upper() for m in messages]
    node.deadline = time.monotonic() + 0.05
    client.send([Datagram(b"wake", runner.address)])  # the runner re-reads the deadline after each batch
    assert node.ticked.wait(2.0)
    assert [d.data for d in drain(client, 2)] == [b"WAKE", b"tick"]
    started = time.monotonic()
    runner.close()
    assert time.monotonic() - started < 1.0 and runner.error is None
    client.sock.close()


def test_a_failing_node_stops_its_runner_and_the_error_is_kept():
    class Broken(Recorder):
        def receive(self, datagrams, now):
            raise RuntimeError("boom")

    runner = UdpRunner.bind(Broken(), LOOPBACK).start()
    client = open_socket(LOOPBACK)
    client.sendto(b"x", runner.address)
    runner._thread.join(2.0)
    assert isinstance(runner.error, RuntimeError)
    runner.close()
    client.close()


def test_addresses_parse_with_messages_that_say_what_to_change():
    assert parse_address("127.0.0.1:47100") == ("127.0.0.1", 47100)
    for bad in ("47100", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:70000"):
        with pytest.raises(ValueError, match="--listen must look like 127.0.0.1:47100"):
            parse_address(bad, "--listen")


def test_a_served_switch_runs_its_own_timers_on_either_path(path):
    """The runner (UdpRunner for Python, NativeRunner's C loop for native) sweeps an idle partial
    to the PS at its deadline with no further traffic, and stops promptly."""
    worker, ps = open_socket(LOOPBACK), open_socket(LOOPBACK)
    ps.settimeout(5.0)
    with SwitchServer(SwitchConfig(pool=4, words=2, slot_timeout=0.05), LOOPBACK, LOOPBACK, path=path) as server:
        server.start()
        spec = JobSpec(job=3, workers=(Endpoint(*worker.getsockname()), Endpoint("127.0.0.1", 9)), window=2,
                       ps=Endpoint(*ps.getsockname()))  # fmt: skip
        base = server.register(spec)["slot_base"]
        header = Header(Kind.DATA, job=3, seq=1, rank=0, bitmap=1, slot=(base + 1) % 4, lane_bits=8)
        worker.sendto(header.pack(np.array([7, 9], dtype=np.uint32)), server.address)
        sent = time.monotonic()
        swept, source = ps.recvfrom(2048)
        assert time.monotonic() - sent >= 0.04 and source == server.address
        head, payload = parse(swept, 2)
        assert (head.kind, head.seq, head.bitmap, payload.tolist()) == (Kind.PARTIAL, 1, 1, [7, 9])
        assert server.counters()["swept"] == 1
        started = time.monotonic()
    assert time.monotonic() - started < 1.0
    worker.close()
    ps.close()
