"""DelayedNode: every datagram a node sends leaves `latency` seconds late, in order (ina switch --latency)."""

import pytest

from ina.net.delayed import DelayedNode
from ina.net.node import Datagram


class Echo:
    """Answers each datagram with itself; a timer at `due` that sends b"tick" once."""

    def __init__(self, due=None):
        self.due = due

    def receive(self, datagrams, now):
        return list(datagrams)

    def tick(self, now):
        self.due = None
        return [Datagram(b"tick", ("10.0.0.1", 1))]

    def next_deadline(self):
        return self.due


def packets(*payloads):
    return [Datagram(p, ("10.0.0.2", 2)) for p in payloads]


def test_what_a_node_sends_leaves_latency_later_in_the_order_sent():
    node = DelayedNode(Echo(), latency=0.5)
    assert node.receive(packets(b"a", b"b"), 1.0) == []
    assert node.next_deadline() == 1.5
    assert node.receive(packets(b"c"), 1.2) == []
    assert [d.data for d in node.tick(1.49)] == []
    assert [d.data for d in node.tick(1.5)] == [b"a", b"b"]
    assert node.next_deadline() == pytest.approx(1.7)
    assert [d.data for d in node.receive(packets(b"d"), 1.8)] == [b"c"]  # released as soon as the node is called
    assert [d.data for d in node.tick(2.3)] == [b"d"] and node.next_deadline() is None


def test_the_nodes_own_timers_run_on_time_and_their_packets_are_delayed_too():
    node = DelayedNode(Echo(due=3.0), latency=0.25)
    assert node.next_deadline() == 3.0
    assert node.tick(3.0) == [] and node.next_deadline() == 3.25
    assert [d.data for d in node.tick(3.25)] == [b"tick"]


def test_a_latency_must_be_positive():
    with pytest.raises(ValueError, match="positive latency"):
        DelayedNode(Echo(), latency=0.0)
