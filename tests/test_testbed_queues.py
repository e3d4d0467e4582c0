"""The testbed's egress queues (docs/protocol.md, "Egress queues"): on a shaped link, an ina packet of a higher
priority leaves before a backlog of lower ones, a DATA of the lowest priority before a backlog of RESULT copies,
a RESULT flagged HOLD (atp: a step waits for it) before RESULT copies too, and with the queues taken away the
link is one FIFO again; the packets a backlog holds are read from tc, so that a round waits for the last one's.
A reordering link's marked packets go to its slow class, with the priority queues or without, and leave after
the later packets queued behind them; on an unshaped link too they pass through it, and none is lost.
Two network namespaces joined by a veth pair, shaped as Mininet's TCLink shapes it; needs root, ip and tc (and
nft for the reordering)."""

from __future__ import annotations

import bisect
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from ina.net.impair import chain_name, egress_rules, rule_counters
from ina.protocol.constants import Flag, Kind
from ina.testbed.network import SLOW_CLASS, fifo_commands, priority_queue_commands, queued_packets, slow_class_commands, slow_class_sent

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("tc") or not shutil.which("ip"),
                                reason="needs root, ip and tc (network namespaces and a shaped veth)")  # fmt: skip

LOW, HIGH = 100, 10
RECEIVE = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 1 << 22)  # SO_RCVBUFFORCE: an unshaped link delivers faster than a busy machine reads
s.bind(("10.9.0.2", 47101))
s.settimeout(3.0)
print("ready", flush=True)
order, sequence = [], []
try:
    while len(order) < int(sys.argv[1]):
        data = s.recv(2048)
        order.append(f"{data[2]}:{data[7]}:{data[3]}")
        sequence.append(str(int.from_bytes(data[8:10], "big")))
except socket.timeout:
    pass
print(" ".join(order), flush=True)
print(" ".join(sequence), flush=True)
"""
SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for number, packet in enumerate(sys.argv[1:]):
    kind, priority, flags = map(int, packet.split(":"))
    s.sendto(bytes([0xA7, 1, kind, flags, 0, 1, 0, priority]) + number.to_bytes(2, "big") + bytes(390), ("10.9.0.2", 47101))
"""
DATA, RESULT, HOLD = int(Kind.DATA), int(Kind.RESULT), int(Flag.HOLD)


