"""The PS on a UDP socket, with its control API (docs/ps.md).

The native PS (`ina.ps.native`) is served by `NativeRunner`, its packet loop in C with the GIL
released. The Python PS is served by `ina.net.udp.UdpRunner`; the packet loop and the HTTP control
server run on different threads and that core is not thread-safe, so this server is the `Node`
the runner drives and the `ControlTarget` the API calls, and serializes both onto the core with one lock.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Sequence
from typing import Any

from ina.control import Endpoint, JobSpec
from ina.control.auth import Access
from ina.control.registry import Registry
from ina.control.watch import Waiting
from ina.net.native import NativeRunner
from ina.net.node import Address, Datagram
from ina.net.service import Service
from ina.ps.core import ParameterServer
from ina.ps.native import NativeParameterServer


class PSServer(Service):
    """A PS core (`ina.ps.native.ps_core`: native or Python) served on `listen` (UDP) with its control
    API on `control` (HTTP); `path` says which core it is.

    >>> with PSServer(ps_core(words=64), ("127.0.0.1", 0), ("127.0.0.1", 0)).start() as server:
    ...     print(server.address, server.control_address, server.path)
    """

    role = "ps"

    def __init__(self, core: ParameterServer | NativeParameterServer, listen: Address, control: Address, batch: int = 256,
                 access: Access | None = None, registry: Registry = Registry()) -> None:  # fmt: skip
        self.core = core
        self.path = "native" if isinstance(core, NativeParameterServer) else "python"
        self._lock = threading.Lock()
        native = core if isinstance(core, NativeParameterServer) else None
        bind = (lambda address: NativeRunner.bind(native, address)) if native is not None else None
        super().__init__(self, listen, control, batch, access, bind, registry)

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
            leaves=tuple(_resolve(leaf, f"leaves[{rack}]") for rack, leaf in enumerate(spec.leaves)),
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
            return self.core.counters() | super().counters()

    def waiting(self) -> Waiting:
        with self._lock:
            return self.core.waiting()


def _resolve(endpoint: Endpoint, what: str) -> Endpoint:
    try:
        return Endpoint(socket.gethostbyname(endpoint.host), endpoint.port)
    except OSError as error:
        raise ValueError(f"{what}: cannot resolve host {endpoint.host!r} ({error})") from None
