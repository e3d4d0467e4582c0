"""`ina p4 build`: compile the P4 switch (docs/p4.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ina.p4 import build as p4build
from ina.p4 import resources, toolchain
from ina.p4 import tools as p4tools
from ina.p4.toolchain import ToolMissing


def register(subcommands: Any) -> None:
    """The `ina` CLI's convention: add the subcommand and set `run`."""
    p4 = subcommands.add_parser("p4", help="build the P4 switch, check its tools", description="Build and inspect ina's P4 programs.")
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
    tools = actions.add_parser("tools", help="say which P4 tools ina finds, where, and what each target lacks", description=(
        "Print each P4 tool ina runs (p4c, simple_switch_grpc, bf-p4c, p4testgen): where ina found it ($INA_<TOOL> or "
        "PATH), the version it reports, and the files a compiler's install lacks; then what each target still needs. "
        "Exits 1 when a target named with --target (default: every target) lacks something."))  # fmt: skip
    tools.add_argument("--target", action="append", choices=list(toolchain.TARGETS), help="the target(s) the exit status is about")
    tools.set_defaults(run=run_tools)


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


def run_tools(args: argparse.Namespace) -> int:
    states = p4tools.survey()
    print(p4tools.render(states))
    return 1 if any(p4tools.target_gaps(states, target) for target in args.target or toolchain.TARGETS) else 0
