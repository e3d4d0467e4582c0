"""Generate the TNA program's p4testgen cases: `python tests/vectors/make_p4testgen_cases.py`.

Runs p4testgen's Tofino target on p4src/ina_tna.p4 (K and P as the switch vectors'), then runs every
PTF test it wrote against a stand-in for the PTF and BfRt harness that records instead of sending:
each case's table entries, default entries, initial register values, input frame and expected frame
(or none). They land in tests/vectors/p4testgen/, which tests/test_p4_testgen.py replays through
the software switch without p4testgen. Rerun this when p4src/ changes (the test says when the
program no longer matches the cases' digest).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from ina.p4 import toolchain

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = HERE / "p4testgen"
WORDS, POOL = 4, 8
PACKET_BITS = 8 * 256
"""The longest input frame p4testgen may choose: a DATA of K = 4 words is 78 bytes."""
PROGRAM = ROOT / "p4src" / "ina_tna.p4"


DEFINES = ["-D__TARGET_TOFINO__=1", "-DINA_TESTGEN", f"-DWORDS={WORDS}", f"-DPOOL={POOL}"]
"""The program p4testgen compiles: ina_tna.p4 for K and P, with the assumptions its cases need."""


def sources_digest(sources: Path = ROOT / "p4src") -> str:
    """What the cases were generated from: the program p4testgen reads, that is p4src/ through the C
    preprocessor with DEFINES (the architecture's own includes left out), token by token, so that
    comments, layout and code compiled only for other K and P leave the cases as valid as they are."""
    with tempfile.TemporaryDirectory() as includes:
        for name in ("core.p4", "tna.p4"):
            (Path(includes) / name).write_text("")
        command = ["cpp", "-P", "-undef", "-nostdinc", "-I", str(sources), "-I", includes, *DEFINES, str(sources / PROGRAM.name)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
    return hashlib.sha256(" ".join(done.stdout.split()).encode()).hexdigest()[:16]


# -- a stand-in for the harness a generated PTF test runs in ----------------------------------------


class _Tuple:
    def __init__(self, name: str, value: Any = None, mask: Any = None, **extra: Any) -> None:
        self.name, self.value = name, value


class _Table:
    def __init__(self, name: str, case: dict[str, Any]) -> None:
        self.name, self.case = name, case

    def make_key(self, fields: list[_Tuple]) -> dict[str, int]:
        return {f.name: f.value for f in fields}

    def make_data(self, fields: list[_Tuple], action: str | None = None) -> tuple[str | None, dict[str, int]]:
        return action, {f.name: f.value for f in fields}

    def entry_add(self, target: Any, keys: list, datas: list) -> None:
        for key, (action, params) in zip(keys, datas):
            if set(key) == {"$REGISTER_INDEX"}:
                self.case["registers"].append({"register": self.name, "index": key["$REGISTER_INDEX"], "fields": params})
            else:
                self.case["entries"].append({"table": self.name, "key": key, "action": action, "params": params})

    def default_entry_set(self, target: Any, data: tuple) -> None:
        self.case["entries"].append({"table": self.name, "key": {}, "action": data[0], "params": data[1]})


class _Mask:
    def __init__(self, packet: bytes) -> None:
        self.packet, self.masks = packet, []

    def set_do_not_care(self, offset: int, bits: int) -> None:
        self.masks.append([offset, bits])


def _harness(case: dict[str, Any]) -> dict[str, Any]:
    """Modules named as the generated file imports them, recording into `case`."""

    class BfRuntimeTest:
        def setUp(self, *args: Any) -> None:
            self.interface = types.SimpleNamespace(bfrt_info_get=lambda name: types.SimpleNamespace(table_get=lambda t: _Table(t, case)))

        def tearDown(self) -> None:
            pass

    def send_packet(test: Any, port: int, packet: bytes) -> None:
        case["send"] = {"port": port, "hex": bytes(packet).hex()}

    def verify_packet(test: Any, packet: _Mask, port: int) -> None:
        case["expect"] = {"port": port, "hex": bytes(packet.packet).hex(), "masks": packet.masks}

    contents = {
        "bfruntime_client_base_tests": {"BfRuntimeTest": BfRuntimeTest},
        "ptf": {},
        "ptf.mask": {"Mask": _Mask},
        "ptf.testutils": {"send_packet": send_packet, "verify_packet": verify_packet,
                          "verify_no_other_packets": lambda *a, **k: None},  # fmt: skip
        "bfrt_grpc": {},
        "bfrt_grpc.bfruntime_pb2": {},
        "bfrt_grpc.client": {"KeyTuple": _Tuple, "DataTuple": _Tuple, "Target": lambda **kw: kw},
    }
    modules = {name: types.ModuleType(name) for name in contents}
    for name, module in modules.items():
        module.__dict__.update(contents[name])
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
    return modules


def record(test_file: Path) -> list[dict[str, Any]]:
    """Every test class in a generated PTF file, run against the recording harness."""
    cases: list[dict[str, Any]] = []
    case: dict[str, Any] = {}
    saved = {name: sys.modules.get(name) for name in _harness(case)}
    namespace: dict[str, Any] = {"__name__": "p4testgen_case"}
    try:
        sys.modules.update(_harness(case))
        exec(compile(test_file.read_text(), str(test_file), "exec"), namespace)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    for name in sorted((n for n in namespace if n.startswith("Test") and n[4:].isdigit()), key=lambda n: int(n[4:])):
        case.clear()
        case.update({"name": name, "entries": [], "registers": [], "send": None, "expect": None})
        test = namespace[name]()
        test.setUp()
        test.runTestImpl()
        cases.append(json.loads(json.dumps(case)))
    return cases


def generate(p4testgen: str, max_tests: int, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        command = [p4testgen, "--target", "tofino", "--arch", "tna", "--std", "p4-16", *DEFINES,
                   "-I", str(ROOT / "p4src"), "--test-backend", "ptf", "--max-tests", str(max_tests), "--seed", str(seed),
                   # front ports only (a frame from the recirculation port is a later pass of the program's own),
                   # paths chosen to reach statements not yet covered
                   "--port-ranges", "0:63", "--packet-size-range", f"0:{PACKET_BITS}", "--path-selection", "GREEDY_STATEMENT_SEARCH", "--track-coverage", "STATEMENTS",
                   "--out-dir", folder, str(PROGRAM)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"p4testgen failed ({' '.join(command)}):\n{done.stderr or done.stdout}")
        cases = [case for test_file in sorted(Path(folder).glob("*.py")) for case in record(test_file)]
    shown = [part if not part.startswith("/") else Path(part).name for part in command]
    return {"program": PROGRAM.name, "words": WORDS, "pool": POOL, "sources": sources_digest(),
            "command": " ".join(shown[:shown.index("--out-dir")]), "cases": cases}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--p4testgen", help="the p4testgen binary (default: $INA_P4TESTGEN, else on PATH)")
    parser.add_argument("--max-tests", type=int, default=300, help="how many cases p4testgen writes (default %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="p4testgen's seed (default %(default)s)")
    args = parser.parse_args()
    document = generate(args.p4testgen or toolchain.require("p4testgen"), args.max_tests, args.seed)
    OUT.mkdir(exist_ok=True)
    path = OUT / f"ina_tna_K{WORDS}_P{POOL}.json"
    path.write_text(json.dumps(document, indent=1) + "\n")
    print(f"{len(document['cases'])} cases -> {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
