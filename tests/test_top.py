"""`ina top` over several switches: a racked job (docs/protocol.md, section 10) registered at a spine and at two
leaves of live software switches, with chunks flowing through both levels, shows one row per switch with its
level, slots, rate and preemptions, a pool line and a drops line per switch, and each unreachable switch; one
switch reads as it always did."""

from __future__ import annotations

import argparse
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from ina.cli import main
from ina.control import Endpoint, JobSpec
from ina.control.http import ControlClient
from ina.control.jobs import Uplink
from ina.launch import LocalRacks
from ina.protocol import Flag, Header, Kind
from ina.top import COLUMNS, Reading, render, services_of

JOB, WORDS, POOL = 7, 4, 8
RACKS = [[0, 1], [2, 3]]  # global ranks under each leaf
UNREACHABLE = "127.0.0.1:9"


def endpoint(service: Any) -> Endpoint:
    """A service's data address, as a registration names it."""
    return Endpoint(*service.address)


class RackedJob:
    """Job JOB over two racks of loopback sockets, registered by hand as rank 0 would: the PS, the spine, each leaf."""

    def __init__(self, racks: LocalRacks) -> None:
        self.racks = racks
        self.sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in sum(RACKS, [])]
        for sock in self.sockets:
            sock.bind(("127.0.0.1", 0))
            sock.settimeout(2.0)
        workers = [[Endpoint(*self.sockets[rank].getsockname()) for rank in ranks] for ranks in RACKS]
        spec = JobSpec(JOB, tuple(sum(workers, [])), window=4, ps=endpoint(racks.ps))
        self.client(racks.ps).register(JobSpec(JOB, spec.workers, 4, racks=tuple(map(len, RACKS)), switch=endpoint(racks.spine),
                                               leaves=tuple(map(endpoint, racks.leaves))))  # fmt: skip
        answer = self.client(racks.spine).register(JobSpec(JOB, tuple(map(endpoint, racks.leaves)), 4, ps=spec.ps, level="spine"))
        self.base, self.span = answer["slot_base"], answer.get("span", POOL)
        for rack, leaf in enumerate(racks.leaves):
            uplink = Uplink(*racks.spine.address, rack=rack, racks=len(RACKS), slot_base=self.base, span=self.span, pool=POOL)
            self.client(leaf).register(JobSpec(JOB, tuple(workers[rack]), 4, ps=spec.ps, uplink=uplink))
        self.seq = 0

    @staticmethod
    def client(service: Any) -> ControlClient:
        return ControlClient(*service.control_address)

    def send(self, rank: int, seq: int) -> None:
        """Global rank `rank`'s DATA for chunk `seq`, to its rack's leaf."""
        rack = next(r for r, ranks in enumerate(RACKS) if rank in ranks)
        place = RACKS[rack].index(rank)
        header = Header(Kind.DATA, job=JOB, seq=seq, flags=Flag.NONE, rank=place, priority=0, slot=(self.base + seq % self.span) % POOL,
                        lane_bits=8, bitmap=1 << place)  # fmt: skip
        self.sockets[rank].sendto(header.pack(np.full(WORDS, rank + 1, dtype=np.uint32)), self.racks.leaves[rack].address)

    def step(self) -> None:
        """One chunk through both levels: every rank sends, every rank receives the result its leaf passes down."""
        for rank in range(len(self.sockets)):
            self.send(rank, self.seq)
        for sock in self.sockets:
            sock.recv(2048)
        self.seq += 1

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


@contextmanager
def racked_job() -> Iterator[RackedJob]:
    with LocalRacks(RACKS, words=WORDS, pool=POOL, path="python") as racks:  # the Python core: the native one is changing
        job = RackedJob(racks)
        try:
            yield job
        finally:
            job.close()


@contextmanager
def flowing(job: RackedJob) -> Iterator[None]:
    """Chunks through both levels in the background, as long as the block runs."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def loop() -> None:
        try:
            while not stop.is_set():
                job.step()
        except BaseException as error:  # noqa: BLE001 (reported by the test)
            failures.append(error)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)
    assert not failures, failures


def address(service: Any) -> str:
    """A service's control address, as `ina top` takes it."""
    return "%s:%d" % service.control_address


def top(capsys: pytest.CaptureFixture[str], racks: LocalRacks, *switches: str, iterations: int = 2) -> str:
    """What `ina top` prints for the PS and `switches`, read `iterations` times half a second apart."""
    options = [option for switch in switches for option in ("--switch", switch)]
    assert main(["top", *options, "--ps", address(racks.ps), "--iterations", str(iterations), "--interval", "0.5"]) == 0
    return capsys.readouterr().out


def table(screen: str) -> tuple[list[str], list[list[str]]]:
    """The job table's header and rows, cell by cell."""
    lines = [[cell.strip() for cell in re.split("[│┃]", line)[1:-1]] for line in screen.splitlines() if re.match("[│┃]", line)]
    return lines[0], lines[1:]


def rows_of(screen: str) -> dict[str, dict[str, str]]:
    """The job's rows by level."""
    header, rows = table(screen)
    return {row["level"]: row for row in (dict(zip(header, cells)) for cells in rows) if row["job"] == str(JOB)}


