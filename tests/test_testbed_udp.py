"""What the testbed needs of ina's UDP sockets: INA_UDP_GSO=0 sends one datagram per message, in
Python's batch sockets and in the native cores' C loop alike (so per-packet loss, duplication and
reordering rules see datagrams, not GSO runs), and a root process gets the socket buffers it asks
for beyond net.core.rmem_max."""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import pytest

from ina.control import Endpoint, JobSpec
from ina.net.udp import BatchSocket, open_socket
from ina.protocol import Header, Kind
from ina.switch import SwitchConfig
from ina.switch.native import native_module
from ina.switch.server import SwitchServer


def test_ina_udp_gso_0_turns_gso_off(monkeypatch):
    with open_socket(("127.0.0.1", 0)) as sock:
        default = BatchSocket(sock.dup()).gso
    monkeypatch.setenv("INA_UDP_GSO", "0")
    with open_socket(("127.0.0.1", 0)) as sock:
        assert BatchSocket(sock.dup()).gso is False
        assert BatchSocket(sock.dup(), gso=True).gso == default  # an explicit choice wins


def swept_messages(sweeps: int) -> list[int]:
    """The sizes of the messages in which a native switch swept `sweeps` partials to its PS at one deadline: one
    message per datagram, or GSO runs of them (the PS's socket has UDP GRO on, so a run arrives as one message)."""
    worker, ps = open_socket(("127.0.0.1", 0)), open_socket(("127.0.0.1", 0))
    ps.setsockopt(socket.IPPROTO_UDP, 104, 1)  # UDP_GRO
    ps.settimeout(2.0)
    sizes: list[int] = []
    with SwitchServer(SwitchConfig(pool=8, words=2, slot_timeout=0.1), ("127.0.0.1", 0), ("127.0.0.1", 0), path="native") as server:
        server.start()
        spec = JobSpec(job=3, workers=(Endpoint(*worker.getsockname()), Endpoint("127.0.0.1", 9)), window=8, ps=Endpoint(*ps.getsockname()))
        base = server.register(spec)["slot_base"]
        for seq in range(1, sweeps + 1):  # the other worker never sends: each chunk is swept, all at one deadline
            header = Header(Kind.DATA, job=3, seq=seq, rank=0, bitmap=1, slot=(base + seq) % 8, lane_bits=8)
            worker.sendto(header.pack(np.array([7, 9], dtype=np.uint32)), server.address)
        deadline = time.monotonic() + 3
        while sum(sizes) < sweeps * len(header.pack(np.array([7, 9], dtype=np.uint32))) and time.monotonic() < deadline:
            sizes.append(len(ps.recv(65536)))
    worker.close()
    ps.close()
    return sizes


@pytest.mark.skipif(native_module() is None, reason="the native switch is not built (or INA_NATIVE_PACKETS=0)")
def test_ina_udp_gso_0_turns_gso_off_in_the_native_loop_too(monkeypatch):
    assert len(swept_messages(6)) < 6, "the sweeps went out one datagram a message even with GSO on"
    monkeypatch.setenv("INA_UDP_GSO", "0")
    sizes = swept_messages(6)
    assert len(sizes) == 6 and len(set(sizes)) == 1, sizes


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (SO_RCVBUFFORCE)")
def test_a_root_socket_gets_its_whole_buffer_beyond_rmem_max():
    with open("/proc/sys/net/core/rmem_max") as f:
        rmem_max = int(f.read())
    size = max(8 << 20, 2 * rmem_max)
    with open_socket(("127.0.0.1", 0), buffer_bytes=size) as sock:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= size  # the kernel doubles what it grants
