"""What the testbed needs of ina's UDP sockets: INA_UDP_GSO=0 sends one datagram per message
(so per-packet loss rules see datagrams, not GSO runs), and a root process gets the socket
buffers it asks for beyond net.core.rmem_max."""

from __future__ import annotations

import os
import socket

import pytest

from ina.net.udp import BatchSocket, open_socket


def test_ina_udp_gso_0_turns_gso_off(monkeypatch):
    with open_socket(("127.0.0.1", 0)) as sock:
        default = BatchSocket(sock.dup()).gso
    monkeypatch.setenv("INA_UDP_GSO", "0")
    with open_socket(("127.0.0.1", 0)) as sock:
        assert BatchSocket(sock.dup()).gso is False
        assert BatchSocket(sock.dup(), gso=True).gso == default  # an explicit choice wins


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (SO_RCVBUFFORCE)")
def test_a_root_socket_gets_its_whole_buffer_beyond_rmem_max():
    with open("/proc/sys/net/core/rmem_max") as f:
        rmem_max = int(f.read())
    size = max(8 << 20, 2 * rmem_max)
    with open_socket(("127.0.0.1", 0), buffer_bytes=size) as sock:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= size  # the kernel doubles what it grants
