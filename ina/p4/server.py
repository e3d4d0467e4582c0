"""`ina switch --target bmv2|tofino`: a P4 switch, its controller, and the same control API as the
software switch, so workers, `ina ps` and every tool use it unchanged."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable

from ina.control.auth import Access
from ina.control.registry import Registry
from ina.control.http import ControlServer
from ina.net.node import Address
from ina.net.service import bind_or_explain
from ina.p4.build import Build
from ina.p4.controller import P4Switch
from ina.p4.device import Device
from ina.p4.entries import Route
from ina.protocol import INA_PORT
from ina.switch.config import SwitchConfig


class P4SwitchServer:
    """Opens the device (`open_device`), loads and programs the switch, serves the control API on
    `control` and sweeps idle slots until `stop()`; `close()` closes everything it opened."""

    role = "switch"

    def __init__(self, config: SwitchConfig, listen: Address, control: Address, open_device: Callable[[], Device],
                 routes: Iterable[Route], mac: str, access: Access | None = None,
                 registry: Registry = Registry(), program: Build | None = None) -> None:  # fmt: skip
        """Open the device and load `program` (default: p4src/ built for its target, P and K)."""
        if listen[1] != INA_PORT:
            raise ValueError(f"--listen {listen[0]}:{listen[1]}: the P4 switch knows ina packets by UDP port {INA_PORT}; use {listen[0]}:{INA_PORT}")
        if listen[0] == "0.0.0.0":
            raise ValueError(f"--listen {listen[0]}:{listen[1]}: the P4 switch takes only the ina packets addressed to it "
                             "(docs/protocol.md, section 2): name its own address, e.g. 10.0.0.254:47100")  # fmt: skip
        self.address = listen
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.device: Device | None = None
        self.control: ControlServer | None = None
        try:
            self.device = open_device()
            self.switch = P4Switch(config, self.device, listen[0], mac, routes, program)
            self.control = bind_or_explain(lambda: ControlServer(self.switch, *control, access=access, registry=registry), control, "--control")
        except BaseException:
            self.close()
            raise

    @property
    def control_address(self) -> Address:
        assert self.control is not None
        return self.control.address

    def counters(self) -> dict[str, Any]:
        return self.switch.counters()

    def serve_forever(self) -> None:
        """Sweep idle slots every quarter of slot_timeout until `stop()`."""
        period = self.switch.settings.slot_timeout / 4
        while not self._stopped.wait(period):
            self.switch.tick(time.monotonic())

    def start(self) -> P4SwitchServer:
        self._thread = threading.Thread(target=self.serve_forever, name="p4-sweep", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def close(self) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join()
        for part in (self.control, self.device):
            if part is not None:
                part.close()

    def __enter__(self) -> P4SwitchServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
