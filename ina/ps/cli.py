"""`ina ps`: run the parameter server (docs/ps.md).

`register(subcommands)` plugs it into the `ina` CLI (ina/cli.py); `python -m ina.ps` runs it alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ina.net.service import access_from_args, add_access_options, add_registry_options, registry_from_args, run_service
from ina.net.udp import parse_address
from ina.protocol import DEFAULT_PS_CONTROL_PORT
from ina.ps.limits import MAX_WORDS
from ina.ps.native import ps_core
from ina.ps.server import PSServer

DESCRIPTION = "Run the ina parameter server: completes what the switch does not, or aggregates alone, over UDP."
EPILOG = ("The PS runs its native data plane (C, ina/ps/_native.c) wherever it was built, else the much slower Python "
          "reference; INA_NATIVE_PACKETS=0 forces the Python one. The start-up line says which runs ('packets native' or "
          "'packets python').")  # fmt: skip
DEFAULT_PS_PORT = 47101


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the PS's options to `parser`."""
    parser.add_argument("--listen", default=f"127.0.0.1:{DEFAULT_PS_PORT}", help="UDP data address (default %(default)s)")
    parser.add_argument("--control", default=f"127.0.0.1:{DEFAULT_PS_CONTROL_PORT}", help="HTTP control address (default %(default)s)")
    parser.add_argument("--words", type=int, default=64, help="32-bit payload words per DATA packet K; must match the switch and workers (default %(default)s)")
    parser.add_argument("--max-words", type=int, default=MAX_WORDS,
                        help="most words per packet a PS-only job may register for itself (default %(default)s: one UDP datagram)")
    parser.add_argument("--flush-delay", type=float, default=0.002, help="seconds a chunk may stay incomplete before the PS asks the switch to flush it (default %(default)s)")
    parser.add_argument("--piece-timeout", type=float, default=60.0, help="seconds before the pieces of a chunk that never completes are dropped (default %(default)s)")
    parser.add_argument("--result-retention", type=int, default=64, help="results kept per job for resends; at least 4 x the job's window (default %(default)s)")
    parser.add_argument("--batch", type=int, default=256, help="datagrams per receive call (default %(default)s)")
    add_access_options(parser)
    add_registry_options(parser)
    return parser


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `ps` as a subcommand of the `ina` CLI; dispatch to `run(args)`."""
    return configure(subparsers.add_parser("ps", help="run the parameter server", description=DESCRIPTION, epilog=EPILOG))


def register(subcommands: Any) -> None:
    """The `ina` CLI's convention: add the subcommand and set `run`."""
    add_parser(subcommands).set_defaults(run=run)


def build(args: argparse.Namespace) -> PSServer:
    """The server the arguments describe; ValueError says which option to change."""
    core = ps_core(args.words, flush_delay=args.flush_delay, piece_timeout=args.piece_timeout,
                   result_retention=args.result_retention, max_words=args.max_words, messages=min(args.batch, 64))
    listen, control = parse_address(args.listen, "--listen"), parse_address(args.control, "--control")
    return PSServer(core, listen, control, batch=args.batch, access=access_from_args(args), registry=registry_from_args(args))


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C or SIGTERM; exit status 2 on a bad configuration."""
    return run_service("ps", lambda: build(args), lambda server: f"words {server.core.words}, packets {server.path}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = configure(argparse.ArgumentParser(prog="python -m ina.ps", description=DESCRIPTION, epilog=EPILOG))
    return run(parser.parse_args(argv))
