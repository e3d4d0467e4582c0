"""The Tofino compiler's own resource numbers for a build, as one table: per MAU stage the SRAM and
TCAM blocks, stateful (meter) ALUs, gateways and logical tables bf-p4c placed there, and the totals
(bf-p4c's pipe/logs/resources.json, schema in p4c's backends/tofino/compiler_interfaces)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLUMNS = ("stage", "SRAM", "TCAM", "stateful ALUs", "gateways", "tables")
TOFINO1_STAGE = {"SRAM": 80, "TCAM": 24, "stateful ALUs": 4, "gateways": 16, "tables": 16}
"""What one Tofino 1 MAU stage has: 80 SRAM and 24 TCAM blocks, 4 meter/stateful ALUs, 16 gateways
and 16 logical tables."""


def stage_usage(resources: dict[str, Any]) -> list[dict[str, int]]:
    """Per MAU stage of every gress together, the blocks and units in use."""
    stages = resources.get("resources", resources).get("mau", {}).get("mau_stages", [])
    rows = []
    for stage in sorted(stages, key=lambda s: s["stage_number"]):
        meters = stage.get("meter_alus", {}).get("meters", [])
        rows.append({
            "stage": stage["stage_number"],
            "SRAM": len(stage.get("rams", {}).get("srams", [])),
            "TCAM": len(stage.get("tcams", {}).get("tcams", [])),
            "stateful ALUs": sum(1 for meter in meters if any(u.get("used_for") == "stateful_ram" for u in meter.get("usages", []))),
            "gateways": len(stage.get("gateways", {}).get("gateways", [])),
            "tables": len(stage.get("logical_tables", {}).get("ids", [])),
        })  # fmt: skip
    return rows


def phv_usage(phv: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """Per PHV container width, the containers holding a field and those the device has (bf-p4c's
    logs/phv.json)."""
    used: dict[int, int] = {}
    for container in phv.get("containers", []):
        if container.get("slices"):
            used[container["bit_width"]] = used.get(container["bit_width"], 0) + 1
    total: dict[int, int] = {}
    for group in phv.get("resources", []):
        total[group["bit_width"]] = total.get(group["bit_width"], 0) + group["num_containers"]
    return {width: (used.get(width, 0), total[width]) for width in sorted(total)}


def totals(rows: list[dict[str, int]]) -> dict[str, int]:
    """Each resource of `stage_usage` summed over the stages."""
    return {column: sum(row[column] for row in rows) for column in COLUMNS[1:]}


def phv_beside(path: Path) -> dict[int, tuple[int, int]]:
    """`phv_usage` of the phv.json bf-p4c writes beside its resources.json `path` ({} where it did not)."""
    phv_file = path.with_name("phv.json")
    return phv_usage(json.loads(phv_file.read_text())) if phv_file.exists() else {}


def summary(path: Path) -> str:
    """A printable table of `stage_usage`, with the totals and what a stage has."""
    rows = stage_usage(json.loads(path.read_text()))
    lines = ["  ".join(f"{c:>13}" for c in COLUMNS)]
    lines += ["  ".join(f"{row[c]:>13}" for c in COLUMNS) for row in rows]
    lines.append("  ".join([f"{'total':>13}"] + [f"{total:>13}" for total in totals(rows).values()]))
    lines.append("  ".join([f"{'per stage':>13}"] + [f"{TOFINO1_STAGE[c]:>13}" for c in COLUMNS[1:]]))
    phv = phv_beside(path)
    if phv:
        lines.append("PHV containers used: " + ", ".join(f"{used}/{total} of {width} bits" for width, (used, total) in phv.items()))
    return f"bf-p4c resources ({path}): {len(rows)} MAU stages used\n" + "\n".join(lines)
