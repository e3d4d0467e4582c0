"""The TNA program with the real Tofino compiler: every name the Tofino controller writes or reads
resolves in the bfrt.json bf-p4c writes for it, so a rename in p4src/ fails here rather than on a
switch; and bf-p4c fits it onto Tofino 1 at the protocol's K = 64, a pass stepping the most words it has
stateful ALUs for and word passes the rest."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from bfrt_fakes import fake_gc, tofino_view

from ina.control import Endpoint, JobSpec
from ina.control.jobs import Uplink
from ina.p4 import resources, toolchain
from ina.p4.build import MAX_WORDS, TOFINO_WORDS_PER_PASS
from ina.p4.entries import Route
from ina.switch.config import SwitchConfig

needs_bf_p4c = pytest.mark.skipif(toolchain.missing("bf-p4c") is not None, reason=toolchain.missing("bf-p4c") or "")
WORDS, POOL = 64, 4096
GROUPS = -(-WORDS // TOFINO_WORDS_PER_PASS)  # the word groups, one pass each
FIT_SECONDS = 900


@pytest.fixture(scope="module")
def fitted():
    """bf-p4c's build of the TNA program for K words (P = 4096), made once for every test here (and kept in
    ina's build cache, keyed by the sources and the compiler): the fit tests check each K's, and the
    names test reads the bfrt.json of K = 64's."""
    from ina.p4.build import build

    builds = {}

    def get(words: int):
        if words not in builds:
            builds[words] = build(words, POOL, "tofino", timeout=FIT_SECONDS)
        return builds[words]

    return get


def unique_names(full_name: str) -> set[str]:
    """The names BfRt's client accepts for `full_name`: every dotted suffix (bfrt_grpc's info_parse)."""
    parts = full_name.split(".")
    return {".".join(parts[i:]) for i in range(len(parts))}


def resolve(name: str, full_names: list[str]) -> str:
    """The one full name `name` stands for, as the client resolves it, or AssertionError."""
    matches = [full for full in full_names if name in unique_names(full)]
    assert len(matches) == 1, f"{name!r} resolves to {matches} among {sorted(full_names)}"
    return matches[0]


@needs_bf_p4c
def test_every_name_the_tofino_controller_uses_is_in_the_compiled_bfrt_json(fitted):
    from ina.p4.controller import P4Switch
    from ina.p4.tofino_device import COUNTER_ARRAYS, TofinoDevice, register_layout

    program = fitted(WORDS)
    tables = {table["name"]: table for table in json.loads(program.tofino.bfrt.read_text())["tables"]}
    log: list = []
    gc = fake_gc(log)
    device = TofinoDevice(gc.client, gc, "cpu0", cpu_port=64)
    device.registers = lambda name: [0] * POOL
    routes = [Route("10.0.0.1", "02:00:00:00:00:01", 1), Route("10.0.0.2", "02:00:00:00:00:02", 2)]
    switch = P4Switch(SwitchConfig(pool=POOL, words=WORDS), device, "10.0.0.254", "02:00:00:00:00:fe", routes, program)
    workers, ps = (Endpoint("10.0.0.1", 5000), Endpoint("10.0.0.1", 5001)), Endpoint("10.0.0.2", 6000)
    leaf = JobSpec(8, workers, 8, ps=ps, uplink=Uplink("10.0.0.2", 47100, rack=0, racks=2, slot_base=0, span=8, pool=POOL))
    for spec in (JobSpec(7, workers, 8, ps=ps), leaf, JobSpec(9, workers, 8, ps=ps, level="spine")):
        switch.register(spec)
        switch.deregister(spec.job)
    written = tofino_view(log)
    assert {entry[1] for entry in written} >= {"ina_switch", "ina_own_address", "ina_held", "ina_held_copy", "ina_jobs", "ina_workers",
                                               "ina_sources", "ina_levels", "ina_victims", "ina_replicas", "group"}  # fmt: skip
    fixed_tables = ("$pre.", "tf1.tm.")  # the SDE's own tables, in no program's bfrt.json
    for change, table_name, key, action, data in (entry for entry in log if not entry[1].startswith(fixed_tables)):
        table = tables[resolve(table_name, list(tables))]
        for field, _ in key:
            resolve(field, [k["name"] for k in table.get("key", [])])
        if change != "delete" and action is None:  # a RegisterParam's value, or the parser's value set of the switch's address
            assert table["table_type"] in ("RegisterParam", "ParserValueSet")
            assert {name for name, _ in data} == {d["singleton"]["name"] for d in table["data"]}
        elif change != "delete":
            spec_ = next(a for a in table["action_specs"] if a["name"] == resolve(action, [a["name"] for a in table["action_specs"]]))
            assert {name for name, _ in data} == {d["name"].rsplit(".", 1)[-1] for d in spec_["data"]}, (table_name, action)
    for name, fields in register_layout(WORDS, TOFINO_WORDS_PER_PASS).items():
        for field in fields:
            table = tables[resolve(field.array, list(tables))]
            assert table["table_type"] == "Register" and table["size"] == POOL * (GROUPS if name == "value" else 1)
            resolve(field.field, [d["singleton"]["name"] for d in table["data"]])
    for array in COUNTER_ARRAYS.values():
        table = tables[resolve(array, list(tables))]
        assert table["table_type"] == "Counter"
        assert "$COUNTER_SPEC_PKTS" in {d["singleton"]["name"] for d in table["data"]}
    for fixed in ("$pre.mgid", "$pre.node"):
        assert fixed not in tables or tables[fixed]  # the PRE's tables come with the SDE, not the program


