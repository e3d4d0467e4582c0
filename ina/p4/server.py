"""`ina switch --target bmv2`: BMv2 running the P4 switch, its controller, and the same control API
as the software switch, so workers, `ina ps` and every tool use it unchanged."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from ina.control.auth import Access
from ina.control.registry import Registry
from ina.control.http import ControlServer
from ina.net.node import Address
from ina.net.service import bind_or_explain
from ina.p4.bmv2 import Bmv2Process
from ina.p4.controller import P4Switch, Route
from ina.p4.registers import Bmv2Thrift
from ina.p4.runtime import P4RuntimeClient
from ina.protocol import INA_PORT
from ina.switch.config import SwitchConfig


class P4SwitchServer:
    """Starts simple_switch_grpc on `interfaces`, loads and programs the switch, serves the control
    API on `control` and sweeps idle slots until `stop()`; `close()` stops everything it started."""

    role = "switch"

    def __init__(self, config: SwitchConfig, listen: Address, control: Address, interfaces: Mapping[int, str],
                 routes: Iterable[Route], mac: str, log: Path | None = None, access: Access | None = None,
                 registry: Registry = Registry()) -> None:  # fmt: skip
        if listen[1] != INA_PORT:
            raise ValueError(f"--listen {listen[0]}:{listen[1]}: the P4 switch knows ina packets by UDP port {INA_PORT}; use {listen[0]}:{INA_PORT}")
        if not interfaces:
            raise ValueError("the BMv2 switch needs ports: give --interface PORT@IFACE for each")
        self.address = listen
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.bmv2 = Bmv2Process(interfaces, log=log)
        self.runtime: P4RuntimeClient | None = None
        self.registers: Bmv2Thrift | None = None
        self.control: ControlServer | None = None
        try:
            self.runtime = P4RuntimeClient(self.bmv2.grpc_address)
            self.registers = Bmv2Thrift("127.0.0.1", self.bmv2.thrift_port)
            self.switch = P4Switch(config, self.runtime, self.registers, listen[0], mac, routes)
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
        for part in (self.control, self.runtime, self.registers, self.bmv2):
            if part is not None:
                part.close()

    def __enter__(self) -> P4SwitchServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
