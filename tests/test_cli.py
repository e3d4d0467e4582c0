"""The ``ina`` command line: ``ina switch`` and ``ina ps`` serve workers that find them through
the environment, as torchrun workers do, and stop cleanly on a signal."""
import os
import re
import signal
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

import pytest
import torch
from conftest import loss_on, mlp, regression_problem, train
from torch.nn.parallel import DistributedDataParallel

from ina import THCState, thc_hook
from ina.cli import main
from ina.launch import run_workers

BANNER = re.compile(r"^ina (switch|ps): data udp://(127\.0\.0\.1:\d+), control http://(127\.0\.0\.1:\d+)")


@contextmanager
def serving(command: str, *options: str) -> Iterator[tuple[str, str, list[str]]]:
    """`ina COMMAND` on ports the OS picks: (data, control, lines it printed once stopped by SIGTERM)."""
    process = subprocess.Popen([sys.executable, "-m", "ina.cli", command, "--listen", "127.0.0.1:0",
                                "--control", "127.0.0.1:0", *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    printed: list[str] = []
    try:
        match = BANNER.match(process.stdout.readline())
        assert match and match.group(1) == command, process.stderr.read()
        yield match.group(2), match.group(3), printed
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
        printed += out.splitlines()
        assert process.returncode == 0 and "Traceback" not in err, err
    finally:
        process.kill()
        process.wait()


def _train_with_the_environment(rank: int, workers: int, transport: str, environment: dict[str, str]) -> float:
    os.environ.update(environment)
    model = mlp()
    state = THCState(start_iter=1, transport=transport)
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(state, thc_hook)
    data = regression_problem()
    train(ddp, data, range(4))
    torch.distributed.barrier()
    state.transport.close()
    with torch.no_grad():
        return loss_on(model, *data).item()


@pytest.mark.parametrize("transport", ["switch", "ps"])
def test_workers_train_through_ina_switch_and_ina_ps_found_by_environment(transport):
    with serving("ps", "--words", "32") as (ps, ps_control, ps_lines):
        environment = {"INA_PS": ps, "INA_PS_CONTROL": ps_control}
        if transport == "ps":
            losses = run_workers(_train_with_the_environment, 2, transport, environment, timeout=60)
        else:
            with serving("switch", "--words", "32", "--pool", "16") as (switch, switch_control, switch_lines):
                environment |= {"INA_SWITCH": switch, "INA_SWITCH_CONTROL": switch_control}
                losses = run_workers(_train_with_the_environment, 2, transport, environment, timeout=60)
            assert re.search(r'"completed": [1-9]', switch_lines[-1]), switch_lines
    assert losses[0] == losses[1]
    assert re.search(r'"pieces": [1-9]' if transport == "ps" else r'"result_copies": [1-9]', ps_lines[-1]), ps_lines


def test_the_command_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--help"])
    assert exit.value.code == 0
    listed = capsys.readouterr().out
    assert all(command in listed for command in ("demo", "switch", "ps"))


@pytest.mark.parametrize("command, option", [("switch", "--pool"), ("ps", "--words")])
def test_a_bad_option_stops_the_subcommand_at_once(command, option, capsys):
    assert main([command, "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", option, "12" if command == "switch" else "0"]) == 2
    assert f"ina {command}:" in capsys.readouterr().err
