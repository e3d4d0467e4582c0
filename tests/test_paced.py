"""PacedNode: a node slowed to a packet rate (ina switch --max-pps), on a clock the test drives."""

import pytest

from ina.net.node import Datagram
from ina.net.paced import PacedNode


class Echo:
    """Answers each datagram with itself; one timer at 7.0."""

    def receive(self, datagrams, now):
        return list(datagrams)

    def tick(self, now):
        return [Datagram(b"tick", ("10.0.0.1", 1))]

    def next_deadline(self):
        return 7.0


class Clock:
    """Time that moves only when the node sleeps or the test says."""

    def __init__(self):
        self.now, self.slept = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def batch(n):
    return [Datagram(bytes([i]), ("10.0.0.2", 2)) for i in range(n)]


def paced(rate):
    clock = Clock()
    return PacedNode(Echo(), rate, clock=clock, sleep=clock.sleep), clock


def test_a_batch_leaves_after_its_service_time_and_keeps_its_outputs():
    node, clock = paced(100.0)
    assert node.receive(batch(10), 0.0) == batch(10)
    assert clock.slept == [pytest.approx(0.1)]
    node.receive(batch(5), clock.now)
    assert clock.slept[1] == pytest.approx(0.05) and clock.now == pytest.approx(0.15)


def test_time_the_inner_node_takes_counts_as_service():
    clock = Clock()

    class Slow(Echo):
        def receive(self, datagrams, now):
            clock.now += 0.03
            return super().receive(datagrams, now)

    PacedNode(Slow(), 100.0, clock=clock, sleep=clock.sleep).receive(batch(10), 0.0)
    assert clock.slept == [pytest.approx(0.07)] and clock.now == pytest.approx(0.1)


def test_idle_time_earns_no_credit():
    node, clock = paced(100.0)
    node.receive(batch(10), 0.0)
    clock.now += 5.0
    node.receive(batch(2), clock.now)
    assert clock.slept[-1] == pytest.approx(0.02)


def test_a_backlog_is_served_at_the_rate_over_many_batches():
    node, clock = paced(1000.0)
    for _ in range(50):
        node.receive(batch(20), clock.now)
    assert clock.now == pytest.approx(1.0)


def test_timers_are_the_inner_nodes_and_not_paced():
    node, clock = paced(10.0)
    assert node.next_deadline() == 7.0
    assert node.tick(7.0) == [Datagram(b"tick", ("10.0.0.1", 1))] and clock.slept == []


@pytest.mark.parametrize("rate", [0.0, -5.0])
def test_a_rate_that_is_not_positive_is_refused(rate):
    with pytest.raises(ValueError, match="positive packet rate"):
        PacedNode(Echo(), rate)
