"""The testbed's egress queues (docs/protocol.md, "Egress queues"): on a shaped link, an ina packet of a higher
priority leaves before a backlog of lower ones, a DATA of the lowest priority before a backlog of RESULT copies,
a RESULT flagged HOLD (atp: a step waits for it) before RESULT copies too, and with the queues taken away the
link is one FIFO again; the packets a backlog holds are read from tc, so that a round waits for the last one's.
Two network namespaces joined by a veth pair, shaped as Mininet's TCLink shapes it; needs root, ip and tc."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from ina.protocol.constants import Flag, Kind
from ina.testbed.network import fifo_commands, priority_queue_commands, queued_packets

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("tc") or not shutil.which("ip"),
                                reason="needs root, ip and tc (network namespaces and a shaped veth)")  # fmt: skip

LOW, HIGH = 100, 10
RECEIVE = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.9.0.2", 47101))
s.settimeout(3.0)
print("ready", flush=True)
order = []
try:
    while len(order) < int(sys.argv[1]):
        data = s.recv(2048)
        order.append(f"{data[2]}:{data[7]}:{data[3]}")
except socket.timeout:
    pass
print(" ".join(map(str, order)), flush=True)
"""
SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for packet in sys.argv[1:]:
    kind, priority, flags = map(int, packet.split(":"))
    s.sendto(bytes([0xA7, 1, kind, flags, 0, 1, 0, priority]) + bytes(392), ("10.9.0.2", 47101))
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
        run(a, f"ip link add qa{tag} type veth peer name qb{tag} netns {b} && ip addr add 10.9.0.1/24 dev qa{tag} && ip link set qa{tag} up")
        run(b, f"ip addr add 10.9.0.2/24 dev qb{tag} && ip link set qb{tag} up")
        run(a, f"tc qdisc add dev qa{tag} root handle 5:0 htb default 1 && tc class add dev qa{tag} parent 5:0 classid 5:1 htb rate 1mbit burst 15k")
        yield lambda line: run(a, line.replace("DEV", f"qa{tag}")), (a, b)
    finally:
        for name in (a, b):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def arrival_order(namespaces: tuple[str, str], low: str, high: str) -> list[str]:
    """The datagrams ("kind:priority:flags") in the order they arrive: LOW of `low` sent first, then HIGH of `high`."""
    a, b = namespaces
    receiver = subprocess.Popen(["ip", "netns", "exec", b, sys.executable, "-c", RECEIVE, str(LOW + HIGH)], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout.readline().strip() == "ready"
    subprocess.run(["ip", "netns", "exec", a, sys.executable, "-c", SEND, *[low] * LOW, *[high] * HIGH], check=True)
    order = receiver.communicate(timeout=30)[0].split()
    assert len(order) == LOW + HIGH, f"the link lost datagrams: {len(order)} of {LOW + HIGH} arrived"
    return order


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
