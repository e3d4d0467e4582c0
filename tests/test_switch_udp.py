"""ina.net.udp on loopback: batched I/O in every mode (mmsg + GSO/GRO, mmsg, plain) keeps
every datagram, its bytes, source and per-destination order; the runner serves a Node,
ticks it at its deadlines and stops cleanly."""

import select
import threading
import time

import pytest

from ina.net.node import Datagram
from ina.net.udp import MAX_PAYLOAD, MAX_SEGMENTS, BatchSocket, UdpRunner, _runs, _unsent, open_socket, parse_address

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


def test_gso_runs_group_per_destination_by_size_keeping_order():
    a, b = ("127.0.0.1", 1), ("127.0.0.1", 2)
    sizes = [10, 10, 10, 4, 10, 12, 12, 0, 0]
    datagrams = [Datagram(bytes([i]) * s, a) for i, s in enumerate(sizes)] + [Datagram(b"x", b), Datagram(bytes(10), a)]

    def shape(runs):
        return list(zip(runs.addresses, runs.count.tolist(), runs.size.tolist()))

    runs = _runs(datagrams, MAX_SEGMENTS)
    assert shape(runs) == [(a, 3, 10), (a, 1, 4), (a, 1, 10), (a, 2, 12), (a, 1, 0), (a, 1, 0), (a, 1, 10), (b, 1, 1)]
    assert runs.payload == b"".join(d.data for d in datagrams if d.addr == a) + b"x"
    assert runs.length.tolist() == [30, 4, 10, 24, 0, 0, 10, 1]
    assert shape(_runs([Datagram(bytes(8), a)] * 150, MAX_SEGMENTS)) == [(a, 64, 8), (a, 64, 8), (a, 22, 8)]
    assert shape(_runs([Datagram(bytes(30000), a)] * 3, MAX_SEGMENTS)) == [(a, 2, 30000), (a, 1, 30000)]
    assert shape(_runs([Datagram(bytes(8), a)] * 3, 1)) == [(a, 1, 8)] * 3
    assert [(d.data, d.addr) for d in _unsent(runs, 5)] == [(b"", a), (bytes(10), a), (b"x", b)]  # the GSO fallback


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
