"""The TNA program's behaviour without a Tofino: p4testgen's Tofino target generated cases from
p4src/ina_tna.p4 (tests/vectors/p4testgen/, `python tests/vectors/make_p4testgen_cases.py`), and
every case the software switch can express must give the packet the program gives. Cases without a
software counterpart are skipped by kind and counted (`pytest -s` prints the tally)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from testgen_replay import Case, NoEquivalent, expected, replay, sent_result

VECTORS = Path(__file__).parent / "vectors" / "p4testgen"
FILES = sorted(VECTORS.glob("*.json"))


def _masked(data: bytes, mask: bytes) -> bytes:
    return bytes(b & m for b, m in zip(data, mask))


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_every_expressible_generated_case_gives_the_software_switchs_packet(path):
    document = json.loads(path.read_text())
    words, pool = document["words"], document["pool"]
    replayed, skipped, mismatches = 0, Counter(), []
    for raw in document["cases"]:
        case = Case(**raw)
        want = expected(case)
        if want is None:
            skipped["a later pass (the recirculation port): p4testgen follows one pass"] += 1
            continue
        try:
            got = replay(case, words, pool)
        except NoEquivalent as reason:
            skipped[reason.why] += 1
            continue
        if not want and sent_result(got):
            skipped["a RESULT: p4testgen does not follow the multicast replication"] += 1
            continue
        replayed += 1
        got_masked = [(d.addr, _masked(d.data, mask)) for d, (_, _, mask) in zip(got, want)]
        if len(got) != len(want) or got_masked != [(dst, _masked(data, mask)) for dst, data, mask in want]:
            mismatches.append(f"{case.name}: TNA {[(d, x.hex()) for d, x, _ in want]} software {[(d.addr, d.data.hex()) for d in got]}")
    print(f"\n{path.name}: {len(document['cases'])} cases, {replayed} replayed, {sum(skipped.values())} skipped:")
    for why, count in skipped.most_common():
        print(f"  {count:4d}  {why}")
    assert not mismatches, "\n".join(mismatches[:10])
    assert replayed >= len(document["cases"]) // 4, "too few generated cases could be replayed"


def test_the_cases_were_generated_from_the_p4_sources_as_they_are():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_p4testgen_cases", VECTORS.parent / "make_p4testgen_cases.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    for path in FILES:
        assert json.loads(path.read_text())["sources"] == generator.sources_digest(), \
            f"p4src/ changed since {path.name} was generated: rerun python tests/vectors/make_p4testgen_cases.py"  # fmt: skip
