"""`ina top`: a live view of switches and a PS through their control APIs (docs/operations.md, "ina top").

Every `--interval` seconds it reads each service's `/jobs` and `/counters` and shows, per job, its
tenant, priority cap, slots held, chunks completed per second in the switch and at the PS,
preemptions given and suffered, and the rank it waits for most; then the pool's occupancy and
the packets dropped, by reason. `--switch` repeats: a racked job (docs/protocol.md, section 10)
registered at a spine and at each rack's leaf shows one row per switch, each with its level. A
service that does not answer or refuses the token is shown as such and retried, never a traceback.
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
COLUMNS = ("job", "tenant", "prio cap", "ranks", "slots held", "switch chunks/s", "PS chunks/s", "preempting", "preempted", "waits for")
"""The job table's columns."""
LEVEL_COLUMNS = ("switch", "level")
"""Columns after "ranks" where several switches are read or a job is racked: which switch a row is, the job's level there."""
LEFT_COLUMNS = ("tenant", "switch", "level", "waits for")
DEFAULT_SWITCH = f"127.0.0.1:{DEFAULT_SWITCH_CONTROL_PORT}"
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


def _name(reading: Reading, many: bool) -> str:
    """How a line names a service: by its role, and by its address too where several switches are read."""
    return f"switch {reading.address}" if many and reading.role == "switch" else reading.role


def level_of(entry: dict[str, Any]) -> str:
    """A job's role at one switch, from its `GET /jobs` entry (docs/protocol.md, section 10): "spine", "leaf r"
    (rack r's leaf) or "only" (the job's only switch); it says what that switch's row counts."""
    if entry.get("level") == "spine":
        return "spine"
    uplink = entry.get("uplink")
    return f"leaf {uplink['rack']}" if uplink else "only"


@dataclass(frozen=True, slots=True)
class Place:
    """A job at one switch: the switch's reading and the job's entry there (one row of the table)."""

    reading: Reading
    entry: dict[str, Any]

    @property
    def level(self) -> str:
        return level_of(self.entry)

    @property
    def order(self) -> tuple[int, int, str]:
        """Spine first, then the leaves by rack, then switches the job has to itself: top down, as results flow."""
        uplink = self.entry.get("uplink")
        return (0 if self.level == "spine" else 1 if uplink else 2, uplink["rack"] if uplink else 0, self.reading.address)


def _places(switches: list[Reading], job: int) -> list[Place]:
    """Where `job` is registered among the switches read, in the order its rows show them."""
    return sorted((Place(s, s.jobs[job]) for s in switches if job in s.jobs), key=lambda place: place.order)


def _slowest(readings: list[Reading], job: int, many: bool) -> str:
    """The rank each service waits for most for `job`, and the stalled ones. A switch of a racked job is named
    by its level; a spine's ranks are racks (its workers are the leaves)."""
    parts = []
    for reading in readings:
        entry = reading.jobs.get(job, {})
        rank, stalled = entry.get("slowest_rank"), entry.get("stalled_ranks") or []
        if rank is None:
            continue
        level = level_of(entry) if reading.role == "switch" else "only"
        who = _name(reading, many) if level == "only" else level
        parts.append(f"{'rack' if level == 'spine' else 'rank'} {rank} ({who})" + (f", stalled {','.join(map(str, stalled))}" if stalled else ""))
    return "; ".join(parts) or "-"


def _ranks(job: int, entry: dict[str, Any], places: list[Place], ps: Reading | None) -> int:
    """The job's workers: the PS lists them all; a racked job's leaves each list their rack's; else the entry shown."""
    if ps is not None and job in ps.jobs:
        return len(ps.jobs[job].get("workers", ()))
    leaves = [place.entry for place in places if place.entry.get("uplink")]
    return sum(len(leaf.get("workers", ())) for leaf in leaves) if leaves else len(entry.get("workers", ()))


def _switch_cells(job: int, place: Place | None, ps: Reading | None, before: dict[str, Reading]) -> dict[str, str]:
    """One switch's cells of a job's row (`place` None: a job at no switch read). Chunks per second are the job's
    `completed`: at a leaf, the rack's sums it sent up; a switch without per-job counters (P4) falls back to the
    RESULT copies the PS received, which only a job's only switch sends."""
    entry = place.entry if place else {}
    rate = _rate(place.reading, before.get(place.reading.address), job, "completed") if place else None
    level = place.level if place else "only"
    if rate is None and ps is not None and level == "only":
        rate = _rate(ps, before.get(ps.address), job, "switch_completed")
    return {"switch": place.reading.address if place else "-", "level": level if place else "-", "slots held": _number(entry.get("held")),
            "switch chunks/s": _number(rate, 1), "preempting": _number(entry.get("preempting")), "preempted": _number(entry.get("preempted"))}  # fmt: skip


def _job_rows(job: int, readings: list[Reading], places: list[Place], ps: Reading | None, before: dict[str, Reading],
              many: bool) -> list[dict[str, str]]:  # fmt: skip
    """A job's rows, by column: one per switch it is registered at (one if none), the job's own cells (tenant, ranks,
    the PS's rate, whom it waits for) on the first, so that a racked job reads as one block."""
    entry = next(reading.jobs[job] for reading in readings if job in reading.jobs)
    own = {"tenant": entry.get("owner") or "-", "prio cap": str(entry.get("priority_cap", "-")), "ranks": str(_ranks(job, entry, places, ps)),
           "PS chunks/s": _number(_rate(ps, before.get(ps.address), job, "completed") if ps else None, 1),
           "waits for": _slowest(readings, job, many)}  # fmt: skip
    rows = [{"job": str(job)} | _switch_cells(job, place, ps, before) for place in places or [None]]
    rows[0] |= own
    return [rows[0]] + [row | dict.fromkeys(own, "") for row in rows[1:]]