def test_a_racked_job_shows_one_row_per_switch_with_its_level_and_its_rates(capsys):
    with racked_job() as job:
        racks = job.racks
        switches = [address(racks.spine), *map(address, racks.leaves)]
        with flowing(job):
            screen = top(capsys, racks, switches[2], UNREACHABLE, switches[0], switches[1])  # rows come spine first whatever the order
        assert job.seq > 0
    header, _ = table(screen)
    assert header == [*COLUMNS[:4], "switch", "level", *COLUMNS[4:]], screen
    rows = rows_of(screen)
    assert list(rows) == ["spine", "leaf 0", "leaf 1"], screen
    assert [rows[level]["switch"] for level in rows] == switches, screen
    for row in rows.values():  # every level completes chunks: the spine the job's, each leaf its rack's sums sent up
        assert float(row["switch chunks/s"].replace(",", "")) > 0, screen
        assert row["preempting"] == row["preempted"] == "0", screen
    assert rows["spine"]["ranks"] == "4" and rows["spine"]["PS chunks/s"] != "", screen  # the job's workers, at the PS
    assert rows["leaf 0"]["ranks"] == rows["leaf 0"]["tenant"] == "", screen  # the job's own cells on its first row only
    assert f"switch {UNREACHABLE}: unreachable" in screen, screen
    for level, switch in zip(rows, switches):
        pool = re.search(rf"pool of switch {re.escape(switch)}: \d+ of {POOL} slots held \(\d+%\)(.*)", screen)
        assert pool, screen
        assert ("sums sent up" in pool[1]) == level.startswith("leaf"), screen
        assert f"switch {switch} drops: " in screen, screen
    assert "ps drops: " in screen and f"switch {UNREACHABLE} drops" not in screen, screen


def test_a_leaf_holding_a_racks_partial_shows_it_and_names_the_rank_it_waits_for(capsys):
    with racked_job() as job:
        racks = job.racks
        job.step()
        job.send(2, job.seq)  # rack 1's rank 0 alone: its leaf holds the chunk, waiting for rank 1 of the rack
        leaf = job.client(racks.leaves[1])
        deadline = time.monotonic() + 30
        while leaf.jobs()[0].get("slowest_rank") is None and time.monotonic() < deadline:
            time.sleep(0.1)
        screen = top(capsys, racks, address(racks.spine), *map(address, racks.leaves), iterations=1)
    rows = rows_of(screen)
    assert [rows[level]["slots held"] for level in rows] == ["0", "0", "1"], screen
    assert "rank 1 (leaf 1)" in rows["spine"]["waits for"], screen
    assert f"pool of switch {address(racks.leaves[1])}: 1 of {POOL} slots held (12%)" in screen, screen


def test_a_racked_job_of_more_than_32_workers_is_waited_on_by_its_worker_beyond_32(capsys):
    """Racks of 30 and 10 workers: the PS holds a chunk from every worker but place 35 (rack 1's rank 5), and the
    watch and `ina top` name that worker, not one of every worker past the first 32."""
    racks_of = (30, 10)
    with LocalRacks(RACKS, words=WORDS, pool=POOL, path="python") as racks:
        sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(sum(racks_of))]
        try:
            for sock in sockets:
                sock.bind(("127.0.0.1", 0))
            workers = tuple(Endpoint(*sock.getsockname()) for sock in sockets)
            ps = RackedJob.client(racks.ps)
            ps.register(JobSpec(JOB, workers, 4, racks=racks_of, switch=endpoint(racks.spine), leaves=tuple(map(endpoint, racks.leaves))))
            for place, sock in enumerate(sockets):
                rank = place if place < racks_of[0] else place - racks_of[0]
                if place != 35:
                    header = Header(Kind.DATA, job=JOB, seq=0, rank=rank, slot=0, lane_bits=8, bitmap=1 << rank)
                    sock.sendto(header.pack(np.ones(WORDS, dtype=np.uint32)), racks.ps.address)
            deadline = time.monotonic() + 30
            while ps.jobs()[0].get("slowest_rank") is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert ps.jobs()[0]["slowest_rank"] == 35
            screen = top(capsys, racks, iterations=1)
        finally:
            for sock in sockets:
                sock.close()
    _, rows = table(screen)
    assert rows[0][0] == str(JOB) and rows[0][3] == "40" and rows[0][-1] == "rank 35 (ps)", screen


def test_one_switch_reads_as_it_always_did():
    switch = Reading("switch", "127.0.0.1:1", 0.0, jobs={3: {"job": 3, "owner": "a", "priority_cap": 9, "workers": [1, 2], "held": 2,
                                                             "completed": 5, "preempting": 1, "preempted": 0}},
                     counters={"bad_slot": 4}, pool=8)  # fmt: skip
    ps = Reading("ps", "127.0.0.1:2", 0.0, jobs={3: {"job": 3, "workers": [1, 2], "completed": 1}})
    later = Reading("switch", switch.address, 2.0, switch.jobs | {3: switch.jobs[3] | {"completed": 9}}, switch.counters, 8)
    console = Console(width=200, record=True)
    console.print(render({r.address: r for r in (later, ps)}, {r.address: r for r in (switch, ps)}))
    screen = console.export_text()
    header, rows = table(screen)
    assert header == list(COLUMNS) and rows == [["3", "a", "9", "2", "2", "2.0", "-", "1", "0", "-"]], screen
    assert "pool: 2 of 8 slots held (25%)\n" in screen and "switch drops: bad_slot 4" in screen and "ps drops: none" in screen, screen


def options(*switches: str, ps: str = "") -> argparse.Namespace:
    return argparse.Namespace(switch=list(switches) or None, ps=ps, timeout=1.0, ca_file=None)


def test_switches_are_read_once_each_the_default_without_any_and_none_with_an_empty_one():
    assert [(s.role, s.address) for s in services_of(options("a:1", "b:2", "a:1", ps="c:3"))] == [("switch", "a:1"), ("switch", "b:2"), ("ps", "c:3")]
    assert [s.address for s in services_of(options())] == ["127.0.0.1:47180"]
    assert services_of(options("", ps="c:3"))[0].role == "ps"
    with pytest.raises(ValueError, match="both as a switch and as the PS"):
        services_of(options("a:1", ps="a:1"))
