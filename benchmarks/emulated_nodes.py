"""Emulated cluster nodes for benchmarks: one network namespace per node, one shaped link each.

A hub namespace holds a bridge (the "network", where the switch, the PS and the rendezvous store
listen) and one veth port per node; the far end of each veth is the node's ``eth0``, in the node's
own namespace, where all its ranks run. Each link is shaped both ways with a token bucket
(``tc tbf``), so what one node sends or receives shares that node's link, as on a NIC. Ranks of a
node reach each other on their own namespace, off the link, as over NVLink. Everything is made in
namespaces named after this run (never in the root namespace) and removed on close. Needs root.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

_CLONE_NEWNET = 0x40000000
_SUBNET = "10.77.0"
HUB_ADDRESS = f"{_SUBNET}.254"
NODE_INTERFACE = "eth0"


def why_not() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not found (iproute2)" if missing else None


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


def enter(namespace: str) -> None:
    """Move the calling thread (and the threads and processes it starts later) into ``namespace``."""
    fd = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
    try:
        _setns(fd, namespace)
    finally:
        os.close(fd)


def _setns(fd: int, what: str) -> None:
    if ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"setns into {what}")


def sent_bytes(interface: str = NODE_INTERFACE) -> int:
    """Bytes ``interface`` of the caller's namespace has transmitted (/proc/net/dev follows the namespace)."""
    with open("/proc/net/dev") as table:
        for line in table:
            name, _, counters = line.partition(":")
            if name.strip() == interface:
                return int(counters.split()[8])
    raise LookupError(f"no interface {interface} in this network namespace")


class EmulatedNodes:
    """``nodes`` namespaces on a hub, each linked at ``mbit`` Mbit/s each way; addresses 10.77.0.1, .2, ..."""

    def __init__(self, nodes: int, mbit: float) -> None:
        tag = uuid.uuid4().hex[:6]
        self.hub = f"inahub{tag}"
        self.nodes = [f"inanode{n}{tag}" for n in range(nodes)]
        self._made: list[str] = []
        try:
            self._build(mbit)
        except BaseException:
            self.close()
            raise

    def _build(self, mbit: float) -> None:
        for namespace in (self.hub, *self.nodes):
            _run("ip", "netns", "add", namespace)
            self._made.append(namespace)
            _run("ip", "-n", namespace, "link", "set", "lo", "up")
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "addr", "add", f"{HUB_ADDRESS}/24", "dev", "br0")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        shape = ["tbf", "rate", f"{mbit}mbit", "burst", "64kb", "latency", "100ms"]
        for n, namespace in enumerate(self.nodes):
            port = f"node{n}"
            _run("ip", "-n", self.hub, "link", "add", port, "type", "veth", "peer", "name", NODE_INTERFACE, "netns", namespace)
            _run("ip", "-n", self.hub, "link", "set", port, "master", "br0", "up")
            _run("ip", "-n", namespace, "addr", "add", f"{self.address(n)}/24", "dev", NODE_INTERFACE)
            _run("ip", "-n", namespace, "link", "set", NODE_INTERFACE, "up")
            _run("ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", NODE_INTERFACE, "root", *shape)
            _run("ip", "netns", "exec", self.hub, "tc", "qdisc", "add", "dev", port, "root", *shape)

    @staticmethod
    def address(node: int) -> str:
        return f"{_SUBNET}.{node + 1}"

    @contextlib.contextmanager
    def inside_hub(self) -> Iterator[None]:
        """Run the calling thread, and what it starts meanwhile (servers, worker processes), on the hub."""
        root = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            enter(self.hub)
            yield
        finally:
            _setns(root, "the namespace it came from")
            os.close(root)

    def close(self) -> None:
        """Delete the namespaces (their veths and bridge go with them); calling it twice is harmless."""
        while self._made:
            subprocess.run(["ip", "netns", "del", self._made.pop()], capture_output=True)

    def __enter__(self) -> EmulatedNodes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
