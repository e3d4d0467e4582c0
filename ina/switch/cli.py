"""The software switch's command line (docs/switch.md): `python -m ina.switch`, and the options and
server that `ina switch --target software` (ina/switches.py, which chooses among targets) takes from here.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from ina.net.service import access_from_args, add_access_options, add_registry_options, registry_from_args, run_service
from ina.net.udp import parse_address
from ina.protocol import DEFAULT_SWITCH_CONTROL_PORT, INA_PORT
from ina.switch.config import POLICIES, QUEUES, SwitchConfig
from ina.switch.server import Faults, SwitchServer

DESCRIPTION = "Run the ina software switch: in-network aggregation over UDP, with a JSON/HTTP control API."
EPILOG = ("The software switch runs its native data plane (C, ina/switch/_native.c) wherever it was built, else the "
          "Python reference with a warning; INA_NATIVE_PACKETS=0 in the environment forces the Python reference. "
          "The start-up line says which runs ('packets native' or 'packets python').")  # fmt: skip


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the software switch's options to `parser`: those of every target, then its own."""
    add_common_options(parser)
    parser.add_argument("--batch", type=int, default=1024, help="most datagrams per processing call (default %(default)s)")
    faults = parser.add_argument_group("fault injection (applied to received and sent packets; the software switch only)")
    faults.add_argument("--drop", type=float, default=0.0, help="drop rate")
    faults.add_argument("--duplicate", type=float, default=0.0, help="duplicate rate")
    faults.add_argument("--reorder", type=float, default=0.0, help="reorder rate")
    faults.add_argument("--fault-seed", type=int, default=0, help="seed of the fault streams")
    parser.add_argument("--max-pps", type=float, default=0.0,
                        help="serve at most this many packets a second, to study a switch as slow as BMv2 with the "
                             "reference (docs/switch.md); 0: as fast as it can (default)")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="milliseconds every packet the switch sends is held, a longer path where the kernel cannot "
                             "delay links (docs/switch.md); 0: none (default)")
    return parser


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """The options every switch target takes: addresses, the pool, the policy, the control API's access."""
    parser.add_argument("--listen", default=f"127.0.0.1:{INA_PORT}", help="UDP data address (default %(default)s)")
    parser.add_argument("--control", default=f"127.0.0.1:{DEFAULT_SWITCH_CONTROL_PORT}", help="HTTP control address (default %(default)s)")
    parser.add_argument("--pool", type=int, default=64, help="aggregator slots P, a power of two (default %(default)s)")
    parser.add_argument("--words", type=int, default=64, help="32-bit payload words per packet K (default %(default)s)")
    parser.add_argument("--policy", choices=POLICIES, default="esa",
                        help="pool policy: esa (preemptive, by priority), fcfs (first come, freed at completion), atp (first come, held "
                             "until the PS returns the result), static (a fixed partition per job) (default %(default)s)")
    parser.add_argument("--queues", choices=QUEUES, default="priority",
                        help="egress queues: priority (a DATA or PARTIAL by its priority, RESULTs apart) or fifo (one a port); "
                             "the software switch's are its host's interfaces' (testbed/README.md) (default %(default)s)")
    parser.add_argument("--result-copies", action=argparse.BooleanOptionalAction, default=True,
                        help="send the PS a copy of every RESULT, so that it answers a worker that lost one at once; "
                             "without, the PS fetches it from another worker (docs/protocol.md, section 5) (default: copies)")
    parser.add_argument("--slot-timeout", type=float, default=1.0, help="seconds before an idle partial is flushed to its PS (default %(default)s)")
    add_access_options(parser)
    add_registry_options(parser)


def switch_config(args: argparse.Namespace) -> SwitchConfig:
    """The switch settings the options give; ValueError says which to change."""
    return SwitchConfig(pool=args.pool, words=args.words, policy=args.policy, slot_timeout=args.slot_timeout,
                        queues=args.queues, result_copies=args.result_copies)


def build(args: argparse.Namespace) -> SwitchServer:
    """The software switch the arguments describe; ValueError says which option to change."""
    config, access = switch_config(args), access_from_args(args)
    faults = Faults(args.drop, args.duplicate, args.reorder, args.fault_seed)
    faults.injectors()  # validates the rates
    listen, control = parse_address(args.listen, "--listen"), parse_address(args.control, "--control")
    return SwitchServer(config, listen, control, faults, batch=args.batch, access=access, registry=registry_from_args(args),
                        max_pps=args.max_pps, latency=args.latency / 1e3)


def describe(server: SwitchServer) -> str:
    """The start-up line's tail: the settings, and which packet path runs."""
    config = server.core.settings
    paced = f", at most {server.max_pps:g} packets/s" if server.max_pps else ""
    paced += f", {server.latency * 1e3:g} ms latency" if server.latency else ""
    return f"pool {config.pool}, words {config.words}, policy {config.policy}, queues {config.queues}, {'' if config.result_copies else 'no '}result copies, packets {server.path}{paced}"


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C or SIGTERM; exit status 2 on a bad configuration."""
    return run_service("switch", lambda: build(args), describe)


def main(argv: Sequence[str] | None = None) -> int:
    parser = configure(argparse.ArgumentParser(prog="python -m ina.switch", description=DESCRIPTION, epilog=EPILOG))
    return run(parser.parse_args(argv))
