"""The simulator's timing, queueing, faults and determinism, checked with tiny nodes."""

from __future__ import annotations

import pytest

from ina.net.node import Address, Datagram
from ina.sim import Faults, Link, Network

A: Address = ("10.0.0.1", 1)
B: Address = ("10.0.0.2", 2)
C: Address = ("10.0.0.3", 3)


class Echo:
    """Sends every datagram back to where it came from."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, bytes]] = []

    def receive(self, datagrams, now):
        self.seen += [(now, d.data) for d in datagrams]
        return [Datagram(d.data, d.addr) for d in datagrams]

    def tick(self, now):
        return []

    def next_deadline(self):
        return None


class Sink(Echo):
    """Records and answers nothing."""

    def receive(self, datagrams, now):
        super().receive(datagrams, now)
        return []


class Alarm(Sink):
    """Ticks at the times it is given, sending one packet to `peer` each time."""

    def __init__(self, times: list[float], peer: Address) -> None:
        super().__init__()
        self.times = sorted(times)
        self.peer = peer
        self.ticked: list[float] = []

    def tick(self, now):
        out = []
        while self.times and self.times[0] <= now:
            self.times.pop(0)
            self.ticked.append(now)
            out.append(Datagram(b"alarm", self.peer))
        return out

    def next_deadline(self):
        return self.times[0] if self.times else None


def send(net: Network, src: Address, dst: Address, payloads: list[bytes], at: float = 0.0) -> None:
    net.invoke(src, lambda now: [Datagram(p, dst) for p in payloads], at=at)


def test_ping_round_trip_is_serialization_plus_latency_on_both_links():
    net = Network()
    net.attach(A, Sink(), Link(bandwidth=1000.0, latency=0.010))
    net.attach(B, Echo(), Link(bandwidth=500.0, latency=0.001))
    send(net, A, B, [b"x" * 100])
    net.run(until=1.0)
    one_way = 100 / 1000 + 0.010 + 100 / 500 + 0.001
    assert net.node(B).seen[0][0] == pytest.approx(one_way)
    assert net.node(A).seen[0][0] == pytest.approx(2 * one_way)


def test_back_to_back_packets_queue_fifo_at_the_bottleneck():
    net = Network(frame_overhead=24)
    net.attach(A, Sink(), Link(bandwidth=1e6))
    net.attach(B, Sink(), Link(bandwidth=1e6))
    net.attach(C, Sink(), Link(bandwidth=1e5))
    send(net, A, C, [bytes([i]) * 76 for i in range(10)])
    send(net, B, C, [bytes([100 + i]) * 76 for i in range(10)])
    net.run(until=1.0)
    seen = net.node(C).seen
    assert len(seen) == 20
    # 20 packets of 100 wire bytes through C's 1e5 B/s downlink: the last leaves at about 20 ms.
    assert seen[-1][0] == pytest.approx(20 * 100 / 1e5 + 100 / 1e6)
    gaps = [b[0] - a[0] for a, b in zip(seen, seen[1:])]
    assert all(g == pytest.approx(100 / 1e5) for g in gaps)
    from_a = [d[0] for _, d in seen if d[0] < 100]
    assert from_a == list(range(10))  # FIFO within a flow
    stats = net.stats()
    assert stats[C]["down"]["packets"] == 20 and stats[C]["down"]["bytes"] == 2000
    assert stats[A]["up"]["bytes"] == 1000 and stats[C]["down"]["busy_s"] == pytest.approx(0.02)


def test_processing_time_serializes_a_nodes_work():
    net = Network()
    net.attach(A, Sink())
    net.attach(B, Echo(), processing=0.002)
    send(net, A, B, [b"a", b"b", b"c"])
    net.run(until=1.0)
    assert [t for t, _ in net.node(A).seen] == pytest.approx([0.002, 0.004, 0.006])


def test_timers_fire_at_their_deadlines():
    net = Network()
    net.attach(A, Alarm([0.5, 0.25, 0.75], B), Link(latency=0.01))
    net.attach(B, Sink())
    net.run(until=1.0)
    assert net.node(A).ticked == pytest.approx([0.25, 0.5, 0.75])
    assert [t for t, _ in net.node(B).seen] == pytest.approx([0.26, 0.51, 0.76])


def test_run_until_stops_when_the_predicate_holds_or_time_runs_out():
    net = Network()
    net.attach(A, Sink(), Link(latency=0.1))
    net.attach(B, Echo(), Link(latency=0.1))
    send(net, A, B, [b"ping"])
    assert net.run_until(lambda: bool(net.node(A).seen), timeout=1.0)
    assert net.now == pytest.approx(0.4)
    assert not net.run_until(lambda: len(net.node(A).seen) > 1, timeout=0.5)
    assert net.now == pytest.approx(0.9)


@pytest.mark.parametrize("rate", [0.01, 0.1, 0.3])
def test_drop_rate_matches_within_sampling_error(rate):
    net = Network(seed=7)
    net.attach(A, Sink(), Link(faults=Faults(drop=rate)))
    net.attach(B, Sink())
    count = 20_000
    send(net, A, B, [b"p"] * count)
    net.run(until=1.0)
    got = len(net.node(B).seen)
    sigma = (count * rate * (1 - rate)) ** 0.5
    assert abs((count - got) - count * rate) < 5 * sigma
    assert net.stats()[A]["up"]["dropped"] == count - got


def test_duplicates_and_reordering_happen_at_their_rates():
    net = Network(seed=3)
    net.attach(A, Sink(), Link(bandwidth=1e6, faults=Faults(duplicate=0.1, reorder=0.2, max_delay=0.01)))
    net.attach(B, Sink())
    count = 5000
    send(net, A, B, [i.to_bytes(4, "big") for i in range(count)])
    net.run(until=10.0)
    got = [int.from_bytes(d, "big") for _, d in net.node(B).seen]
    assert abs((len(got) - count) - 0.1 * count) < 5 * (count * 0.09) ** 0.5
    assert set(got) == set(range(count))
    inversions = sum(a > b for a, b in zip(got, got[1:]))
    assert inversions > 0.05 * count


def test_same_seed_same_history_other_seed_another():
    def history(seed: int) -> list[tuple[float, bytes]]:
        net = Network(seed=seed)
        net.attach(A, Sink(), Link(bandwidth=1e5, faults=Faults(drop=0.2, duplicate=0.2, reorder=0.2)))
        net.attach(B, Echo(), Link(bandwidth=2e5, latency=0.001, faults=Faults(drop=0.1, reorder=0.3)))
        send(net, A, B, [i.to_bytes(2, "big") for i in range(500)])
        net.run(until=5.0)
        return net.node(A).seen

    assert history(1) == history(1)
    assert history(1) != history(2)


def test_dead_hosts_unknown_addresses_and_forged_sources():
    net = Network()
    net.attach(A, Sink())
    net.attach(B, Echo())
    net.kill(B, at=0.5)
    send(net, A, B, [b"early"], at=0.1)
    send(net, A, B, [b"late"], at=0.6)
    send(net, A, C, [b"nowhere"], at=0.7)
    net.inject(Datagram(b"forged", B), source=("6.6.6.6", 666), at=0.2)
    net.run(until=1.0)
    assert [d for _, d in net.node(A).seen] == [b"early"]
    assert [d for _, d in net.node(B).seen] == [b"early", b"forged"]
    assert net.counters == {"to_dead_host": 1, "unroutable": 2}  # C, and the echo to the forger


def test_rules_lose_exactly_the_packets_they_match_once_per_send():
    net = Network()
    net.attach(A, Sink())
    net.attach(B, Echo(), Link(faults=Faults(duplicate=1.0)))
    seen = []

    def rule(datagram, source):
        seen.append((datagram.data, source, datagram.addr))
        return datagram.data == b"lose" and source == A

    net.drop_when(rule)
    send(net, A, B, [b"keep", b"lose"])
    net.run(until=1.0)
    assert [d for _, d in net.node(B).seen] == [b"keep"] * 2  # B's link duplicates what reaches it
    assert [d for _, d in net.node(A).seen] == [b"keep"] * 4  # both copies, echoed and duplicated again
    assert seen[:2] == [(b"keep", A, B), (b"lose", A, B)] and len(seen) == 4
    assert net.counters == {"dropped_by_rule": 1}


def test_coalescing_hands_over_what_arrives_within_the_window_as_one_batch():
    class Batches(Sink):
        def __init__(self) -> None:
            super().__init__()
            self.batches: list[tuple[float, int]] = []

        def receive(self, datagrams, now):
            self.batches.append((now, len(datagrams)))
            return super().receive(datagrams, now)

    net = Network()
    net.attach(A, Sink(), Link(bandwidth=1000.0))
    net.attach(B, Batches(), coalesce=0.0025, processing=0.001)
    send(net, A, B, [b"x"] * 5)  # one byte each: arrivals at 1, 2, 3, 4, 5 ms
    net.run(until=1.0)
    # 1 ms + 2.5 ms window holds arrivals 1..3; processing 3 x 1 ms; the next window opens at 4 ms.
    assert net.node(B).batches == [(pytest.approx(0.0065), 3), (pytest.approx(0.0085), 2)]
