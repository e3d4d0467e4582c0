"""The options and server of `ina switch --target bmv2|tofino` (ina/switches.py chooses the target).

Importing this module stays cheap: the P4 runtime packages (the 'p4' extra) and the SDE's client are
imported only when a P4 switch is built.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ina.net.service import access_from_args, registry_from_args
from ina.net.udp import parse_address
from ina.switch.cli import switch_config


def add_options(parser: argparse.ArgumentParser) -> None:
    """The P4 targets' options: routes and the switch's MAC for both, then each target's own."""
    p4 = parser.add_argument_group("--target bmv2 and tofino (need the 'p4' extra; docs/p4.md)")
    p4.add_argument("--route", action="append", default=[], metavar="IP=MAC@PORT",
                    help="where a worker or PS host is reached: its MAC and switch port (repeat)")
    p4.add_argument("--mac", default="02:00:00:00:00:01", help="the switch's own MAC (default %(default)s)")
    bmv2 = parser.add_argument_group("--target bmv2 (needs p4c and simple_switch_grpc)")
    bmv2.add_argument("--interface", action="append", default=[], metavar="PORT@IFACE", help="a BMv2 port on a Linux interface (repeat)")
    bmv2.add_argument("--bmv2-log", help="file for BMv2's output (default: a temporary file)")
    tofino = parser.add_argument_group("--target tofino (needs bf-p4c, and bf_switchd of the SDE at $SDE_INSTALL running)")
    tofino.add_argument("--bfrt", default="127.0.0.1:50052", help="bf_switchd's BfRt gRPC address (default %(default)s)")
    tofino.add_argument("--cpu-interface", metavar="IFACE", help="the Linux interface of the switch's CPU Ethernet port (idle sweeps enter there)")
    tofino.add_argument("--cpu-port", type=int, default=64, help="the device port of that CPU Ethernet port (default %(default)s)")
    tofino.add_argument("--pipe", type=int, default=0, help="the pipe whose ports carry ina's traffic (default %(default)s)")


def build(args: argparse.Namespace) -> Any:
    """The P4 switch server for `args.target`; ValueError says which option to change."""
    from ina.p4.entries import Route
    from ina.p4.server import P4SwitchServer  # the 'p4' extra: imported only for these targets

    config, access = switch_config(args), access_from_args(args)
    listen, control = parse_address(args.listen, "--listen"), parse_address(args.control, "--control")
    routes = [Route.parse(text) for text in args.route]
    open_device = _bmv2(args) if args.target == "bmv2" else _tofino(args, routes)
    try:
        return P4SwitchServer(config, listen, control, open_device, routes, args.mac, access=access,
                              registry=registry_from_args(args))  # fmt: skip
    except RuntimeError as error:  # a missing tool, or the switch refusing to start or to load the program
        raise ValueError(str(error)) from None


def _bmv2(args: argparse.Namespace) -> Any:
    from ina.p4.bmv2_device import Bmv2Device

    interfaces = {}
    for text in args.interface:
        port, _, name = text.partition("@")
        if not port.isdigit() or not name:
            raise ValueError(f"--interface {text!r}: expected PORT@IFACE, e.g. 1@veth1")
        interfaces[int(port)] = name
    log = Path(args.bmv2_log) if args.bmv2_log else None
    return lambda: Bmv2Device.start(interfaces, log=log, priority_queues=args.queues == "priority")


def _tofino(args: argparse.Namespace, routes: list) -> Any:
    from ina.p4.tofino_device import PIPE_SHIFT, TofinoDevice

    if not args.cpu_interface:
        raise ValueError("the Tofino switch needs --cpu-interface IFACE: the Linux interface of its CPU Ethernet port, "
                         "where the idle sweep's packets enter (BfRt has no packet-out)")  # fmt: skip
    elsewhere = sorted({route.port for route in routes if route.port >> PIPE_SHIFT != args.pipe})
    if elsewhere:
        raise ValueError(f"--route ports {elsewhere} are not in pipe {args.pipe} (ports {args.pipe << PIPE_SHIFT}.."
                         f"{((args.pipe + 1) << PIPE_SHIFT) - 1}): each Tofino pipe keeps its own registers, so every "
                         "worker and PS must be reached through the pipe named by --pipe")  # fmt: skip
    return lambda: TofinoDevice.connect(args.bfrt, args.cpu_interface, args.cpu_port, pipe=args.pipe)


def describe(server: Any) -> str:
    """The start-up line's tail: the target and the settings."""
    config = server.switch.settings
    return f"{server.device.target}, pool {config.pool}, words {config.words}, policy {config.policy}, queues {config.queues}"
