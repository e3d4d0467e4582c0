"""The software switch on a UDP socket, with its control API and optional fault injection."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ina.control import JobSpec
from ina.control.auth import Access
from ina.control.registry import Registry
from ina.control.watch import Waiting
from ina.net.faults import FaultInjector, FaultyNode
from ina.net.native import NativeRunner
from ina.net.node import Address, Node
from ina.net.delayed import DelayedNode
from ina.net.paced import PacedNode
from ina.net.service import Service
from ina.switch.config import SwitchConfig
from ina.switch.native import NativeSwitchCore, switch_core


@dataclass(frozen=True, slots=True)
class Faults:
    """Fault rates applied both to what the switch receives and to what it sends."""

    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    seed: int = 0

    def injectors(self) -> tuple[FaultInjector, FaultInjector]:
        """Inbound and outbound injectors with independent, reproducible streams."""
        return (
            FaultInjector(self.drop, self.duplicate, self.reorder, seed=2 * self.seed),
            FaultInjector(self.drop, self.duplicate, self.reorder, seed=2 * self.seed + 1),
        )


class SwitchServer(Service):
    """The switch core served on `listen` (UDP) and its control API on `control` (HTTP).

    It is itself the control API's target: the core's job table, plus fault and I/O counters.
    `path` picks the core (`ina.switch.native.switch_core`): the native one, served by
    `NativeRunner` with the GIL released, wherever it built (None), or the Python reference.
    `batch` caps the datagrams per core call; a call takes only what has arrived, so a
    lightly loaded switch answers packet by packet and a busy one amortizes over large batches.
    Fault injection (`FaultyNode`), a packet rate cap `max_pps` (`PacedNode`: a switch as slow as BMv2,
    to study that regime with the reference) and a `latency` in seconds (`DelayedNode`: a longer path, where
    the kernel cannot delay links) wrap the core in Python, served by `UdpRunner` on either path.
    """

    role = "switch"

    def __init__(self, config: SwitchConfig, listen: Address, control: Address, faults: Faults = Faults(), batch: int = 1024,
                 access: Access | None = None, path: str | None = None, registry: Registry = Registry(),
                 max_pps: float = 0.0, latency: float = 0.0) -> None:  # fmt: skip
        if max_pps < 0:
            raise ValueError(f"--max-pps must be 0 (no cap) or a positive packet rate, got {max_pps:g}")
        if latency < 0:
            raise ValueError(f"--latency must be 0 (none) or a positive number of milliseconds, got {latency * 1e3:g}")
        self.core = switch_core(config, path, messages=min(batch, 64))
        self.path = "native" if isinstance(self.core, NativeSwitchCore) else "python"
        self.faults = faults
        self.max_pps, self.latency = max_pps, latency
        served: Node = PacedNode(self.core, max_pps) if max_pps else self.core
        served = DelayedNode(served, latency) if latency else served
        self._faulty = FaultyNode(served, *faults.injectors()) if any((faults.drop, faults.duplicate, faults.reorder)) else None
        served = self._faulty or served
        native = self.core if isinstance(self.core, NativeSwitchCore) and served is self.core else None
        bind = (lambda address: NativeRunner.bind(native, address)) if native is not None else None
        super().__init__(served, listen, control, batch, access, bind, registry)

    # -- ControlTarget -----------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        return self.core.config() | {"listen": "%s:%d" % self.address, "faults": asdict(self.faults), "max_pps": self.max_pps,
                                     "latency_ms": self.latency * 1e3, "short_chunks": True}

    def register(self, spec: JobSpec) -> dict[str, Any]:
        return self.core.register(spec)

    def deregister(self, job: int) -> None:
        self.core.deregister(job)

    def jobs(self) -> list[dict[str, Any]]:
        return self.core.jobs()

    def waiting(self) -> Waiting:
        return self.core.waiting()

    def counters(self) -> dict[str, int]:
        counts = self.core.counters() | super().counters()
        if self._faulty is not None:
            for direction, injector in (("in", self._faulty.inbound), ("out", self._faulty.outbound)):
                counts |= {f"fault_{direction}_{name}": value for name, value in asdict(injector.stats).items()}
        return counts
