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


def test_the_table_lists_esa_first_and_each_baseline_over_esa_of_its_own_seed():
    def round_(seed, policy, jcts):
        return esa_study.Round(seed, "priority", policy, dict(zip(("a", "b"), jcts)), {}, ps_rx=10, preempted=0, collisions=0)

    rounds = [round_(1, "fcfs", (2.0, 4.0)), round_(1, "esa", (1.0, 2.0)), round_(2, "esa", (2.0, 2.0)), round_(2, "fcfs", (2.0, 2.0))]
    lines = esa_study.table(rounds, "a")
    assert [line.split()[1] for line in lines[1:]] == ["esa", "fcfs"]
    assert lines[2].split()[-2:] == ["2.00", "1.00"]  # seed 1: 3.0 s over esa's 1.5; seed 2: level
    assert lines[2].split()[2:4] == ["2.50", "2.00"]  # mean JCT over the seeds, the top job's
