"""`ina top`: a live view of a switch and a PS through their control APIs (docs/operations.md, "ina top").

Every `--interval` seconds it reads each service's `/jobs` and `/counters` and shows, per job, its
tenant, priority cap, slots held, chunks completed per second in the switch and at the PS,
preemptions given and suffered, and the rank it waits for most; then the pool's occupancy and
the packets dropped, by reason. A service that does not answer or refuses the token is shown as
such and retried, never a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ina.control.http import ControlClient, ControlError
from ina.net.udp import parse_address
from ina.protocol import DEFAULT_PS_CONTROL_PORT, DEFAULT_SWITCH_CONTROL_PORT

DROP_REASONS = {
    "switch": ("malformed", "unexpected", "unregistered", "bad_slot", "bad_format", "duplicate"),
    "ps": ("malformed", "unexpected", "unregistered", "bad_format", "bad_bitmap", "mismatch", "duplicate", "late",
           "stale", "unsolicited", "overloaded", "expired", "retired", "superseded"),
}  # fmt: skip
"""The counters of packets each service dropped (docs/protocol.md, sections 5 and 6)."""
PIPE_WIDTH = 200
"""Columns of a screen printed to something other than a terminal."""


@dataclass(slots=True)
class Reading:
    """One service read once: its jobs and counters, or why it could not be read."""

    role: str
    address: str
    at: float
    jobs: dict[int, dict[str, Any]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    pool: int | None = None
    error: str | None = None


class Service:
    """One control API as `ina top` reads it."""

    def __init__(self, role: str, address: str, timeout: float, ca_file: str | None) -> None:
        self.role, self.address = role, address
        self.client = ControlClient(*parse_address(address, f"--{role}"), timeout=timeout, ca_file=ca_file)
        self._pool: int | None = None

    def read(self) -> Reading:
        reading = Reading(self.role, self.address, time.monotonic())
        try:
            if self._pool is None and self.role == "switch":
                self._pool = int(self.client.config().get("pool", 0)) or None
            reading.jobs = {int(job["job"]): job for job in self.client.jobs()}
            reading.counters = self.client.counters()
            reading.pool = self._pool
        except ControlError as error:
            reading.error = _explain(error)
        return reading


def _explain(error: ControlError) -> str:
    if error.status in (401, 403):
        return f"refused ({error}): set INA_TOKEN_FILE to a file holding a token it accepts"
    return f"unreachable ({error})"


def _rate(now: Reading, before: Reading | None, job: int, name: str) -> float | None:
    """Per second, of a job's counter `name` between two readings (None: not known yet)."""
    if before is None or before.error or now.error or job not in before.jobs or name not in now.jobs.get(job, {}):
        return None
    elapsed = now.at - before.at
    return (now.jobs[job][name] - before.jobs[job].get(name, 0)) / elapsed if elapsed > 0 else None


