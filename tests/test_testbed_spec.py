"""The testbed's run files: the examples in testbed/ are valid, and a bad run file is refused
with a message naming the field; without root the CLI refuses. No root, no Mininet needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ina.testbed import spec
from ina.testbed.spec import SpecError

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
