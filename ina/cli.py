"""The ``ina`` command line: one subcommand per module.

Each module named in :data:`COMMANDS` adds its subcommand with ``register(subcommands)`` and
sets ``run`` (parsed arguments -> exit status). Registering must stay cheap (no torch import),
so that ``ina switch`` starts fast on a host that only forwards packets.
"""
import argparse
import importlib
import sys
from typing import Optional, Sequence

# One line per subcommand.
COMMANDS = ("ina.demo", "ina.switches", "ina.ps.cli", "ina.p4.cli", "ina.testbed.cli", "ina.top")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ina", description="In-network aggregation of THC-compressed gradients for torch DDP."
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        importlib.import_module(module).register(subcommands)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
