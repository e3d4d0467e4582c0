"""BMv2 rigs for the P4 tests: veth ports this test creates, simple_switch_grpc on them, the
controller, and a raw socket on the far end of each veth to put frames on the wire and read them.

Tests that use it skip, saying why, without root, p4c, simple_switch_grpc or the 'p4' extra.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pytest

from ina.net.impair import SLOW_CLASS, egress_rules
from ina.p4 import toolchain
from ina.protocol import INA_PORT
from ina.switch import SwitchConfig

_PACKET_OUTGOING = 4


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (veth ports for BMv2)"
    if absent := toolchain.missing_modules("bmv2"):
        return f"needs the 'p4' extra (pip install -e '.[p4]'): {', '.join(absent)} missing"
    return toolchain.missing("p4c", "simple_switch_grpc")


needs_bmv2 = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


def run(*command: str, stdin: str | None = None) -> None:
    done = subprocess.run(command, input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


def interface_mac(name: str) -> str:
    with open(f"/sys/class/net/{name}/address") as f:
        return f.read().strip()


class VethPair:
    """A veth pair named after this test run, with IPv6 off so the kernel sends nothing on it."""

    def __init__(self, tag: str) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.switch_side, self.host_side = f"is{tag}{suffix}", f"ih{tag}{suffix}"
        run("ip", "link", "add", self.switch_side, "type", "veth", "peer", "name", self.host_side)
        for name in (self.switch_side, self.host_side):
            run("sysctl", "-q", "-w", f"net.ipv6.conf.{name}.disable_ipv6=1")
            run("ip", "link", "set", name, "up")

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.switch_side], capture_output=True)


class Wire:
    """A raw socket on the host side of a veth: frames in and out, as the switch port sees them."""

    def __init__(self, interface: str) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        self.sock.bind((interface, 0))

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def receive(self, timeout: float) -> bytes | None:
        """The next frame the switch sent on this port, or None after `timeout`."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                frame, address = self.sock.recvfrom(65535)
            except socket.timeout:
                return None
            if address[2] != _PACKET_OUTGOING:
                return frame
        return None

    def close(self) -> None:
        self.sock.close()


@dataclass(frozen=True)
class Udp:
    """A UDP datagram as read from a frame."""

    src: tuple[str, int]
    dst: tuple[str, int]
    payload: bytes


def frame(src: tuple[str, int], dst: tuple[str, int], payload: bytes, src_mac: str, dst_mac: str) -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    return bytes(Ether(src=src_mac, dst=dst_mac) / IP(src=src[0], dst=dst[0]) / UDP(sport=src[1], dport=dst[1]) / payload)


def udp_of(data: bytes) -> Udp | None:
    """The UDP datagram of an Ethernet/IPv4 frame, cut to its UDP length; None for anything else."""
    if len(data) < 42 or data[12:14] != b"\x08\x00" or data[23] != 17:
        return None
    ihl = (data[14] & 0x0F) * 4
    udp = 14 + ihl
    length = int.from_bytes(data[udp + 4 : udp + 6], "big")
    ip = lambda at: socket.inet_ntoa(data[at : at + 4])  # noqa: E731
    port = lambda at: int.from_bytes(data[at : at + 2], "big")  # noqa: E731
    return Udp((ip(26), port(udp)), (ip(30), port(udp + 2)), data[udp + 8 : udp + length])


class Netns:
    """A network namespace this test creates, with its loopback up; deleted on close."""

    def __init__(self, tag: str) -> None:
        self.name = f"ina{tag}{uuid.uuid4().hex[:6]}"
        run("ip", "netns", "add", self.name)
        self.run("ip", "link", "set", "lo", "up")

    def run(self, *command: str) -> None:
        run("ip", "netns", "exec", self.name, *command)

    def command(self, *command: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *command]

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


