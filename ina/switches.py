"""`ina switch`: one command for every switch target, chosen with `--target`.

This module sits above all of them, so that no target's package imports another's: `software` is
`ina.switch` (the reference data plane in this process), `bmv2` and `tofino` are `ina.p4` (ina's P4
program on BMv2 or on a Tofino, through the same controller).
"""

from __future__ import annotations

import argparse
from typing import Any

from ina.net.service import run_service
from ina.p4 import switch_cli as p4_cli
from ina.switch import cli as software_cli

TARGETS = ("software", "bmv2", "tofino")
DESCRIPTION = ("Run the ina switch: in-network aggregation over UDP, with a JSON/HTTP control API; the software "
               "switch in this process, or ina's P4 program on BMv2 or on a Tofino.")  # fmt: skip
SOFTWARE_ONLY = {"drop": 0.0, "duplicate": 0.0, "reorder": 0.0}


def register(subcommands: Any) -> None:
    """The `ina` CLI's convention: add the subcommand and set `run`."""
    parser = subcommands.add_parser("switch", help="run the switch (software, BMv2 or Tofino)", description=DESCRIPTION,
                                    epilog=software_cli.EPILOG)  # fmt: skip
    parser.add_argument("--target", choices=TARGETS, default="software",
                        help="software: this process is the switch; bmv2, tofino: ina's P4 program there (docs/p4.md) (default %(default)s)")
    software_cli.configure(parser)
    p4_cli.add_options(parser)
    parser.set_defaults(run=run)


def build(args: argparse.Namespace) -> Any:
    """The server for `args.target`; ValueError says which option to change."""
    if args.target == "software":
        return software_cli.build(args)
    if any(getattr(args, name) != default for name, default in SOFTWARE_ONLY.items()):
        raise ValueError(f"fault injection is the software switch's; on {args.target} shape the links instead (tc netem)")
    return p4_cli.build(args)


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C or SIGTERM; exit status 2 on a bad configuration."""
    describe = software_cli.describe if args.target == "software" else p4_cli.describe
    return run_service("switch", lambda: build(args), describe)
