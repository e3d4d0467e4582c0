"""RESULT groups (docs/protocol.md, section 7): a job's group address, joining it, and the probe that
decides, at attach time, whether every worker receives what an aggregator sends to it.

An aggregator sends each RESULT it makes once to the group instead of once per worker; where
multicast does not reach every worker (no route for 224.0.0.0/4, a namespace without it) the
probe fails and the job keeps unicast RESULTs.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import time

from ina.net.node import Address

DISABLE = "INA_MULTICAST"
"""Set to 0 to keep a job's RESULTs unicast (no group joined, nothing probed)."""

PROBE = b"ina-probe "
"""What a probe datagram starts with; the nonce follows in ASCII."""

PROBES = 3
"""Probe datagrams an aggregator sends: a lost one does not turn a job's group off."""

PROBE_WAIT = 0.5
"""Seconds a worker waits for its probe."""

_IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)  # Linux

logger = logging.getLogger(__name__)


def enabled() -> bool:
    """Whether jobs may use a RESULT group (INA_MULTICAST is not 0)."""
    return os.environ.get(DISABLE, "1") != "0"


def job_group(job: int, port: int) -> Address:
    """The RESULT group of job `job`: 239.255.(job >> 8).(job & 255), on `port` (the data port DATA goes to)."""
    return f"239.255.{job >> 8 & 255}.{job & 255}", port


def join(group: Address, interface: str) -> socket.socket | None:
    """A socket receiving `group` on the interface of the local address `interface`, or None (why is logged)."""
    from ina.net.udp import open_socket

    try:
        sock = open_socket(group, shared=True)
    except OSError as error:
        logger.info("cannot bind the RESULT group %s:%d (%s): RESULTs stay unicast", *group, error)
        return None
    try:
        sock.setsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL, 0)  # only what this socket joined, not the host
        membership = socket.inet_aton(group[0]) + socket.inet_aton(interface)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
    except OSError as error:
        sock.close()
        logger.info("cannot join the RESULT group %s:%d on %s (%s): RESULTs stay unicast", *group, interface, error)
        return None
    return sock


def send_probe(source: str, group: Address, nonce: int) -> int:
    """Send PROBES probe datagrams to `group` from the local address `source` (its interface); how many left."""
    from ina.net.udp import open_socket

    payload = PROBE + str(nonce).encode()
    sent = 0
    with open_socket((source, 0), buffer_bytes=1 << 16) as sock:
        for _ in range(PROBES):
            try:
                sock.sendto(payload, group)
                sent += 1
            except OSError as error:  # no route for the group: the workers hear nothing, and fall back
                logger.info("probing %s:%d from %s: %s", *group, source, error)
                break
    return sent


def heard_probes(sock: socket.socket, nonces: set[int], wait: float = PROBE_WAIT) -> set[int]:
    """Which of the probes with `nonces` reach `sock` within `wait` seconds; every probe is drained either way."""
    expected = {PROBE + str(nonce).encode(): nonce for nonce in nonces}
    deadline = time.monotonic() + wait
    heard: set[int] = set()
    while heard != nonces and (left := deadline - time.monotonic()) > 0:
        if select.select([sock], [], [], left)[0]:
            nonce = expected.get(sock.recv(65536))
            if nonce is not None:
                heard.add(nonce)
    drain(sock)
    return heard


def drain(sock: socket.socket) -> None:
    """Discard whatever waits on `sock` (probes: the engine would count them malformed)."""
    sock.setblocking(False)
    try:
        while True:
            sock.recv(65536)
    except OSError:  # nothing left
        pass
    finally:
        sock.setblocking(True)