@dataclass(frozen=True)
class Link:
    """A host's veth by names alone (its namespace, its side, the switch's side in the root namespace),
    so that the process on the host (tests/p4_hosts.py) can impair it as well as the test."""

    netns: str
    host_side: str
    switch_side: str
    root: str = ""
    """The network namespace of the switch's side, as a file (/proc/PID/ns/net) for a process in another
    one to enter; "" for this process's own."""

    def _ends(self) -> tuple[tuple[list[str], str], ...]:
        root = ["nsenter", f"--net={self.root}"] if self.root else []
        return (["ip", "netns", "exec", self.netns], self.host_side), (root, self.switch_side)

    def impair(self, loss: float, duplicate: float, reorder: float) -> None:
        """Drop, duplicate and delay (so reorder) the given fractions of the packets each way on the link.

        This kernel has no netem, so nftables does it: an egress rule drops or duplicates at random,
        and marks some packets for a slow HTB class, behind which they arrive late."""
        for prefix, device in self._ends():
            run(*prefix, "nft", "-f", "-", stdin=egress_rules("ina_impair", [device], loss, duplicate, reorder))
            run(*prefix, "tc", "qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "1", "r2q", "100000")
            run(*prefix, "tc", "class", "add", "dev", device, "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit")
            run(*prefix, "tc", "class", "add", "dev", device, "parent", "1:", "classid", SLOW_CLASS, "htb", "rate", "2mbit")

    def repair(self) -> None:
        """Undo `impair` (nothing to undo is no error)."""
        for prefix, device in self._ends():
            subprocess.run([*prefix, "nft", "delete", "table", "netdev", "ina_impair"], capture_output=True)
            subprocess.run([*prefix, "tc", "qdisc", "del", "dev", device, "root"], capture_output=True)


class Host:
    """A namespace on one veth: `address`/24 on its side, the other side left in the root namespace
    (a BMv2 port, or the controller's management link)."""

    def __init__(self, tag: str, address: str, netns: Netns | None = None) -> None:
        self.netns = netns or Netns(tag)
        self.veth = VethPair(tag)
        self.address = address
        run("ip", "link", "set", self.veth.host_side, "netns", self.netns.name)
        self.netns.run("ip", "addr", "add", f"{address}/24", "dev", self.veth.host_side)
        self.netns.run("ip", "link", "set", self.veth.host_side, "up")
        # veth leaves checksums to the receiver's NIC; BMv2 forwards frames as they are, so the
        # host must fill them in itself, or its peers drop its TCP and UDP
        self.netns.run("ethtool", "-K", self.veth.host_side, "tx", "off")
        self.mac = self.read_mac()
        self.link = Link(self.netns.name, self.veth.host_side, self.veth.switch_side)

    def read_mac(self) -> str:
        done = subprocess.run(self.netns.command("cat", f"/sys/class/net/{self.veth.host_side}/address"),
                              check=True, capture_output=True, text=True)  # fmt: skip
        return done.stdout.strip()

    def neighbour(self, ip: str, mac: str) -> None:
        """A static ARP entry: the switch floods nothing it need not."""
        self.netns.run("ip", "neigh", "replace", ip, "lladdr", mac, "dev", self.veth.host_side, "nud", "permanent")

    def close(self) -> None:
        self.veth.close()
        self.netns.close()


# -- one BMv2 on one veth, every host at HOST behind it: the switch tests' rig ------------------------

SWITCH_MAC = "02:00:00:00:00:01"
HOST = "127.0.0.1"
"""The switch's address and every host's (workers, PSes, other switches), each at a port of its own."""
REPLAY_POOL, REPLAY_WORDS = 8, 4
"""The P and K of a Replay (below)."""


def _wired(tag: str):
    veth = VethPair(tag)
    wire = Wire(veth.host_side)
    yield veth, wire
    wire.close()
    veth.close()


@pytest.fixture(scope="module")
def port():
    yield from _wired("v")


@pytest.fixture(scope="module")
def far_port():
    """A second veth and its wire: a port beyond the switch's first (switch_for's `beyond`)."""
    yield from _wired("f")


@pytest.fixture
def switch_for(port):
    from ina.p4.bmv2 import Bmv2Process
    from ina.p4.bmv2_device import Bmv2Device
    from ina.p4.build import build
    from ina.p4.controller import P4Switch
    from ina.p4.entries import Route
    from ina.p4.registers import Bmv2Thrift
    from ina.p4.runtime import P4RuntimeClient

    veth, wire = port
    parts = []

    def start(config: SwitchConfig, word_group: int = 0, beyond: tuple[tuple[VethPair, str], ...] = ()) -> P4Switch:
        """BMv2 with the program for `config`, its words stepped `word_group` a pass (0: all at once); `beyond`: further
        ports 2, 3, ... as (veth, address), each with the route to its address out of it."""
        bmv2 = Bmv2Process({1: veth.switch_side} | {number: v.switch_side for number, (v, _) in enumerate(beyond, start=2)})
        parts.append(bmv2)
        runtime = P4RuntimeClient(bmv2.grpc_address)
        parts.append(runtime)
        registers = Bmv2Thrift("127.0.0.1", bmv2.thrift_port)
        parts.append(registers)
        program = build(config.words, config.pool, word_group=word_group)
        routes = [Route(HOST, interface_mac(veth.host_side), 1)]
        routes += [Route(ip, interface_mac(v.host_side), number) for number, (v, ip) in enumerate(beyond, start=2)]
        return P4Switch(config, Bmv2Device(runtime, registers), HOST, SWITCH_MAC, routes, program)

    yield start
    for part in reversed(parts):
        part.close()


def settle(switch, received: int, timeout: float = 5.0) -> dict[str, int]:
    """Wait until the switch has decided every packet it received (recirculated passes included)."""
    from ina.p4.device import OUTCOMES

    deadline = time.monotonic() + timeout
    while True:
        counts = switch.counters()
        if counts["rx_packets"] == received and sum(counts[name] for name in OUTCOMES) == received:
            return counts
        assert time.monotonic() < deadline, f"the switch did not decide its {received} packets: {counts}"
        time.sleep(0.01)


def collect(wire: Wire, count: int) -> list[dict[str, str]]:
    """The frames the switch sends now: `count` of them, and none after a short quiet time."""
    got = []
    while (data := wire.receive(3.0 if len(got) < count else 0.05)) is not None:
        udp = udp_of(data)
        if udp is not None:
            got.append({"dst": "%s:%d" % udp.dst, "hex": udp.payload.hex()})
    return got


def by_destination(packets: list[dict[str, str]]) -> dict[str, list[str]]:
    grouped = defaultdict(list)
    for packet in packets:
        grouped[packet["dst"]].append(packet["hex"])
    return dict(grouped)


def logical(slots: list[dict]) -> list[dict]:
    """What a slot means: its redirect, and its partial (key, priority, bitmap, sums) if it holds one.
    (A free slot's old sums are left in the registers by both switches, differently.)"""
    meaning = []
    for slot in slots:
        partial = ("key", "prio", "bitmap", "value") if slot["key"] else ()
        meaning.append({name: slot[name] for name in ("slot", "redirect", *partial)})
    return meaning


# -- BMv2 beside the software switch, packet by packet: the scenario tests' rig ------------------------


@dataclass
class Replay:
    """BMv2 and the software switch (the reference, `rig`: a switch_support.Rig) with the same jobs, fed the same
    packets: after each, the same packets out (bytes and destinations), the same counters and the same slots."""

    switch: Any
    rig: Any
    wire: Wire
    host_mac: str
    received: int = 0

    def register(self, spec: Any) -> dict:
        answer = self.switch.register(spec)
        assert self.rig.register(spec) == answer["slot_base"]
        return answer

    def send(self, *datagrams: Any) -> list[tuple[tuple[str, int], bytes]]:
        """What BMv2 sends for `datagrams`, one at a time, which must be what the reference sends."""
        sent = []
        for datagram in datagrams:
            expected = self.rig.core.receive([datagram], 0.0)
            self.wire.send(frame(datagram.addr, (HOST, INA_PORT), datagram.data, self.host_mac, SWITCH_MAC))
            self.received += 1
            settle(self.switch, self.received)
            sent += self._compare(expected)
        return sent

    def forwarded(self, sent: bytes, far: Wire) -> None:
        """A frame that is not the switch's own (docs/protocol.md, section 2) leaves by its route at `far`, byte for
        byte, and nothing else leaves; the reference, which it never reaches, is fed nothing: the same counters and slots."""
        self.wire.send(sent)
        assert far.receive(3.0) == sent
        self._compare([])

    def sweep(self) -> list[tuple[tuple[str, int], bytes]]:
        """The idle sweep once every slot has sat still for slot_timeout: the reference's, and the controller's
        SWEEPs, which it sends for what two ticks that far apart saw unchanged."""
        timeout = self.rig.slot_timeout
        expected = self.rig.core.tick(timeout)
        self.switch.tick(0.0)
        self.switch.tick(timeout)
        return self._compare(expected)

    def _compare(self, expected: list) -> list[tuple[tuple[str, int], bytes]]:
        got = collect(self.wire, len(expected))
        assert by_destination(got) == by_destination([{"dst": "%s:%d" % d.addr, "hex": d.data.hex()} for d in expected])
        assert self.switch.counters() == self.rig.core.counters()
        core = self.rig.core
        held = [{"slot": s} | core.slots.describe(s) for s in range(self.rig.pool) if core.slots.key[s] or core.slots.redirect[s]]
        assert logical(self.switch.slots()) == logical(held)
        return [(d.addr, d.data) for d in expected]


@pytest.fixture
def replay(port, switch_for, word_group):
    """start(*specs, policy=...): a Replay of POOL slots of WORDS words (its module's word_group a pass) with `specs` registered."""
    from switch_support import Rig

    def start(*specs: Any, policy: str = "esa") -> Replay:
        veth, wire = port
        switch = switch_for(SwitchConfig(REPLAY_POOL, REPLAY_WORDS, policy), word_group)
        pair = Replay(switch, Rig(pool=REPLAY_POOL, words=REPLAY_WORDS, policy=policy), wire, interface_mac(veth.host_side))
        for spec in specs:
            pair.register(spec)
        return pair

    return start
