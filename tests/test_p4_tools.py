"""`ina p4 tools`: what ina finds of the P4 tools, where, which version, and what each target lacks,
on PATHs this test makes (tools that print a version, a compiler driver without its files, nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ina.cli import main
from ina.p4 import toolchain


def tool(folder: Path, name: str, body: str = "") -> Path:
    """An executable shell script `name` in `folder` that runs `body`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


@pytest.fixture
def path(monkeypatch, tmp_path):
    """PATH is one empty folder of this test's, no $INA_<TOOL> is set, and the controller's modules count
    as installed (the 'p4' extra is another test's concern)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    for variable in toolchain.TOOLS.values():
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(toolchain, "MODULES", {})
    return folder


def report(capsys, *options: str) -> tuple[int, list[str]]:
    status = main(["p4", "tools", *options])
    return status, capsys.readouterr().out.splitlines()


def test_tools_on_path_are_reported_with_their_path_and_version(path, capsys):
    tool(path, "p4c", 'echo "p4c 1.2.5.16 (SHA: abc BUILD: Release)"')
    tool(path, "simple_switch_grpc", "echo 1.15.5-unknown")
    tool(path, "bf-p4c", 'echo "bf-p4c 9.13.4"')
    status, lines = report(capsys)
    assert status == 0
    assert lines[:4] == [
        f"p4c                 {path}/p4c  p4c 1.2.5.16 (SHA: abc BUILD: Release)",
        f"simple_switch_grpc  {path}/simple_switch_grpc  1.15.5-unknown",
        f"bf-p4c              {path}/bf-p4c  bf-p4c 9.13.4",
        "p4testgen           missing: looked in PATH ($INA_P4TESTGEN unset)",
    ]
    assert "bmv2: ready (p4c + simple_switch_grpc)" in lines and "tofino: ready (bf-p4c)" in lines
    assert "p4testgen: missing (optional: it regenerates tests/vectors/p4testgen/, which the tests replay without it)" in lines


def test_an_empty_path_reports_every_tool_missing_and_what_each_target_lacks(path, capsys):
    status, lines = report(capsys)
    assert status == 1
    for name, variable in toolchain.TOOLS.items():
        assert f"{name:<18}  missing: looked in PATH (${variable} unset)" in lines
    assert "bmv2: missing p4c, simple_switch_grpc" in lines and "tofino: missing bf-p4c" in lines
    assert f"  to get bf-p4c: {toolchain.INSTALL_HINTS['bf-p4c']}, or set $INA_BF_P4C to its path" in lines


def test_the_exit_status_is_about_the_targets_asked_for(path, capsys):
    tool(path, "bf-p4c", 'echo "bf-p4c 9.13.4"')
    assert report(capsys, "--target", "tofino")[0] == 0
    assert report(capsys, "--target", "bmv2")[0] == 1
    assert report(capsys, "--target", "bmv2", "--target", "tofino")[0] == 1


def test_a_compiler_driver_without_its_back_end_files_is_found_but_not_ready(path, tmp_path, capsys, monkeypatch):
    """p4lang's driver (a Python script that reads p4c_src/) fails mid-build without its target's config
    and headers; ina names the files it lacks, in the report and when a build needs it."""
    prefix = tmp_path / "p4c"
    driver = tool(prefix / "bin", "p4c", "# a p4lang driver: it reads p4c_src/*.cfg\necho p4c 1.2.5.16")
    tool(prefix / "bin", "p4c-bm2-ss")
    (prefix / "share" / "p4c" / "p4c_src").mkdir(parents=True)
    (prefix / "share" / "p4c" / "p4c_src" / "p4c.bmv2.cfg").write_text("")
    (prefix / "share" / "p4c" / "p4include").mkdir()
    (prefix / "share" / "p4c" / "p4include" / "core.p4").write_text("")
    monkeypatch.setenv("INA_P4C", str(driver))
    tool(path, "simple_switch_grpc", "echo 1.15.5")
    status, lines = report(capsys, "--target", "bmv2")
    absent = prefix / "share" / "p4c" / "p4include" / "v1model.p4"
    assert status == 1
    assert lines[:2] == [f"p4c                 {driver}  p4c 1.2.5.16", f"                    lacks {absent}"]
    assert "bmv2: missing p4c (found, but lacks files)" in lines
    with pytest.raises(toolchain.ToolMissing, match=f"p4c at {driver} lacks {absent}; install p4lang's p4c"):
        toolchain.require("p4c")
    absent.write_text("")
    status, lines = report(capsys, "--target", "bmv2")
    assert status == 0 and "bmv2: ready (p4c + simple_switch_grpc)" in lines
    assert toolchain.require("p4c") == str(driver)


def test_a_variable_naming_no_executable_says_so(path, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("INA_BF_P4C", str(tmp_path / "no-bf-p4c"))
    tool(path, "bf-p4c", "echo found on PATH, but the variable wins")
    status, lines = report(capsys, "--target", "tofino")
    assert status == 1
    assert f"bf-p4c              missing: looked in $INA_BF_P4C='{tmp_path / 'no-bf-p4c'}'" in lines


def test_the_controller_s_python_packages_are_part_of_what_bmv2_needs(path, capsys, monkeypatch):
    tool(path, "p4c", "echo p4c 1")
    tool(path, "simple_switch_grpc", "echo 1")
    monkeypatch.setattr(toolchain, "MODULES", {"bmv2": {"json": "a module that is there", "ina_no_such_module": "no-such-package"}})
    status, lines = report(capsys, "--target", "bmv2")
    assert status == 1 and "bmv2: missing no-such-package (the 'p4' extra)" in lines
