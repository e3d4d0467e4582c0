"""Processes in the testbed's hosts: ``ina switch`` and ``ina ps`` (services) and the workers.

Each process is started in its Mininet host with ``mnexec -da`` (Mininet's ``popen``), which
makes it a session and process-group leader of its own: :class:`Processes` stops each group it
started (SIGTERM, then SIGKILL), and nothing else. Output goes to a log file per process, in the
run's results folder.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

BANNER = ": data udp://"
STOPPED = ": stopped; counters "


class ProcessFailed(RuntimeError):
    """A process of the run exited badly or did not start; the message has the end of its log."""


class Process:
    """One command in one host, its output in `log`."""

    def __init__(self, name: str, node: Any, command: Sequence[str], log: Path, env: dict[str, str]) -> None:
        self.name, self.log = name, log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as output:
            self.popen: subprocess.Popen = node.popen(list(command), stdout=output, stderr=subprocess.STDOUT,
                                                      stdin=subprocess.DEVNULL, env=env)  # fmt: skip
        self.started = time.monotonic()
        self.ended: Optional[float] = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> Optional[int]:
        code = self.popen.poll()
        if code is not None and self.ended is None:
            self.ended = time.monotonic()
        return code

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def signal(self, signum: int) -> None:
        """Signal the process's group (mnexec -d made it a session leader); gone already is fine."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signum)
            except ProcessLookupError:
                pass

    def stop(self, grace: float = 10.0) -> Optional[int]:
        """SIGTERM, then SIGKILL after `grace` seconds; reaps it; its exit status."""
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.popen.wait()
        # Anything left in its group (it started children): nothing of the run may outlive it.
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return self.poll()


class Service(Process):
    """`ina switch` or `ina ps` in a host: started when its banner is printed, counters on stop."""

    def wait_ready(self, timeout: float) -> str:
        """Wait for the banner line; ProcessFailed with the log if it exits or takes too long."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace") if self.log.exists() else ""
            for line in text.splitlines():
                if BANNER in line:
                    return line
            if self.poll() is not None:
                raise ProcessFailed(f"{self.name} exited with status {self.popen.returncode} at start:\n{self.tail()}")
            time.sleep(0.1)
        raise ProcessFailed(f"{self.name} did not start within {timeout:g} s:\n{self.tail()}")

    def stop_and_count(self) -> dict[str, Any]:
        """Stop it (SIGTERM: it prints its final counters) and return those counters ({} if none)."""
        self.stop()
        for line in reversed(self.log.read_text(errors="replace").splitlines()):
            if STOPPED in line:
                return json.loads(line.split(STOPPED, 1)[1])
        return {}


class Processes:
    """Every process the run started, so that all of them are stopped however the run ends."""

    def __init__(self, on_start: Optional[Callable[[], None]] = None) -> None:
        self.all: list[Process] = []
        self._on_start = on_start

    def start(self, name: str, node: Any, command: Sequence[str], log: Path, env: dict[str, str], service: bool = False) -> Any:
        kind = Service if service else Process
        process = kind(name, node, command, log, env)
        self.all.append(process)
        if self._on_start:
            self._on_start()
        return process

    def pids(self) -> list[int]:
        return [p.pid for p in self.all]

    def close(self) -> None:
        """Stop whatever still runs: workers first, then the services (TERM to all, then KILL)."""
        running = [p for p in reversed(self.all) if p.poll() is None]
        for process in running:
            process.signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in running:
            try:
                process.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for process in self.all:
            process.stop(grace=0.1)

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ina_command(*arguments: str) -> list[str]:
    """`ina ARGUMENTS` with this Python: the same installation in every host."""
    return [sys.executable, "-m", "ina.cli", *arguments]


RUN_TOKEN = secrets.token_hex(16)
"""The operator token of this testbed's switch and PS: their control APIs listen on the hosts'
addresses, beyond loopback, so they require one (docs/protocol.md, section 7); the workers send it.
The APIs speak plain HTTP (the emulated network is private to this machine), so they warn at start
that the token crosses the network in clear."""


def base_environment(impaired: bool) -> dict[str, str]:
    """What every process of the run gets: this environment, unbuffered output, the run's token (and no
    CA file: the control APIs speak plain HTTP) and, on links that drop, duplicate or reorder, one datagram per UDP
    message (the nftables rules see a GSO run of datagrams as one packet)."""
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", INA_TOKEN=RUN_TOKEN)
    for variable in ("INA_TOKEN_FILE", "INA_CA_FILE"):
        env.pop(variable, None)
    if impaired:
        env["INA_UDP_GSO"] = "0"
    return env