HARMLESS_WARNINGS = (
    # the parsers' `out` metadata: bf-p4c zero-initializes every metadata field the program does not set
    "uninitialized-out-param",
    # the loop bf-p4c itself adds to pad a short frame to Tofino's minimum parse depth
    "min_parse_depth_accept_loop will be unrolled",
)


def functional_warnings(stderr: str) -> list[str]:
    """bf-p4c's warnings but those that change nothing the program does (HARMLESS_WARNINGS)."""
    lines = [line for line in stderr.splitlines() if "warning:" in line]
    return [line for line in lines if not any(harmless in line for harmless in HARMLESS_WARNINGS)]


@needs_bf_p4c
@pytest.mark.parametrize("words", [TOFINO_WORDS_PER_PASS, WORDS])
def test_bf_p4c_fits_the_tna_program_in_one_pass_and_over_word_passes_for_4096_slots(words, fitted):
    program = fitted(words)
    assert program.tofino is not None and program.tofino.binary.stat().st_size > 0
    assert json.loads(program.tofino.context.read_text())["program_name"] == "ina_tna"
    assert functional_warnings(program.warnings) == []
    stages = resources.stage_usage(json.loads(program.tofino.resources.read_text()))
    assert len(stages) <= 12 and sum(stage["stateful ALUs"] for stage in stages) == 10 + TOFINO_WORDS_PER_PASS


def test_a_slot_s_words_are_read_from_their_groups_cells():
    """Word i of slot s is cell s + g * P of ina_value_j, i = j + 23 g (p4src/word_passes.p4)."""
    from ina.p4.tofino_device import TofinoDevice, register_layout

    pool, gc = 4, fake_gc([])
    device = TofinoDevice(gc.client, gc, "cpu0", cpu_port=64)
    device.layout = register_layout(WORDS, TOFINO_WORDS_PER_PASS)
    cells: dict[str, dict[int, dict]] = {f"ina_value_{j}": {} for j in range(TOFINO_WORDS_PER_PASS)}
    for slot in range(pool):
        for word in range(WORDS):
            group, j = divmod(word, TOFINO_WORDS_PER_PASS)
            cells[f"ina_value_{j}"][slot + group * pool] = {"f1": [1000 * slot + word]}
    for array in cells.values():  # the last group's unused cells
        for index in range(GROUPS * pool):
            array.setdefault(index, {"f1": [7]})
    device._read_array = lambda array, index_field: cells[array]
    assert device.registers("value") == [1000 * slot + word for slot in range(pool) for word in range(WORDS)]


