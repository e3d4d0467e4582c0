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


def test_quick_demo_prints_both_accuracies():
    command = [sys.executable, "-m", "ina.cli", "demo", "--quick"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = re.findall(r"^(fp32 allreduce|THC 4-bit \(collective\))\s+([\d.]+)%\s+[\d,]+", done.stdout, re.M)
    assert [label for label, _ in rows] == ["fp32 allreduce", "THC 4-bit (collective)"], done.stdout
    assert all(float(accuracy) > 80 for _, accuracy in rows), done.stdout


def test_the_command_lists_its_subcommands(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--help"])
    assert exit.value.code == 0
    assert "demo" in capsys.readouterr().out


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