def _number(value: float | int | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _slowest(readings: list[Reading], job: int) -> str:
    """The rank each service waits for most for `job`, and the stalled ones."""
    parts = []
    for reading in readings:
        entry = reading.jobs.get(job, {})
        rank, stalled = entry.get("slowest_rank"), entry.get("stalled_ranks") or []
        if rank is not None:
            parts.append(f"rank {rank} ({reading.role})" + (f", stalled {','.join(map(str, stalled))}" if stalled else ""))
    return "; ".join(parts) or "-"


def render(now: dict[str, Reading], before: dict[str, Reading]) -> Group:
    """The screen for the latest readings `now` (and the previous ones, for rates)."""
    readings = list(now.values())
    switch, ps = now.get("switch"), now.get("ps")
    lines: list[Any] = [Text(f"ina top - {time.strftime('%H:%M:%S')}", style="bold")]
    for reading in readings:
        if reading.error:
            lines.append(Text(f"{reading.role} {reading.address}: {reading.error}", style="red"))
    table = Table(title="jobs", expand=False)
    for column in ("job", "tenant", "prio cap", "ranks", "slots held", "switch chunks/s", "PS chunks/s", "preempting", "preempted", "waits for"):
        table.add_column(column, justify="left" if column in ("tenant", "waits for") else "right")
    jobs = sorted({job for reading in readings for job in reading.jobs})
    for job in jobs:
        entry = next(reading.jobs[job] for reading in readings if job in reading.jobs)
        on_switch = switch.jobs.get(job, {}) if switch else {}
        in_switch = _rate(switch, before.get("switch"), job, "completed") if switch and on_switch else None
        if in_switch is None and ps is not None:  # a P4 switch has no per-job counters: its RESULT copies at the PS
            in_switch = _rate(ps, before.get("ps"), job, "switch_completed")
        table.add_row(str(job), entry.get("owner") or "-", str(entry.get("priority_cap", "-")), str(len(entry.get("workers", ()))),
                      _number(on_switch.get("held")), _number(in_switch, 1),
                      _number(_rate(ps, before.get("ps"), job, "completed") if ps else None, 1),
                      _number(on_switch.get("preempting")), _number(on_switch.get("preempted")), _slowest(readings, job))  # fmt: skip
    lines.append(table)
    if switch and not switch.error and switch.pool:
        held = sum(job.get("held", 0) for job in switch.jobs.values())
        lines.append(Text(f"pool: {held} of {switch.pool} slots held ({100 * held / switch.pool:.0f}%)"))
    for reading in readings:
        if not reading.error:
            drops = {name: reading.counters.get(name, 0) for name in DROP_REASONS[reading.role] if reading.counters.get(name)}
            described = ", ".join(f"{name} {count:,}" for name, count in drops.items()) or "none"
            lines.append(Text(f"{reading.role} drops: {described}"))
    return Group(*lines)


def run(args: argparse.Namespace) -> int:
    try:
        if not args.interval > 0 or args.iterations < 0 or not args.timeout > 0:
            raise ValueError("--interval and --timeout must be positive and --iterations at least 0")
        services = [Service(role, address, args.timeout, args.ca_file) for role, address in (("switch", args.switch), ("ps", args.ps)) if address]
        if not services:
            raise ValueError("give --switch or --ps (or both)")
    except ValueError as error:
        print(f"ina top: {error}", file=sys.stderr)
        return 2
    console = Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH)  # a log or a pipe: no wrapped rows
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C quits, even where our parent ignored it
    before: dict[str, Reading] = {}

    def frame() -> Group:
        nonlocal before
        now = {service.role: service.read() for service in services}
        screen = render(now, before)
        before = now
        return screen

    try:
        if args.iterations:
            for i in range(args.iterations):
                screen = frame()
                if i + 1 < args.iterations:
                    time.sleep(args.interval)
            console.print(screen)
            return 0
        print(f"ina top: reading {', '.join(s.role + ' ' + s.address for s in services)} every {args.interval:g} s; Ctrl-C quits",
              file=sys.stderr, flush=True)  # fmt: skip
        with Live(frame(), console=console, screen=console.is_terminal, auto_refresh=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(frame(), refresh=True)
    except KeyboardInterrupt:
        return 0


def register(subcommands: argparse._SubParsersAction) -> None:
    parser = subcommands.add_parser("top", help="a live view of a switch's and a PS's jobs, slots, rates and drops",
                                    description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--switch", default=f"127.0.0.1:{DEFAULT_SWITCH_CONTROL_PORT}",
                        help="the switch's control address, or '' for none (default %(default)s)")
    parser.add_argument("--ps", default=f"127.0.0.1:{DEFAULT_PS_CONTROL_PORT}", help="the PS's control address, or '' for none (default %(default)s)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default %(default)s)")
    parser.add_argument("--iterations", type=int, default=0,
                        help="read this many times, print the last screen and exit (rates need 2); 0: live until Ctrl-C")
    parser.add_argument("--ca-file", help="CA bundle that signed the services' certificates, or 'system': speak https "
                                          "(default $INA_CA_FILE; unset: plain http)")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for a service's answer (default %(default)s)")
    parser.set_defaults(run=run)
