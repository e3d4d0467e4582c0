"""The discrete-event loop: hosts (Nodes at addresses) on a star of links (see ina.sim.link).

Deterministic for a seed: events run in (time, order of scheduling) order and every link
direction draws its faults from its own seeded stream, so adding a host does not change
another link's faults.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ina.net.node import Address, Datagram, Node
from ina.sim.link import Link, Port

Action = Callable[[float], Iterable[Datagram] | None]
Rule = Callable[[Datagram, Address], bool]


@dataclass(slots=True, eq=False)
class Host:
    """A node at an address, its link's two directions and its timer."""

    addr: Address
    node: Node
    up: Port
    down: Port
    processing: float
    coalesce: float
    inbox: list[Datagram] = field(default_factory=list)
    alive: bool = True
    busy_until: float = 0.0
    timer_at: float | None = None
    timer_token: int = 0
    received: int = 0
    sent: int = 0


class Network:
    """Drives `Node`s: delivers their datagrams over links and runs their timers at their deadlines.

    `frame_overhead` bytes are added to every datagram on the wire (Ethernet, IP and UDP
    headers, preamble and gap: 66 for real Ethernet), so bandwidth math matches a NIC's.
    Drive nodes from outside only through `invoke`, so the network sees their new deadlines.
    """

    def __init__(self, seed: int = 0, frame_overhead: int = 0) -> None:
        self.seed = seed
        self.frame_overhead = frame_overhead
        self.now = 0.0
        self.counters: Counter[str] = Counter()
        self._hosts: dict[Address, Host] = {}
        self._events: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._order = 0
        self._rules: list[Rule] = []

    # ----------------------------------------------------------------- building

    def attach(
        self, addr: Address, node: Node, link: Link = Link(), *, processing: float = 0.0, coalesce: float = 0.0
    ) -> None:
        """Put `node` at `addr` behind `link`.

        It takes `processing` seconds per received packet, one batch at a time. With `coalesce`
        > 0 it receives in batches, as a poll-mode or interrupt-coalescing NIC delivers them:
        what arrives within `coalesce` seconds of a batch's first packet is handed over with it.
        Batches are how vectorized nodes (the switch, the PS) run fast in long simulations.
        """
        if addr in self._hosts:
            raise ValueError(f"{addr} is already attached")
        if processing < 0 or coalesce < 0:
            raise ValueError(f"processing and coalesce must be >= 0, got {processing}, {coalesce}")
        ports = [Port(link, random.Random(f"{self.seed}:{addr[0]}:{addr[1]}:{way}")) for way in ("up", "down")]
        host = Host(addr, node, ports[0], ports[1], processing, coalesce)
        self._hosts[addr] = host
        self._resync(host)

    def node(self, addr: Address) -> Node:
        return self._hosts[addr].node

    def kill(self, addr: Address, at: float | None = None) -> None:
        """The host dies at `at` (default now): it drops what reaches it and runs no more timers."""
        host = self._hosts[addr]

        def die() -> None:
            host.alive = False
            host.timer_token += 1

        self._schedule(self.now if at is None else at, die)

    def invoke(self, addr: Address, action: Action, at: float | None = None) -> None:
        """Call `action(now)` at `at` (default now) as host `addr`: what it returns is sent from there.

        This is how a test or a workload drives a node from outside, e.g. `engine.submit`.
        """
        host = self._hosts[addr]

        def call() -> None:
            if host.alive:
                self._emit(host, action(self.now) or ())

        self._schedule(self.now if at is None else at, call)

    def inject(self, datagram: Datagram, source: Address, at: float | None = None) -> None:
        """Send raw bytes to `datagram.addr` as if from `source` (attached or not), e.g. forged packets."""

        def send() -> None:
            host = self._hosts.get(source)
            if host is None:
                self._to_fabric(source, datagram, [self.now])
            else:
                self._send(host, datagram)

        self._schedule(self.now if at is None else at, send)

    def drop_when(self, rule: Rule) -> None:
        """From now on, lose every datagram sent for which `rule(datagram, source)` holds.

        Targeted loss: a test loses exactly the packets its scenario needs (say, one RESULT
        and the PS's copy of it), which random faults reach only by chance. The rule sees
        each datagram once, as sent (`datagram.addr` is its destination), and may keep state.
        """
        self._rules.append(rule)

    # ----------------------------------------------------------------- running

    def run(self, until: float) -> None:
        """Process every event up to simulated time `until`."""
        events = self._events
        while events and events[0][0] <= until:
            self._step()
        self.now = max(self.now, until)

    def run_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Run until `predicate()` holds (checked after every event) or `timeout` simulated seconds pass."""
        deadline = self.now + timeout
        events = self._events
        while not predicate():
            if not events or events[0][0] > deadline:
                self.now = max(self.now, deadline)
                return False
            self._step()
        return True

    def stats(self) -> dict[Address, dict[str, Any]]:
        """Per host: packets and bytes on its uplink and downlink, drops and copies, packets handled."""
        return {
            addr: {"up": h.up.stats(), "down": h.down.stats(), "received": h.received, "sent": h.sent}
            for addr, h in self._hosts.items()
        }

    # ----------------------------------------------------------------- internals

    def _schedule(self, time: float, fn: Callable[..., None], *args: Any) -> None:
        self._order += 1
        heapq.heappush(self._events, (max(time, self.now), self._order, fn, args))

    def _step(self) -> None:
        time, _, fn, args = heapq.heappop(self._events)
        self.now = time
        fn(*args)

    def _emit(self, host: Host, datagrams: Iterable[Datagram]) -> None:
        for datagram in datagrams:
            self._send(host, datagram)
        self._resync(host)

    def _send(self, host: Host, datagram: Datagram) -> None:
        host.sent += 1
        arrivals = host.up.transmit(len(datagram.data) + self.frame_overhead, self.now)
        self._to_fabric(host.addr, datagram, arrivals)

    def _to_fabric(self, source: Address, datagram: Datagram, arrivals: list[float]) -> None:
        if any(rule(datagram, source) for rule in self._rules):
            self.counters["dropped_by_rule"] += 1
            return
        delivered = Datagram(datagram.data, source)
        for time in arrivals:
            self._schedule(time, self._arrive, datagram.addr, delivered)

    def _arrive(self, destination: Address, datagram: Datagram) -> None:
        """The packet reaches the fabric port of `destination`: queue it on the downlink."""
        host = self._hosts.get(destination)
        if host is None:
            self.counters["unroutable"] += 1
            return
        for time in host.down.transmit(len(datagram.data) + self.frame_overhead, self.now):
            self._schedule(time, self._deliver, host, datagram)

    def _deliver(self, host: Host, datagram: Datagram) -> None:
        if not host.alive:
            self.counters["to_dead_host"] += 1
        elif not host.coalesce:
            self._start(host, [datagram])
        else:
            host.inbox.append(datagram)
            if len(host.inbox) == 1:
                self._schedule(self.now + host.coalesce, self._drain, host)

    def _drain(self, host: Host) -> None:
        batch, host.inbox = host.inbox, []
        self._start(host, batch)

    def _start(self, host: Host, batch: list[Datagram]) -> None:
        """The node works on a batch after the ones before it, `processing` seconds per packet."""
        if host.processing:
            host.busy_until = max(self.now, host.busy_until) + host.processing * len(batch)
            self._schedule(host.busy_until, self._process, host, batch)
        else:
            self._process(host, batch)

    def _process(self, host: Host, batch: list[Datagram]) -> None:
        if host.alive:
            host.received += len(batch)
            self._emit(host, host.node.receive(batch, self.now))

    def _resync(self, host: Host) -> None:
        """Schedule the host's timer at its node's next deadline, if that changed."""
        if not host.alive:
            return
        due = host.node.next_deadline()
        if due == host.timer_at:
            return
        host.timer_at = due
        host.timer_token += 1
        if due is not None:
            self._schedule(due, self._fire, host, host.timer_token)

    def _fire(self, host: Host, token: int) -> None:
        if token == host.timer_token and host.alive:
            host.timer_at = None
            self._emit(host, host.node.tick(self.now))
