"""The PS on a UDP socket, with its control API (docs/ps.md).

The packet loop (`ina.net.udp.UdpRunner`) and the HTTP control server run on different
threads and the core is not thread-safe, so this server is the `Node` the runner drives
and the `ControlTarget` the API calls, and serializes both onto the core with one lock.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ina.control import Endpoint, JobSpec
from ina.control.http import ControlServer
from ina.net.node import Address, Datagram
from ina.net.udp import UdpRunner
from ina.ps.core import ParameterServer

T = TypeVar("T")


class PSServer:
    """A `ParameterServer` served on `listen` (UDP) with its control API on `control` (HTTP).

    >>> with PSServer(ParameterServer(words=64), ("127.0.0.1", 0), ("127.0.0.1", 0)).start() as server:
    ...     print(server.address, server.control_address)
    """

    role = "ps"

    def __init__(self, core: ParameterServer, listen: Address, control: Address, batch: int = 256) -> None:
        self.core = core
        self._lock = threading.Lock()
        self.runner = _bind(lambda: UdpRunner.bind(self, listen, batch=batch), listen, "--listen")
        try:
            self.control = _bind(lambda: ControlServer(self, *control), control, "--control")
        except ValueError:
            self.runner.close()
            raise

    @property
    def address(self) -> Address:
        return self.runner.address

    @property
    def control_address(self) -> Address:
        return self.control.address

    # --- Node, for the runner ---------------------------------------------------------

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        with self._lock:
            return self.core.receive(datagrams, now)

    def tick(self, now: float) -> list[Datagram]:
        with self._lock:
            return self.core.tick(now)

    def next_deadline(self) -> float | None:
        with self._lock:
            return self.core.next_deadline()

    # --- ControlTarget, for the API ---------------------------------------------------

    def config(self) -> dict[str, Any]:
        with self._lock:
            return self.core.config() | {"listen": "%s:%d" % self.address}

    def register(self, spec: JobSpec) -> dict[str, Any]:
        """Register with host names resolved: packets arrive from numeric addresses."""
        resolved = dataclasses.replace(
            spec,
            workers=tuple(_resolve(w, f"workers[{rank}]") for rank, w in enumerate(spec.workers)),
            switch=None if spec.switch is None else _resolve(spec.switch, "switch"),
        )
        with self._lock:
            return self.core.register(resolved)

    def deregister(self, job: int) -> None:
        with self._lock:
            self.core.deregister(job)

    def jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            return self.core.jobs()

    def counters(self) -> dict[str, int]:
        with self._lock:
            return self.core.counters() | {"send_refused": self.runner.refused}

    # --- life cycle -------------------------------------------------------------------

    def serve_forever(self) -> None:
        """Serve packets in the calling thread until `stop()`."""
        self.runner.serve_forever()

    def start(self) -> PSServer:
        """Serve packets on a background thread."""
        self.runner.start()
        return self

    def stop(self) -> None:
        """Ask the packet loop to return; safe from a signal handler."""
        self.runner.stop()

    def close(self) -> None:
        """Stop both servers and release their sockets; re-raise what broke the packet loop, if anything."""
        self.control.close()
        self.runner.close()
        if self.runner.error is not None:
            raise self.runner.error

    def __enter__(self) -> PSServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _resolve(endpoint: Endpoint, what: str) -> Endpoint:
    try:
        return Endpoint(socket.gethostbyname(endpoint.host), endpoint.port)
    except OSError as error:
        raise ValueError(f"{what}: cannot resolve host {endpoint.host!r} ({error})") from None


def _bind(open_server: Callable[[], T], address: Address, option: str) -> T:
    """Open a server on `address`; a refusal by the OS becomes a message naming the option to change."""
    try:
        return open_server()
    except OSError as error:
        raise ValueError(f"{option} {address[0]}:{address[1]}: cannot bind ({error.strerror or error}); "
                         f"choose another address or port, or stop what holds it") from None