@pytest.fixture
def link():
    """Namespaces `a` (10.9.0.1, the shaped end) and `b` (10.9.0.2); yields a function running a shell line in `a`."""
    tag = uuid.uuid4().hex[:6]
    a, b = f"inaqa{tag}", f"inaqb{tag}"

    def run(namespace: str, line: str) -> str:
        return subprocess.run(["ip", "netns", "exec", namespace, "sh", "-c", line], check=True, capture_output=True, text=True).stdout

    try:
        for name in (a, b):
            subprocess.run(["ip", "netns", "add", name], check=True)
            run(name, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")  # no packets of its own
        run(a, f"ip link add qa{tag} type veth peer name qb{tag} netns {b} && ip addr add 10.9.0.1/24 dev qa{tag} && ip link set qa{tag} up")
        run(b, f"ip addr add 10.9.0.2/24 dev qb{tag} && ip link set qb{tag} up")
        run(a, f"tc qdisc add dev qa{tag} root handle 5:0 htb default 1 && tc class add dev qa{tag} parent 5:0 classid 5:1 htb rate 1mbit burst 15k")
        yield lambda line: run(a, line.replace("DEV", f"qa{tag}")), (a, b)
    finally:
        for name in (a, b):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def arrival_order(namespaces: tuple[str, str], low: str, high: str) -> list[str]:
    """The datagrams ("kind:priority:flags") in the order they arrive: LOW of `low` sent first, then HIGH of `high`."""
    return arrivals(namespaces, [low] * LOW + [high] * HIGH)[0]


def arrivals(namespaces: tuple[str, str], packets: list[str]) -> tuple[list[str], list[int]]:
    """Send `packets` ("kind:priority:flags", each numbered in order) from `a` to `b`: what arrived, in arrival order,
    and the numbers it carried; every one must arrive."""
    a, b = namespaces
    receiver = subprocess.Popen(["ip", "netns", "exec", b, sys.executable, "-c", RECEIVE, str(len(packets))], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout.readline().strip() == "ready"
    subprocess.run(["ip", "netns", "exec", a, sys.executable, "-c", SEND, *packets], check=True)
    order, sequence = receiver.communicate(timeout=30)[0].splitlines()
    assert len(order.split()) == len(packets), f"the link lost datagrams: {len(order.split())} of {len(packets)} arrived"
    return order.split(), [int(number) for number in sequence.split()]


@pytest.mark.parametrize("low, high", [(f"{DATA}:0:0", f"{DATA}:60:0"), (f"{RESULT}:0:0", f"{DATA}:0:0"),
                                      (f"{RESULT}:0:0", f"{RESULT}:0:{HOLD}")],
                         ids=["a DATA of priority 60 passes DATA of 0", "a DATA of priority 0 passes RESULT copies",
                              "a held RESULT (atp) passes RESULT copies"])  # fmt: skip
def test_the_later_packets_leave_before_a_backlog_and_without_the_queues_wait_behind_it(link, low, high):
    shell, namespaces = link
    shell(priority_queue_commands("DEV", 1))
    order = arrival_order(namespaces, low, high)
    last_high = max(i for i, p in enumerate(order) if p == high)
    assert last_high < LOW // 2, f"the later datagrams waited behind the backlog: arrival order {order}"
    shell(fifo_commands("DEV"))
    assert "5:10" not in shell("tc class show dev DEV")
    order = arrival_order(namespaces, low, high)
    assert order == [low] * LOW + [high] * HIGH, f"one FIFO again keeps the sending order: {order}"


@pytest.mark.parametrize("queues", ["priority", "fifo"])
def test_a_backlog_is_counted_until_the_link_has_sent_it(link, queues):
    shell, (a, _) = link
    if queues == "priority":
        shell(priority_queue_commands("DEV", 1))
    assert queued_packets(shell("tc -s qdisc show dev DEV")) == 0
    # 200 datagrams of 400 bytes: 0.7 s at 1 Mbit/s; nobody listens at the far end, which the link does not know.
    subprocess.run(["ip", "netns", "exec", a, sys.executable, "-c", SEND, *[f"{RESULT}:0:0"] * 200], check=True)
    backlog = queued_packets(shell("tc -s qdisc show dev DEV"))
    assert 50 < backlog <= 200, shell("tc -s qdisc show dev DEV")
    deadline = time.monotonic() + 10
    while queued_packets(shell("tc -s qdisc show dev DEV")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert queued_packets(shell("tc -s qdisc show dev DEV")) == 0, "the link never sent its backlog"


REORDERED, MARKED = 200, 0.2


def reordering(shell, mbit: float) -> None:
    """Give the link's end DEV the testbed's slow class and mark MARKED of its packets for it, as the testbed does
    (ina.testbed.network.Network._impair)."""
    shell(slow_class_commands("DEV", mbit))
    shell(f"nft -f - <<'EOF'\n{egress_rules('ina_test_reorder', ['DEV'], loss=0.0, reorder=MARKED, slow_class=SLOW_CLASS)}EOF")


def marked_and_slow(shell) -> tuple[int, int]:
    """The packets the rule marked (nft's counter) and those the slow class sent (tc's)."""
    device = shell("echo DEV").strip()
    marked = rule_counters(shell("nft list ruleset netdev"), {chain_name(device): device}).get("priority", {})
    return sum(marked.values()), slow_class_sent(shell(f"tc -s class show dev DEV classid {SLOW_CLASS}"))


def displaced(sequence: list[int]) -> int:
    """How many packets arrived out of their sending order: all but the longest run that arrived in order."""
    tails: list[int] = []
    for number in sequence:
        at = bisect.bisect_left(tails, number)
        tails[at : at + 1] = [number]
    return len(sequence) - len(tails)


def held_back(sequence: list[int], places: int = 10) -> int:
    """How many packets arrived at least `places` places later than they were sent: after later ones."""
    return sum(position - number >= places for position, number in enumerate(sequence))


@pytest.mark.skipif(not shutil.which("nft"), reason="needs nft (the reorder rule)")
@pytest.mark.parametrize("queues", ["priority", "fifo"])
def test_marked_packets_leave_after_the_later_packets_queued_behind_them(link, queues):
    """The packets are DATA of priority 0: with the priority queues, queue 1's, above the slow class; without them, the
    one FIFO's. HTB takes a marked packet's priority as its class before the filters, so each went to the slow class,
    which sends only when the others are empty: it arrives after the backlog sent after it. Not every one: those
    marked before the backlog built up (or while a busy machine's sender paused) or after the last unmarked packet
    are not passed, and the slow class's first may go at once on its own rate's tokens; nothing else is out of order."""
    shell, namespaces = link
    reordering(shell, 1)
    shell(priority_queue_commands("DEV", 1) if queues == "priority" else fifo_commands("DEV", 1))  # Network.prioritize
    order, sequence = arrivals(namespaces, [f"{DATA}:0:0"] * REORDERED)
    marked, slow = marked_and_slow(shell)
    assert slow == marked >= 20, f"the slow class sent {slow} of the {marked} marked packets"
    assert held_back(sequence) >= marked // 2 and displaced(sequence) <= marked, f"{marked} marked, arrival order {sequence}"
    assert queued_packets(shell("tc -s qdisc show dev DEV")) == 0


@pytest.mark.skipif(not shutil.which("nft"), reason="needs nft (the reorder rule)")
def test_an_unshaped_link_gets_the_slow_class_under_a_fast_htb_and_loses_nothing(link):
    shell, namespaces = link
    shell("tc qdisc del dev DEV root")  # an unshaped link: TCLink leaves the veth without a qdisc
    reordering(shell, 0)
    assert "5:1 root rate 10Gbit" in shell("tc class show dev DEV")
    order, sequence = arrivals(namespaces, [f"{DATA}:0:0"] * REORDERED)
    marked, slow = marked_and_slow(shell)
    assert slow == marked >= 20 and sorted(sequence) == list(range(REORDERED))
