"""`ina p4 build`: p4c compiles the BMv2 program cleanly for the vectors' sizes and a deployment's;
without a compiler the command says where it looked and what to install."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ina.p4 import toolchain
from ina.p4.build import BuildError, build, check

needs_p4c = pytest.mark.skipif(toolchain.missing("p4c") is not None, reason=toolchain.missing("p4c") or "")


def test_a_missing_compiler_is_named_with_where_ina_looked(monkeypatch, tmp_path):
    monkeypatch.setenv("INA_P4C", str(tmp_path / "no-p4c"))
    with pytest.raises(toolchain.ToolMissing, match=r"p4c not found: looked in \$INA_P4C=.*no-p4c.*install p4lang's p4c"):
        build(4, 8)
    done = subprocess.run([sys.executable, "-m", "ina.cli", "p4", "build", "--words", "4", "--pool", "8"],
                          capture_output=True, text=True, env=os.environ | {"INA_P4C": str(tmp_path / "no-p4c")})  # fmt: skip
    assert done.returncode == 2 and "ina p4 build: p4c not found" in done.stderr


@pytest.mark.parametrize("target", ["bmv2", "tofino"])
def test_without_words_each_target_is_built_for_the_protocol_s_64(target, monkeypatch):
    from ina.cli import build_parser
    from ina.p4 import build as p4build

    asked: list = []

    def record(*args, **options):
        asked.append((args, options))
        raise BuildError("recorded, not built")

    monkeypatch.setattr(p4build, "build", record)
    args = build_parser().parse_args(["p4", "build", "--target", target, "--pool", "4096"])
    assert args.run(args) == 2
    assert asked == [((64, 4096, target, None), {"word_group": None})]


def test_sizes_the_program_cannot_take_fail_before_compiling():
    with pytest.raises(ValueError, match="--words must be in 1..256"):
        check("bmv2", 300, 64)
    with pytest.raises(ValueError, match="power of two"):
        check("bmv2", 64, 48)
    with pytest.raises(ValueError, match="--target"):
        check("tofino2", 64, 64)
    with pytest.raises(ValueError, match="more than 3 passes of 20 words: raise --word-group to at least 22"):
        check("tofino", 64, 64, 20)
    with pytest.raises(ValueError, match="on bmv2 --words must be a multiple of --word-group"):
        check("bmv2", 64, 64, 23)
    with pytest.raises(ValueError, match="65536 cells"):
        check("tofino", 64, 32768, 23)
    with pytest.raises(ValueError, match="--word-group must be at least 1"):
        check("bmv2", 64, 64, -1)
    check("bmv2", 64, 64, 32)
    check("tofino", 69, 16384, 23)


@needs_p4c
@pytest.mark.parametrize("words, pool", [(4, 8), (4, 4), (64, 4096)])
def test_p4c_compiles_the_bmv2_program_without_warnings(words, pool):
    result = build(words, pool)  # ina's build cache: the BMv2 tests run these very builds
    assert "warning" not in result.warnings.lower(), result.warnings
    pipeline = json.loads(result.pipeline.read_text())
    registers = {r["name"]: (r["size"], r["bitwidth"]) for r in pipeline["register_arrays"]}
    assert registers["ina_missing"] == (pool, 32) and registers["ina_value"] == (pool, 32 * words)  # a slot's K words in one entry
    header_types = {h["name"]: h["fields"] for h in pipeline["header_types"]}
    assert header_types["words_h"] == [["value", 32 * words, False]]
    p4info = result.p4info.read_text()
    for table in ("ina_jobs", "ina_workers", "ina_victims", "ina_routes", "ina_replicas", "ina_switch", "ina_l2"):
        assert f'name: "{table}"' in p4info


@needs_p4c
@pytest.mark.parametrize("words, group", [(4, 2), (6, 2)])
def test_p4c_compiles_the_bmv2_program_with_word_passes_without_warnings(words, group):
    """BMv2 built with a word group runs the Tofino program's word passes (p4src/word_passes.p4): a
    word register of a group's words a cell, every group's cells P apart, and the groups before and
    after the one a pass steps as fields of their own."""
    result = build(words, 8, word_group=group)
    assert "warning" not in result.warnings.lower(), result.warnings
    assert result.pass_words == group
    pipeline = json.loads(result.pipeline.read_text())
    registers = {r["name"]: (r["size"], r["bitwidth"]) for r in pipeline["register_arrays"]}
    assert registers["ina_missing"] == (8, 32) and registers["ina_value"] == (8 * words // group, 32 * group)
    headers = {h["name"]: h["header_type"] for h in pipeline["headers"]}
    groups = ["before1", "words", "after1"] + (["before2", "after2"] if words // group == 3 else [])
    assert {name: headers[name] for name in groups} == dict.fromkeys(groups, "words_h")


@needs_p4c
def test_a_program_p4c_refuses_is_an_error_with_its_diagnostics(tmp_path, monkeypatch):
    broken = tmp_path / "src"
    broken.mkdir()
    (broken / "ina_v1model.p4").write_text("this is not P4;\n")
    monkeypatch.setattr("ina.p4.build.sources", lambda: broken)
    with pytest.raises(BuildError, match="p4c failed"):
        build(4, 8, out=tmp_path / "out")
