"""A phase's start clock, shared by the orchestrator and the workers through two kinds of files.

Each rank writes its ready file once it is set up (process group, model, hook); when every rank of
the phase has, the orchestrator writes the phase's start time, a reading of the machine's monotonic
clock (every network namespace shares it), to the go file named in ``INA_TESTBED_GO``. A job begins
training its ``start`` seconds after that time, so that jobs arrive when the run file says and the
start-up of processes, imports and rendezvous stays out of their completion times.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

GO_FILE = "INA_TESTBED_GO"
"""The environment variable naming the phase's go file."""
POLL = 0.02


def ready_file(rank: int) -> str:
    """The name, in the job's folder, of the file that says `rank` is set up."""
    return f"ready.{rank}"


def wait_for_start(job_dir: Path, rank: int, start: float, timeout: float) -> float:
    """Say `rank` is ready, wait for the phase's start time and then `start` seconds more; that moment
    (monotonic). Without a go file in the environment (a worker run by hand) the job starts now."""
    go = os.environ.get(GO_FILE)
    if not go:
        return time.monotonic()
    (job_dir / ready_file(rank)).touch()
    deadline = time.monotonic() + timeout
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the testbed did not start the phase within {timeout:g} s ({go} never appeared)")
        time.sleep(POLL)
    begin = float(Path(go).read_text()) + start
    time.sleep(max(0.0, begin - time.monotonic()))
    return begin
