"""`ina p4 build`: compile the P4 switch (docs/p4.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ina.p4 import build as p4build
from ina.p4 import resources
from ina.p4.toolchain import ToolMissing


def register(subcommands: Any) -> None:
    """The `ina` CLI's convention: add the subcommand and set `run`."""
    p4 = subcommands.add_parser("p4", help="build the P4 switch", description="Build and inspect ina's P4 programs.")
    actions = p4.add_subparsers(dest="p4_command", required=True, metavar="ACTION")
    compile_ = actions.add_parser("build", help="compile p4src/ with p4c or bf-p4c", description=(
        "Compile p4src/ for a target with K words per packet and P slots, and print the paths of what the "
        "compiler wrote: for bmv2 the pipeline (BMv2 JSON) and its P4Info (p4c, found on PATH or at $INA_P4C); "
        "for tofino tofino.bin, context.json, bfrt.json and the P4Info, and the compiler's resource summary "
        "(bf-p4c, found on PATH or at $INA_BF_P4C)."))  # fmt: skip
    compile_.add_argument("--target", choices=p4build.TARGETS, default="bmv2", help="P4 target (default %(default)s)")
    compile_.add_argument("--words", type=int, default=p4build.DEFAULT_WORDS, help="32-bit payload words per packet K "
                          f"(default %(default)s; on tofino at most {p4build.MAX_WORDS['tofino']}: "
                          f"{p4build.TOFINO_WORDS_PER_PASS} a pass, the rest over word passes)")
    compile_.add_argument("--pool", type=int, default=64, help="aggregator slots P, a power of two (default %(default)s)")
    compile_.add_argument("--word-group", type=int, help="the words one pass steps; a larger K takes a word pass for "
                          f"each further group (default: all K on bmv2, {p4build.TOFINO_WORDS_PER_PASS} on tofino). On bmv2 "
                          "K must be a multiple of it: BMv2 then runs the word passes the Tofino program needs, for testing them")
    compile_.add_argument("--out", help="output folder (default: a cache folder keyed by the inputs)")
    compile_.set_defaults(run=run_build)


def run_build(args: argparse.Namespace) -> int:
    from pathlib import Path

    try:
        result = p4build.build(args.words, args.pool, args.target, Path(args.out) if args.out else None, word_group=args.word_group)
    except (ValueError, ToolMissing, p4build.BuildError) as error:
        print(f"ina p4 build: {error}", file=sys.stderr)
        return 2
    print(f"pipeline {result.pipeline}\np4info   {result.p4info}")
    if result.tofino is not None:
        print(f"context  {result.tofino.context}\nbfrt     {result.tofino.bfrt}")
        print(resources.summary(result.tofino.resources))
    if result.warnings.strip():
        print(result.warnings, file=sys.stderr, end="")
    return 0
