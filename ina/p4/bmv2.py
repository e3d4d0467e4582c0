"""The BMv2 process: simple_switch_grpc started with its ports and no program (the controller
pushes one over P4Runtime), stopped with everything it started."""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Mapping

from ina.p4 import toolchain
from ina.protocol.constants import EGRESS_QUEUES

CPU_PORT = 255
"""The port P4Runtime packet-outs enter at (p4src/ina_v1model.p4's CPU_PORT)."""


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it exits (Linux)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Bmv2Process:
    """simple_switch_grpc on `interfaces` (BMv2 port -> Linux interface), serving P4Runtime on
    127.0.0.1:`grpc_port` and Thrift on `thrift_port`, each port with EGRESS_QUEUES priority queues (or one
    FIFO); its output goes to `log`."""

    def __init__(self, interfaces: Mapping[int, str], grpc_port: int = 0, thrift_port: int = 0,
                 log: Path | None = None, start_timeout: float = 20.0, priority_queues: bool = True) -> None:  # fmt: skip
        binary = toolchain.require("simple_switch_grpc")
        self.grpc_port = grpc_port or free_port()
        self.thrift_port = thrift_port or free_port()
        self.log = log or Path(tempfile.mkstemp(prefix="ina-bmv2-", suffix=".log")[1])
        command = [binary, "--no-p4", "--device-id", "0", "--thrift-port", str(self.thrift_port)]
        for port, interface in sorted(interfaces.items()):
            command += ["-i", f"{port}@{interface}"]
        command += ["--", "--grpc-server-addr", f"127.0.0.1:{self.grpc_port}", "--cpu-port", str(CPU_PORT)]
        if priority_queues:
            command += ["--priority-queues", str(EGRESS_QUEUES)]
        with self.log.open("wb") as output:
            # its own session: a signal to the controller's process group (Ctrl-C, a testbed's stop)
            # must not kill BMv2 before the controller has read its final counters; it still dies
            # with the controller (PR_SET_PDEATHSIG), so it never outlives it
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, preexec_fn=_die_with_parent)  # fmt: skip
        try:
            self._wait_ready(start_timeout)
        except RuntimeError:
            self.close()
            raise

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = {self.grpc_port, self.thrift_port}
        while pending:
            if self.process.poll() is not None:
                raise RuntimeError(f"simple_switch_grpc exited with status {self.process.returncode}: {self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"simple_switch_grpc did not open ports {sorted(pending)} within {timeout:g} s: {self.tail()}")
            for port in list(pending):
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        pending.discard(port)
            time.sleep(0.05)

    def tail(self, lines: int = 20) -> str:
        """The end of the switch's log, for error messages."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