def test_the_tofino_switch_serves_every_routed_port_s_queues_by_priority(tmp_path):
    """ESA's egress queues on Tofino: each routed port's eight queues strict-priority, queue id 7
    first, addressed through the port's own queue map (tf1.tm.port.cfg, as bf_switchd reports it)."""
    from bfrt_fakes import tm_port_config, tofino_build

    from ina.p4.controller import P4Switch
    from ina.p4.tofino_device import TofinoDevice

    log: list = []
    gc = fake_gc(log)
    routes = [Route("10.0.0.1", "02:00:00:00:00:01", 1), Route("10.0.0.2", "02:00:00:00:00:02", 6)]
    P4Switch(SwitchConfig(pool=8, words=4), TofinoDevice(gc.client, gc, "cpu0", cpu_port=64), "10.0.0.254",
             "02:00:00:00:00:fe", routes, tofino_build(4, 8, tmp_path))  # fmt: skip
    written = {(dict(key)["pg_id"], dict(key)["pg_queue"]): dict(data)
               for change, table, key, _, data in log if table == "tf1.tm.queue.sched_cfg" and change == "modify"}  # fmt: skip
    expected = {}
    for port in (1, 6):
        config = tm_port_config(port)
        for qid in range(8):
            expected[(config["pg_id"], config["egress_qid_queues"][qid])] = {"min_priority": str(qid), "max_priority": str(qid)}
    assert written == expected


def test_a_port_with_fewer_than_eight_queues_stops_the_tofino_switch_with_what_to_change(monkeypatch):
    import bfrt_fakes

    from ina.p4.tofino_device import TofinoDevice

    gc = fake_gc([])
    device = TofinoDevice(gc.client, gc, "cpu0", cpu_port=64)
    device.info = gc.client.bfrt_info_get("ina")
    monkeypatch.setattr(bfrt_fakes, "tm_port_config", lambda port: {"pg_id": 0, "pg_port_nr": 0, "port_queues_count": 4,
                                                                    "egress_qid_queues": [0, 1, 2, 3]})  # fmt: skip
    with pytest.raises(RuntimeError, match="port 3 has 4 egress queues; ina's program uses 8"):
        device.serve_queues_by_priority([3])


def test_the_tofino_target_refuses_more_words_than_three_passes_step():
    from ina.p4.build import check

    most = MAX_WORDS["tofino"]
    assert most == 3 * TOFINO_WORDS_PER_PASS
    check("tofino", most, 4096)
    with pytest.raises(ValueError, match=f"--words must be in 1..{most} for the tofino program"):
        check("tofino", most + 1, 4096)


def test_without_the_sde_the_tofino_switch_says_what_to_set(monkeypatch):
    from ina.p4 import tofino_device

    if importlib.util.find_spec("bfrt_grpc") is not None:
        pytest.skip("the SDE's bfrt_grpc is importable here")
    monkeypatch.delenv("SDE_INSTALL", raising=False)
    with pytest.raises(tofino_device.BfrtMissing, match="set SDE_INSTALL"):
        tofino_device.bfrt_client()
    monkeypatch.setenv("SDE_INSTALL", "/nonexistent-sde")
    with pytest.raises(tofino_device.BfrtMissing, match="no lib/python3.*/site-packages/tofino under SDE_INSTALL"):
        tofino_device.bfrt_client()


def test_the_sde_client_is_found_under_sde_install(tmp_path, monkeypatch):
    from ina.p4 import tofino_device

    package = tmp_path / "lib" / "python3.11" / "site-packages" / "tofino" / "bfrt_grpc"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "client.py").write_text("FOUND = 'the SDE client'\n")
    monkeypatch.setenv("SDE_INSTALL", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))  # sys.path is restored after the test, with what the finder added
    try:
        assert tofino_device.bfrt_client().FOUND == "the SDE client"
    finally:
        for name in ("bfrt_grpc.client", "bfrt_grpc"):
            sys.modules.pop(name, None)
