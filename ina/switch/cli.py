"""`ina switch`: run the software switch (docs/switch.md).

`register(subcommands)` plugs it into the `ina` CLI (ina/cli.py); `python -m ina.switch` runs it alone.
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence

from ina.net.service import access_from_args, add_access_options, add_registry_options, registry_from_args, run_service
from ina.net.udp import parse_address
from ina.protocol import DEFAULT_SWITCH_CONTROL_PORT, INA_PORT
from ina.switch.config import POLICIES, SwitchConfig
from ina.switch.server import Faults, SwitchServer

DESCRIPTION = "Run the ina switch (software, or the P4 program on BMv2): in-network aggregation over UDP, with a JSON/HTTP control API."
EPILOG = ("The software switch runs its native data plane (C, ina/switch/_native.c) wherever it was built, else the "
          "Python reference with a warning; INA_NATIVE_PACKETS=0 in the environment forces the Python reference. "
          "The start-up line says which runs ('packets native' or 'packets python').")  # fmt: skip
TARGETS = ("software", "bmv2")


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the switch's options to `parser`."""
    parser.add_argument("--listen", default=f"127.0.0.1:{INA_PORT}", help="UDP data address (default %(default)s)")
    parser.add_argument("--control", default=f"127.0.0.1:{DEFAULT_SWITCH_CONTROL_PORT}", help="HTTP control address (default %(default)s)")
    parser.add_argument("--pool", type=int, default=64, help="aggregator slots P, a power of two (default %(default)s)")
    parser.add_argument("--words", type=int, default=64, help="32-bit payload words per packet K (default %(default)s)")
    parser.add_argument("--policy", choices=POLICIES, default="esa",
                        help="pool policy: esa (preemptive, by priority), atp (first come), static (a fixed partition per job) (default %(default)s)")
    parser.add_argument("--slot-timeout", type=float, default=1.0, help="seconds before an idle partial is flushed to its PS (default %(default)s)")
    parser.add_argument("--batch", type=int, default=1024, help="most datagrams per processing call (default %(default)s)")
    parser.add_argument("--target", choices=TARGETS, default="software",
                        help="software: this process is the switch; bmv2: run the P4 switch on BMv2 (docs/p4.md) (default %(default)s)")
    p4 = parser.add_argument_group("--target bmv2 (needs p4c, simple_switch_grpc and the 'p4' extra)")
    p4.add_argument("--interface", action="append", default=[], metavar="PORT@IFACE", help="a BMv2 port on a Linux interface (repeat)")
    p4.add_argument("--route", action="append", default=[], metavar="IP=MAC@PORT",
                    help="where a worker or PS host is reached: its MAC and BMv2 port (repeat)")
    p4.add_argument("--mac", default="02:00:00:00:00:01", help="the switch's own MAC (default %(default)s)")
    p4.add_argument("--bmv2-log", help="file for BMv2's output (default: a temporary file)")
    add_access_options(parser)
    add_registry_options(parser)
    faults = parser.add_argument_group("fault injection (applied to received and sent packets)")
    faults.add_argument("--drop", type=float, default=0.0, help="drop rate")
    faults.add_argument("--duplicate", type=float, default=0.0, help="duplicate rate")
    faults.add_argument("--reorder", type=float, default=0.0, help="reorder rate")
    faults.add_argument("--fault-seed", type=int, default=0, help="seed of the fault streams")
    return parser


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `switch` as a subcommand of the `ina` CLI; dispatch to `run(args)`."""
    return configure(subparsers.add_parser("switch", help="run the software switch", description=DESCRIPTION, epilog=EPILOG))


def register(subcommands: Any) -> None:
    """The `ina` CLI's convention: add the subcommand and set `run`."""
    add_parser(subcommands).set_defaults(run=run)


def build(args: argparse.Namespace) -> Any:
    """The server the arguments describe; ValueError says which option to change."""
    config = SwitchConfig(pool=args.pool, words=args.words, policy=args.policy, slot_timeout=args.slot_timeout)
    access = access_from_args(args)
    if args.target == "bmv2":
        return _build_bmv2(args, config, access)
    faults = Faults(args.drop, args.duplicate, args.reorder, args.fault_seed)
    faults.injectors()  # validates the rates
    listen, control = parse_address(args.listen, "--listen"), parse_address(args.control, "--control")
    return SwitchServer(config, listen, control, faults, batch=args.batch, access=access, registry=registry_from_args(args))


def _build_bmv2(args: argparse.Namespace, config: SwitchConfig, access: Any) -> Any:
    from pathlib import Path

    from ina.p4.server import P4SwitchServer  # the 'p4' extra: imported only for this target
    from ina.p4.controller import Route

    if any((args.drop, args.duplicate, args.reorder)):
        raise ValueError("fault injection is the software switch's; on BMv2 shape the links instead (tc netem)")
    interfaces = {}
    for text in args.interface:
        port, _, name = text.partition("@")
        if not port.isdigit() or not name:
            raise ValueError(f"--interface {text!r}: expected PORT@IFACE, e.g. 1@veth1")
        interfaces[int(port)] = name
    listen, control = parse_address(args.listen, "--listen"), parse_address(args.control, "--control")
    routes = [Route.parse(text) for text in args.route]
    try:
        return P4SwitchServer(config, listen, control, interfaces, routes, args.mac,
                              log=Path(args.bmv2_log) if args.bmv2_log else None, access=access,
                              registry=registry_from_args(args))  # fmt: skip
    except RuntimeError as error:  # a missing tool, or BMv2 refusing to start or to load the program
        raise ValueError(str(error)) from None


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C or SIGTERM; exit status 2 on a bad configuration."""

    def describe(server: Any) -> str:
        config = server.switch.settings if args.target == "bmv2" else server.core.settings
        target = "BMv2, " if args.target == "bmv2" else ""
        path = "" if args.target == "bmv2" else f", packets {server.path}"
        return f"{target}pool {config.pool}, words {config.words}, policy {config.policy}{path}"

    return run_service("switch", lambda: build(args), describe)


def main(argv: Sequence[str] | None = None) -> int:
    parser = configure(argparse.ArgumentParser(prog="python -m ina.switch", description=DESCRIPTION, epilog=EPILOG))
    return run(parser.parse_args(argv))
