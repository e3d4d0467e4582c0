"""``ina demo`` end to end, the ``ina`` command line, and how local workers fail."""
import os
import re
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from ina.cli import main
from ina.launch import WorkerError, run_workers


def _table(printed: str) -> dict[str, tuple[float, int]]:
    """The demo's result rows: label -> (test accuracy in %, bytes per worker per step)."""
    rows = re.findall(r"^(fp32 allreduce|THC 4-bit \(\w+\))\s+([\d.]+)%\s+([\d,]+)", printed, re.M)
    return {label: (float(accuracy), int(sent.replace(",", ""))) for label, accuracy, sent in rows}


def test_quick_demo_prints_both_accuracies():
    command = [sys.executable, "-m", "ina.cli", "demo", "--quick"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    table = _table(done.stdout)
    assert list(table) == ["fp32 allreduce", "THC 4-bit (collective)"], done.stdout
    assert all(accuracy > 80 for accuracy, _ in table.values()), done.stdout


def test_quick_demo_through_a_local_switch_matches_collective(capsys):
    assert main(["demo", "--quick", "--transport", "switch"]) == 0  # in this process: its workers start warm
    printed = capsys.readouterr().out
    table = _table(printed)
    assert list(table) == ["fp32 allreduce", "THC 4-bit (collective)", "THC 4-bit (switch)"], printed
    (_, fp32), (collective, values), (switch, wire) = table.values()
    assert switch == collective > 80, printed  # the same sums, so the same model
    assert values < wire < fp32 / 2, printed  # headers, MAX chunks and resends on top of the lanes
    assert re.search(r"^ina demo: a software switch at udp://127\.0\.0\.1:\d+, ps at udp://", printed, re.M), printed


@pytest.mark.parametrize(
    "arguments, complaint",
    [(["--bits", "9"], "bits"), (["--granularity", "3"], "granularity"), (["--workers", "3"], "divide")],
)
def test_the_demo_refuses_bad_options_before_starting_workers(arguments, complaint, capsys):
    assert main(["demo", *arguments]) == 2
    assert complaint in capsys.readouterr().err


def _fail_while_others_wait(rank: int, workers: int) -> None:
    if rank == 1:
        raise ValueError("worker one gives up")
    dist.all_reduce(torch.ones(1))  # never completes: rank 1 is gone


def _crash(rank: int, workers: int) -> None:
    if rank == 1:
        os._exit(3)
    dist.all_reduce(torch.ones(1))


@pytest.mark.parametrize(
    "worker, message",
    [(_fail_while_others_wait, "ValueError: worker one gives up"), (_crash, "died with exit code 3")],
)
def test_a_failing_worker_stops_the_run_with_its_error(worker, message):
    started = time.monotonic()
    with pytest.raises(WorkerError, match="^worker 1 of 3") as failure:
        run_workers(worker, 3, timeout=60)
    assert message in str(failure.value)
    assert time.monotonic() - started < 30


def _sleep(rank: int, workers: int) -> None:
    time.sleep(60)


def test_a_stuck_run_times_out():
    with pytest.raises(WorkerError, match="did not finish in time"):
        run_workers(_sleep, 2, timeout=3)
