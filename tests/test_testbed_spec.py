"""The testbed's run files: the examples in testbed/ are valid, and a bad run file is refused
with a message naming the field; without root the CLI refuses. No root, no Mininet needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ina.testbed import spec
from ina.testbed.spec import Link, SpecError

EXAMPLES = sorted((Path(__file__).parent.parent / "testbed").glob("*.yaml"))


def test_there_are_examples():
    assert {p.stem for p in EXAMPLES} >= {"ci", "commbound", "bmv2", "esa_vs_atp"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_run_file_is_valid(path):
    run = spec.load(path)
    assert run.jobs and run.worker_hosts >= max(max(j.hosts) for j in run.jobs) + 1


def test_defaults_and_phases():
    run = spec.parse({"jobs": [{"name": "a", "hook": "fp32", "workers": 2}, {"name": "b", "phase": 1, "hosts": [2, 0]}]})
    assert run.worker_hosts == 3 and run.switch.policies == ("esa",) and run.link.bw == 100.0
    assert [[j.name for j in phase] for phase in run.phases] == [["a"], ["b"]]
    assert run.jobs[1].hosts == (2, 0) and run.jobs[1].method == "thc4-collective"
    assert spec.job_from_json(__import__("json").dumps(__import__("dataclasses").asdict(run.jobs[1]))) == run.jobs[1]


def test_the_ps_link_starts_from_every_hosts_link_and_jobs_arrive_and_compute_as_told():
    run = spec.parse({"topology": {"link": {"bw": 0, "loss": 1}, "ps_link": {"bw": 20}},
                      "jobs": [{"name": "a", "start": 2.5, "compute": 0.01}, {"name": "b"}]})  # fmt: skip
    assert (run.link.bw, run.ps_host_link.bw, run.ps_host_link.loss) == (0.0, 20.0, 1.0) and run.impaired
    assert (run.jobs[0].start, run.jobs[0].compute, run.jobs[1].start, run.jobs[1].compute) == (2.5, 0.01, 0.0, 0.0)
    plain = spec.parse({"jobs": [{}]})
    assert plain.ps_link is None and plain.ps_host_link == plain.link and plain.switch.queues == "priority"
    assert plain.switch.max_pps == 0 and spec.parse({"jobs": [{}], "switch": {"max_pps": 9000}}).switch.max_pps == 9000.0
    assert not plain.impaired and plain.link.duplicate == 0


def test_a_jobs_stragglers_are_drawn_per_rank_from_its_seed_alike_for_every_policy():
    pytest.importorskip("torch")
    from itertools import islice

    from ina.testbed.worker import compute_times

    job = spec.parse({"jobs": [{"name": "a", "compute": 0.01, "jitter": 0.3}]}).jobs[0]
    times = {rank: list(islice(compute_times(job, rank), 200)) for rank in (0, 1)}
    assert all(0.007 <= t <= 0.013 for t in times[0] + times[1]) and times[0] != times[1]
    assert max(times[0]) - min(times[0]) > 0.005  # the draws span most of +-30%
    assert list(islice(compute_times(job, 0), 200)) == times[0]  # the same stragglers in every round of the run
    other_seed = list(islice(compute_times(spec.overridden(spec.parse({"jobs": [{"name": "a", "compute": 0.01, "jitter": 0.3}]}),
                                                            seed=1).jobs[0], 0), 200))  # fmt: skip
    assert other_seed != times[0]
    steady = spec.parse({"jobs": [{"compute": 0.01}]}).jobs[0]
    assert set(islice(compute_times(steady, 3), 50)) == {0.01}
    with pytest.raises(SpecError, match=r"jobs\[0\]\.jitter"):
        spec.parse({"jobs": [{"compute": 0.01, "jitter": 2}]})


def test_links_may_duplicate_packets_which_the_uplinks_take_from_every_hosts_link_unless_told():
    run = spec.parse({"topology": {"link": {"duplicate": 1}, "racks": [[0], [1]], "uplink": {"bw": 50}}, "jobs": [{"workers": 2}]})
    assert run.impaired and run.link.loss == 0 and (run.link.duplicate, run.uplink_link.duplicate, run.ps_host_link.duplicate) == (1.0, 1.0, 1.0)
    quiet_uplinks = spec.parse({"topology": {"racks": [[0], [1]], "uplink": {"duplicate": 0.5}}, "jobs": [{"workers": 2}]})
    assert quiet_uplinks.impaired and (quiet_uplinks.link.duplicate, quiet_uplinks.uplink_link.duplicate) == (0.0, 0.5)


def test_links_may_reorder_packets_in_every_link_spec_which_takes_the_hosts_link_unless_told():
    run = spec.parse({"topology": {"link": {"reorder": 1}, "ps_link": {"bw": 20}, "racks": [[0], [1]], "uplink": {"reorder": 0.5}},
                      "jobs": [{"workers": 2}]})  # fmt: skip
    assert run.impaired and (run.link.loss, run.link.duplicate) == (0, 0)
    assert (run.link.reorder, run.ps_host_link.reorder, run.uplink_link.reorder) == (1.0, 1.0, 0.5)
    assert spec.parse({"jobs": [{}]}).link.reorder == 0 and not spec.parse({"topology": {"link": {"reorder": 0}}, "jobs": [{}]}).impaired


def test_racks_put_every_worker_host_under_one_leaf_with_uplinks_to_the_spine():
    run = spec.parse({"topology": {"link": {"bw": 100, "loss": 1}, "racks": [[0, 1], [2, 3, 4], [5, 6]], "uplink": {"bw": 50}},
                      "faults": [{"at": 5, "stop": "spine"}, {"at": 6, "stop": "leaf2"}, {"at": 9, "start": "spine"}],
                      "jobs": [{"name": "two", "workers": 7, "batch": 63, "transport": "switch"},
                               {"name": "one", "workers": 7, "batch": 63, "transport": "switch", "levels": 1, "phase": 1}]})  # fmt: skip
    assert run.worker_hosts == 7 and run.racks == ((0, 1), (2, 3, 4), (5, 6)) and [run.rack_of(h) for h in range(7)] == [0, 0, 1, 1, 1, 2, 2]
    assert (run.uplink_link.bw, run.uplink_link.loss) == (50.0, 1.0)  # unset fields are every host link's
    assert run.switch_names == ("leaf0", "leaf1", "leaf2", "spine") and [f.service for f in run.faults] == ["spine", "leaf2", "spine"]
    assert [job.levels for job in run.jobs] == [2, 1]
    assert spec.job_from_json(__import__("json").dumps(__import__("dataclasses").asdict(run.jobs[1]))) == run.jobs[1]
    lossless_hosts = spec.parse({"topology": {"racks": [[0], [1]], "uplink": {"loss": 2}}, "jobs": [{"workers": 2}]})
    assert lossless_hosts.impaired and lossless_hosts.uplink_link.loss == 2.0 and lossless_hosts.link.loss == 0
    assert spec.parse({"topology": {"racks": [[0], [1]]}, "jobs": [{"workers": 2}]}).uplink_link == Link()
    flat = spec.parse({"jobs": [{"transport": "switch"}]})
    assert flat.racks == () and flat.switch_names == ("switch",) and flat.uplink is None and flat.links == (flat.link, flat.link)
    assert [job.levels for job in spec.overridden(run, levels=1).jobs] == [1, 1]
    with pytest.raises(SpecError, match="--levels 1: give 2"):
        spec.overridden(flat, levels=1)


def test_racks_run_on_bmv2_under_every_policy(tmp_path):
    from ina.cli import main

    racked = spec.parse({"topology": {"racks": [[0], [1]]}, "switch": {"target": "bmv2"}, "jobs": [{"workers": 2, "transport": "switch"}]})
    assert racked.switch.target == "bmv2" and racked.racks == ((0,), (1,)) and racked.switch_names == ("leaf0", "leaf1", "spine")
    run_file = tmp_path / "run.yaml"
    run_file.write_text("topology: {racks: [[0], [1]]}\nswitch: {policy: [esa, fcfs, atp, static]}\njobs: [{workers: 2, transport: switch}]\n")
    assert main(["testbed", str(run_file), "--target", "bmv2", "--check"]) == 0


@pytest.mark.parametrize("pool, jobs, window, expected", [(16, 4, 16, 4), (16, 3, 16, 4), (16, 3, 2, 2), (64, 3, None, 16), (8, 1, None, 8)])
def test_under_static_each_switch_job_of_a_phase_gets_a_power_of_two_share_of_the_pool(pool, jobs, window, expected):
    run = spec.parse({"switch": {"pool": pool, "policy": ["esa", "static"]},
                      "jobs": [{"name": f"j{i}", "transport": "switch", "window": window} for i in range(jobs)]
                      + [{"name": "other", "transport": "ps"}, {"name": "later", "transport": "switch", "phase": 1}]})  # fmt: skip
    assert [spec.static_window(job, run) for job in run.jobs[:jobs]] == [expected] * jobs
    assert spec.static_window(run.jobs[-1], run) == pool  # alone in its phase


@pytest.mark.parametrize(
    "document, message",
    [
        ({}, "'jobs' must list at least one job"),
        ({"jobs": [{"hook": "fp64"}]}, "jobs[0].hook: 'fp64': must be one of"),
        ({"jobs": [{"steps": "many"}]}, "jobs[0].steps: expected an integer"),
        ({"jobs": [{"stepz": 3}]}, "jobs[0]: unknown field(s) ['stepz']"),
        ({"jobs": [{}], "topology": {"link": {"loss": 80}}}, "topology.link.loss: 80.0: must be between 0 and 50"),
        ({"jobs": [{}], "switch": {"pool": 100}}, "switch.pool: 100: must be a power of two"),
        ({"jobs": [{}], "switch": {"policy": ["esa", "esa"]}}, "switch.policy"),
        ({"jobs": [{"transport": "switch", "window": 128}], "switch": {"pool": 64}}, "window 128 exceeds the switch's pool of 64"),
        ({"jobs": [{"hook": "fp16", "transport": "switch"}]}, "jobs[0].transport: only thc jobs take it"),
        ({"jobs": [{"name": "x"}, {"name": "x"}]}, "the name 'x' is used twice"),
        ({"jobs": [{"workers": 3}]}, "jobs[0].batch: 64 is not divisible by its 3 workers"),
        ({"jobs": [{"workers": 3, "hosts": [1, 1]}]}, "jobs[0].hosts: [1, 1]: give 3 worker host numbers"),
        ({"jobs": [{"workers": 2}], "topology": {"workers": 1}}, "topology.workers: 1 worker hosts"),
        ({"jobs": [{"hook": "powersgd", "warm_up": 1}]}, "powersgd needs at least 2 steps"),
        ({"jobs": [{"bits": 4, "granularity": 10}]}, "jobs[0]: granularity must be in 15..255"),
        ({"jobs": [{"model": {"hidden": []}}]}, "jobs[0].model.hidden"),
        ({"jobs": [{"start": -1}]}, "jobs[0].start: -1.0: must be between 0"),
        ({"jobs": [{"compute": "fast"}]}, "jobs[0].compute: expected a number"),
        ({"jobs": [{}], "topology": {"ps_link": {"bw": -5}}}, "topology.ps_link.bw: -5.0"),
        ({"jobs": [{}], "topology": {"ps_link": {"speed": 5}}}, "topology.ps_link: unknown field(s) ['speed']"),
        ({"jobs": [{}], "topology": {"link": {"duplicate": 60}}}, "topology.link.duplicate: 60.0: must be between 0 and 50"),
        ({"jobs": [{}], "topology": {"link": {"reorder": 51}}}, "topology.link.reorder: 51.0: must be between 0 and 50"),
        ({"jobs": [{}], "topology": {"ps_link": {"reorder": "often"}}}, "topology.ps_link.reorder: expected a number"),
        ({"jobs": [{}], "topology": {"racks": [[0], [1]], "uplink": {"reorder": -1}}}, "topology.uplink.reorder: -1.0: must be between 0 and 50"),
        ({"jobs": [{}], "switch": {"priority_queues": True}}, "switch.priority_queues: replaced by switch.queues"),
            ({"jobs": [{}], "switch": {"queues": "wfq"}}, "switch.queues"),
        ({"jobs": [{}], "switch": {"max_pps": -1}}, "switch.max_pps: -1.0: must be between 0"),
        ({"jobs": [{}], "switch": {"max_pps": 9000, "target": "bmv2"}}, "switch.max_pps: a setting of the software switch alone"),
        ({"jobs": [{}], "switch": {"latency": 2, "target": "bmv2"}}, "switch.latency: a setting of the software switch alone"),
        ({"jobs": [{}], "switch": {"latency": -1}}, "switch.latency: -1.0: must be between 0"),
        ({"jobs": [{}], "switch": {"policy": ["esa", "atp"], "result_copies": False}}, "switch.result_copies: atp sends every RESULT"),
        ({"jobs": [{"transport": "switch", "priority_policy": "srpt"}]}, "jobs[0].priority_policy: 'srpt'"),
        ({"jobs": [{"steps": True}]}, "jobs[0].steps: expected an integer"),
        ({"jobs": [{}], "topology": {"racks": [[0, 1, 2, 3]]}}, "topology.racks: [[0, 1, 2, 3]]: give 2..32 racks"),
        ({"jobs": [{}], "topology": {"racks": [[0, 1], []]}}, "topology.racks: [[0, 1], []]: give 2..32 racks"),
        ({"jobs": [{}], "topology": {"racks": [[0, 1], ["2"]]}}, "topology.racks"),
        ({"jobs": [{}], "topology": {"racks": [[0, 1], [1, 2, 3]]}}, "topology.racks: worker host 1 is in rack 0 and rack 1"),
        ({"jobs": [{}], "topology": {"racks": [[0, 1], [3]]}}, "topology.racks: worker host(s) [2] are in no rack"),
        ({"jobs": [{}], "topology": {"workers": 4, "racks": [[0, 1], [2, 3, 4]]}}, "topology.racks: worker host(s) [4], but topology.workers is 4"),
        ({"jobs": [{}], "topology": {"uplink": {"bw": 10}}}, "topology.uplink: only a racked topology has uplinks"),
        ({"jobs": [{}], "topology": {"racks": [[0, 1], [2, 3]], "uplink": {"mtu": 10}}}, "topology.uplink: unknown field(s) ['mtu']"),
        ({"jobs": [{"transport": "switch", "levels": 1}]}, "jobs[0].levels: only a switch job (hook thc, transport switch) of a racked run"),
        ({"jobs": [{"levels": 1}], "topology": {"racks": [[0, 1], [2, 3]]}}, "jobs[0].levels: only a switch job"),
        ({"jobs": [{"transport": "switch", "levels": 3}], "topology": {"racks": [[0, 1], [2, 3]]}}, "jobs[0].levels: 3: must be between 1 and 2"),
        ({"jobs": [{"transport": "switch"}], "faults": [{"at": 1, "stop": "spine"}]}, "faults[0].stop: 'spine': must be one of ['switch', 'ps']"),
        ({"jobs": [{"transport": "switch"}], "topology": {"racks": [[0, 1], [2, 3]]}, "faults": [{"at": 1, "stop": "switch"}]},
         "faults[0].stop: 'switch': must be one of ['leaf0', 'leaf1', 'spine', 'ps']"),
    ],
)
def test_a_bad_run_file_is_refused_naming_the_field(document, message):
    with pytest.raises(SpecError) as refused:
        spec.parse(document)
    assert message in str(refused.value)


def test_unreadable_and_invalid_yaml_are_refused(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        spec.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs: [\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        spec.load(bad)


def test_the_cli_refuses_a_bad_run_file_before_touching_anything(tmp_path, capsys):
    from ina.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs: [{hook: nope}]\n")
    assert main(["testbed", str(bad)]) == 2
    assert "jobs[0].hook: 'nope'" in capsys.readouterr().err


def test_overriding_the_target_with_bmv2_drops_the_software_switchs_cap_and_latency_and_says_so(tmp_path, capsys, monkeypatch):
    from ina.cli import main

    run_file = tmp_path / "run.yaml"
    run_file.write_text("jobs: [{workers: 2}]\nswitch: {max_pps: 9000, latency: 1.5}\n")
    checked = []
    monkeypatch.setattr("ina.testbed.network.why_not", lambda plan: checked.append(plan) or "stopped here by the test")
    assert main(["testbed", str(run_file), "--target", "bmv2"]) == 2
    assert (checked[0].switch.target, checked[0].switch.max_pps, checked[0].switch.latency) == ("bmv2", 0.0, 0.0)
    err = capsys.readouterr().err
    assert "switch.max_pps is the software switch's alone; running without it" in err and "switch.latency is" in err


def test_the_policy_queues_and_seed_of_a_run_file_can_be_overridden_for_repeated_runs(tmp_path, capsys, monkeypatch):
    from ina.cli import main

    run_file = tmp_path / "run.yaml"
    run_file.write_text("jobs: [{workers: 2, seed: 4}, {workers: 2}]\nswitch: {policy: [esa, static], queues: priority, pool: 16}\n")
    checked = []
    monkeypatch.setattr("ina.testbed.network.why_not", lambda plan: checked.append(plan) or "stopped here by the test")
    assert main(["testbed", str(run_file), "--policy", "fcfs,atp", "--queues", "fifo", "--pool", "128", "--seed", "7"]) == 2
    assert (checked[0].switch.policies, checked[0].switch.queues, checked[0].switch.pool) == (("fcfs", "atp"), "fifo", 128)
    assert main(["testbed", str(run_file), "--no-result-copies"]) == 2 and not checked[1].switch.result_copies
    assert [job.seed for job in checked[0].jobs] == [7, 7] and checked[0].switch.result_copies
    assert main(["testbed", str(run_file), "--policy", "esa,lru"]) == 2
    assert "switch.policy: ['esa', 'lru']: give one of ['esa', 'fcfs', 'atp', 'static']" in capsys.readouterr().err
    assert spec.overridden(spec.load(run_file)) == spec.load(run_file)


def test_the_priority_rule_of_every_switch_or_ps_job_can_be_overridden(tmp_path, monkeypatch):
    from ina.cli import main

    run_file = tmp_path / "run.yaml"
    run_file.write_text("jobs: [{workers: 2, transport: switch}, {workers: 2, transport: ps, priority_policy: las}, {workers: 2}]\n")
    checked = []
    monkeypatch.setattr("ina.testbed.network.why_not", lambda plan: checked.append(plan) or "stopped here by the test")
    assert main(["testbed", str(run_file), "--priority-policy", "remaining"]) == 2
    assert [job.priority_policy for job in checked[0].jobs] == ["remaining", "remaining", "intensity"]  # the collective has none
    assert [job.priority_policy for job in spec.load(run_file).jobs] == ["intensity", "las", "intensity"]
    with pytest.raises(SpecError, match="--priority-policy lru: give one of"):
        spec.overridden(spec.load(run_file), priority_policy="lru")


def test_registering_the_subcommand_imports_neither_torch_nor_mininet():
    import subprocess
    import sys

    code = "import sys, ina.cli; ina.cli.build_parser(); print(sorted(m for m in ('torch', 'mininet', 'yaml') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_without_root_the_cli_refuses_saying_why(tmp_path, capsys, monkeypatch):
    from ina.cli import main

    run_file = tmp_path / "run.yaml"
    run_file.write_text("jobs: [{workers: 2}]\n")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert main(["testbed", str(run_file)]) == 2
    assert "the testbed needs root" in capsys.readouterr().err


def test_without_mininet_it_says_how_to_install_it(monkeypatch):
    import sys

    from ina.testbed import network

    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setitem(sys.modules, "mininet", None)  # `import mininet` fails
    monkeypatch.setattr(network, "DEBIAN_DIST_PACKAGES", "/nonexistent")
    assert "Mininet is not installed: `apt-get install mininet`" in network.why_not()


def test_a_job_begins_its_start_after_the_phase_clock_its_rank_marked_ready(tmp_path, monkeypatch):
    import threading
    import time

    from ina.testbed import clock

    go = tmp_path / "go.0"
    monkeypatch.setenv(clock.GO_FILE, str(go))
    written = []

    def start_phase() -> None:
        while not (tmp_path / clock.ready_file(3)).exists():
            time.sleep(0.01)
        written.append(time.monotonic() + 0.1)
        partial = go.with_suffix(".part")  # whole or not there, as the orchestrator writes it
        partial.write_text(repr(written[0]))
        partial.rename(go)

    threading.Thread(target=start_phase).start()
    began = clock.wait_for_start(tmp_path, 3, start=0.2, timeout=10)
    assert began == written[0] + 0.2 and time.monotonic() >= began
    monkeypatch.delenv(clock.GO_FILE)
    before = time.monotonic()
    now = clock.wait_for_start(tmp_path, 0, start=5, timeout=1)  # by hand: at once, not 5 s later
    assert before <= now <= time.monotonic() < before + 5
    monkeypatch.setenv(clock.GO_FILE, str(tmp_path / "never"))
    with pytest.raises(TimeoutError, match="did not start the phase"):
        clock.wait_for_start(tmp_path, 1, start=0, timeout=0.1)
