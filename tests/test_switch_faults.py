"""ina.net.faults: seeded drop/duplicate/reorder at the configured rates; reordering alone
never loses a datagram; FaultyNode puts a Node behind injectors."""

from collections import Counter

import pytest

from ina.net.faults import FaultInjector, FaultyNode
from ina.net.node import Datagram

ADDR = ("127.0.0.1", 9)


def stream(count: int, start: int = 0) -> list[Datagram]:
    return [Datagram(b"%d" % i, ADDR) for i in range(start, start + count)]


def within(observed: int, rate: float, trials: int) -> bool:
    sigma = (trials * rate * (1 - rate)) ** 0.5
    return abs(observed - rate * trials) <= 5 * sigma + 1


def test_fault_rates_are_as_configured():
    injector = FaultInjector(drop=0.1, duplicate=0.05, reorder=0.2, seed=3)
    out = []
    for start in range(0, 20000, 100):
        out += injector.apply(stream(100, start), now=start * 1e-6)
    out += injector.tick(1.0)
    s = injector.stats
    assert s.seen == 20000
    assert within(s.dropped, 0.1, 20000)
    assert within(s.duplicated, 0.05, 20000 - s.dropped)
    assert within(s.reordered, 0.2, 20000 - s.dropped)
    assert len(out) == 20000 - s.dropped + s.duplicated
    copies = Counter(d.data for d in out)
    assert sum(1 for n in copies.values() if n == 2) == s.duplicated


def test_reordering_alone_loses_nothing_and_releases_within_bounds():
    injector = FaultInjector(reorder=0.3, seed=5, max_hold=4, hold_time=0.01)
    sent = stream(5000)
    out = []
    for i, d in enumerate(sent):
        out += injector.apply([d], now=i * 1e-6)
        assert len(injector._held) <= 4 * 5  # nothing waits for more than max_hold later datagrams
    out += injector.tick(1.0)
    assert sorted(d.data for d in out) == sorted(d.data for d in sent)
    assert [d.data for d in out] != [d.data for d in sent]
    positions = {d.data: i for i, d in enumerate(out)}
    assert max(positions[d.data] - i for i, d in enumerate(sent)) <= 4 * 2  # bounded displacement
    assert injector.next_deadline() is None


def test_held_datagrams_come_out_after_hold_time_even_without_traffic():
    injector = FaultInjector(reorder=0.99, seed=1, hold_time=0.5)
    assert injector.apply(stream(1), now=10.0) == []
    assert injector.next_deadline() == 10.5
    assert injector.tick(10.4) == []
    assert [d.data for d in injector.tick(10.5)] == [b"0"]


def test_the_same_seed_gives_the_same_faults():
    runs = []
    for _ in range(2):
        injector = FaultInjector(drop=0.2, duplicate=0.2, reorder=0.2, seed=42)
        runs.append([d.data for d in injector.apply(stream(500), 0.0) + injector.tick(1.0)])
    assert runs[0] == runs[1]
    other = FaultInjector(drop=0.2, duplicate=0.2, reorder=0.2, seed=43)
    assert [d.data for d in other.apply(stream(500), 0.0) + other.tick(1.0)] != runs[0]


@pytest.mark.parametrize("rates", [dict(drop=1.0), dict(duplicate=-0.1), dict(reorder=2), dict(max_hold=0)])
def test_bad_rates_are_refused(rates):
    with pytest.raises(ValueError):
        FaultInjector(**rates)


class Echo:
    def __init__(self):
        self.seen = []

    def receive(self, datagrams, now):
        self.seen += [d.data for d in datagrams]
        return list(datagrams)

    def tick(self, now):
        return []

    def next_deadline(self):
        return None


def test_a_faulty_node_is_transparent_without_faults_and_delivers_held_input_on_tick():
    clean = FaultyNode(Echo())
    assert [d.data for d in clean.receive(stream(10), 0.0)] == [b"%d" % i for i in range(10)]
    node = Echo()
    faulty = FaultyNode(node, inbound=FaultInjector(reorder=0.99, seed=2, hold_time=0.1))
    assert faulty.receive(stream(1), 1.0) == []
    assert faulty.next_deadline() == pytest.approx(1.1)
    assert [d.data for d in faulty.tick(1.1)] == [b"0"] and node.seen == [b"0"]