def _jobs_table(readings: list[Reading], switches: list[Reading], ps: Reading | None, before: dict[str, Reading]) -> Table:
    """The job table. With several switches, or a racked job, each row also names its switch and the job's level
    there; with one switch and jobs of one switch, the columns stay those of a single switch."""
    jobs = sorted({job for reading in readings for job in reading.jobs})
    places = {job: _places(switches, job) for job in jobs}
    wide = len(switches) > 1 or any(place.level != "only" for found in places.values() for place in found)
    columns = COLUMNS[:4] + (LEVEL_COLUMNS if wide else ()) + COLUMNS[4:]
    table = Table(title="jobs", expand=False)
    for column in columns:
        table.add_column(column, justify="left" if column in LEFT_COLUMNS else "right")
    for job in jobs:
        for row in _job_rows(job, readings, places[job], ps, before, len(switches) > 1):
            table.add_row(*(row[column] for column in columns))
    return table


def _pool_line(reading: Reading, many: bool) -> Text:
    """A switch's pool occupancy, and what it did as a level of racked jobs where it did anything."""
    held = sum(job.get("held", 0) for job in reading.jobs.values())
    where = f" of {_name(reading, many)}" if many else ""
    line = f"pool{where}: {held} of {reading.pool} slots held ({100 * held / reading.pool:.0f}%)"
    up, down = reading.counters.get("sent_up", 0), reading.counters.get("descended", 0)
    return Text(line + (f"; {up:,} sums sent up, {down:,} results passed down" if up or down else ""))


def _drops_line(reading: Reading, many: bool) -> Text:
    """The packets a service dropped, by reason."""
    drops = {name: reading.counters.get(name, 0) for name in DROP_REASONS[reading.role] if reading.counters.get(name)}
    return Text(f"{_name(reading, many)} drops: {', '.join(f'{name} {count:,}' for name, count in drops.items()) or 'none'}")


def render(now: dict[str, Reading], before: dict[str, Reading]) -> Group:
    """The screen for the latest readings `now` (and the previous ones, for rates), each keyed by its address."""
    readings = list(now.values())
    switches = [reading for reading in readings if reading.role == "switch"]
    ps = next((reading for reading in readings if reading.role == "ps"), None)
    many = len(switches) > 1
    lines: list[Any] = [Text(f"ina top - {time.strftime('%H:%M:%S')}", style="bold")]
    lines += [Text(f"{reading.role} {reading.address}: {reading.error}", style="red") for reading in readings if reading.error]
    lines.append(_jobs_table(readings, switches, ps, before))
    lines += [_pool_line(switch, many) for switch in switches if not switch.error and switch.pool]
    lines += [_drops_line(reading, many) for reading in readings if not reading.error]
    return Group(*lines)


def services_of(args: argparse.Namespace) -> list[Service]:
    """The services to read: every `--switch` given (the default one if none; '' for none), each once, and the PS."""
    switches = list(dict.fromkeys(address for address in (args.switch or [DEFAULT_SWITCH]) if address))
    if args.ps and args.ps in switches:
        raise ValueError(f"{args.ps} is given both as a switch and as the PS")
    named = [("switch", address) for address in switches] + ([("ps", args.ps)] if args.ps else [])
    if not named:
        raise ValueError("give --switch or --ps (or both)")
    return [Service(role, address, args.timeout, args.ca_file) for role, address in named]


def run(args: argparse.Namespace) -> int:
    try:
        if not args.interval > 0 or args.iterations < 0 or not args.timeout > 0:
            raise ValueError("--interval and --timeout must be positive and --iterations at least 0")
        services = services_of(args)
    except ValueError as error:
        print(f"ina top: {error}", file=sys.stderr)
        return 2
    console = Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH)  # a log or a pipe: no wrapped rows
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C quits, even where our parent ignored it
    before: dict[str, Reading] = {}

    def frame() -> Group:
        nonlocal before
        now = {service.address: service.read() for service in services}
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
    parser = subcommands.add_parser("top", help="a live view of switches' and a PS's jobs, slots, rates and drops",
                                    description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--switch", action="append",
                        help=f"a switch's control address; repeat it for several (a racked job's spine and leaves), or '' for "
                             f"none (default {DEFAULT_SWITCH})")
    parser.add_argument("--ps", default=f"127.0.0.1:{DEFAULT_PS_CONTROL_PORT}", help="the PS's control address, or '' for none (default %(default)s)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default %(default)s)")
    parser.add_argument("--iterations", type=int, default=0,
                        help="read this many times, print the last screen and exit (rates need 2); 0: live until Ctrl-C")
    parser.add_argument("--ca-file", help="CA bundle that signed the services' certificates, or 'system': speak https "
                                          "(default $INA_CA_FILE; unset: plain http)")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for a service's answer (default %(default)s)")
    parser.set_defaults(run=run)
