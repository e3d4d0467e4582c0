"""benchmarks/esa_study.py: the `ina testbed` command a study runs, and the job it calls the top one."""

import json
import subprocess
import sys
from types import SimpleNamespace

from benchmarks import esa_study
from ina.testbed import spec


def test_a_run_names_the_options_it_overrides_and_no_other(tmp_path, monkeypatch):
    commands = []

    def fake_run(command, **options):
        commands.append(command)
        (tmp_path / "results.json").write_text(json.dumps({"rounds": []}))
        return SimpleNamespace(returncode=0, stdout="ran")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert esa_study.run_testbed("run.yaml", tmp_path, 2, "fifo", policy="esa,fcfs", target=None, pool=64, result_copies=False,
                                 priority_policy="") == {"rounds": []}  # fmt: skip
    assert commands[0][:3] == [sys.executable, "-m", "ina.cli"]
    assert commands[0][3:] == ["testbed", "run.yaml", "--out", str(tmp_path), "--seed", "2", "--queues", "fifo",
                               "--policy", "esa,fcfs", "--pool", "64", "--no-result-copies"]  # fmt: skip
    esa_study.run_testbed("run.yaml", tmp_path, 0, "priority", result_copies=True, priority_policy="remaining")
    assert commands[1][-3:] == ["--result-copies", "--priority-policy", "remaining"]
    assert (tmp_path / "testbed.log").read_text() == "ran"


def test_the_top_job_is_the_one_the_jobs_priority_rule_ranks_first():
    document = {"jobs": [{"name": "big", "workers": 2, "transport": "switch", "steps": 10, "compute": 0.001},
                         {"name": "long", "workers": 2, "transport": "switch", "steps": 70, "compute": 0.02}]}  # fmt: skip
    results = {"jobs": [{"job": "big", "parameters": 8000}, {"job": "long", "parameters": 1000}]}
    run = spec.parse(document)
    assert esa_study.top_job(run, results) == "big"  # intensity: the most bytes a second of compute
    assert esa_study.top_job(spec.overridden(run, priority_policy="remaining"), results) == "long"  # the least work: 70 x 1000 < 10 x 8000


def test_each_run_of_a_study_starts_with_another_policy():
    assert [esa_study.in_turn(("esa", "fcfs", "atp"), turn) for turn in range(4)] == ["esa,fcfs,atp", "fcfs,atp,esa", "atp,esa,fcfs",
                                                                                     "esa,fcfs,atp"]  # fmt: skip
