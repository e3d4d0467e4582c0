"""A packet program served on UDP with its control API on HTTP: what `ina switch` and `ina ps` share.

`Service` binds both sockets (turning the OS's refusal into a message that names the option
to change), runs the packet loop and stops both cleanly; `run_service` is the command-line
life cycle around it: serve until Ctrl-C or SIGTERM, then print the counters.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ina.control.auth import ALLOW_UNAUTHENTICATED, SCRAPE_TOKEN_FILE, TENANTS, Access
from ina.control.credentials import TOKEN, TOKEN_FILE
from ina.control.http import ControlServer
from ina.control.registry import DEFAULT_LEASE, JobStore, Leases, Registry, changes
from ina.control.tls import CA_FILE, server_context
from ina.net.multicast import send_probe
from ina.net.node import Address, Node
from ina.net.udp import UdpRunner

T = TypeVar("T")


def bind_or_explain(open_server: Callable[[], T], address: Address, option: str) -> T:
    """Open a server on `address`; a refusal by the OS becomes a ValueError naming `option`."""
    try:
        return open_server()
    except OSError as error:
        raise ValueError(f"{option} {address[0]}:{address[1]}: cannot bind ({error.strerror or error}); "
                         f"choose another {option} address or port, or stop what holds it") from None


class Service:
    """`node` served on `listen` (UDP), and the subclass's ControlTarget API on `control` (HTTP),
    open to whom `access` allows (default: `Access.from_environment()`). `bind` opens the packet
    runner on an address instead of a `UdpRunner` of `node` (a native core's `NativeRunner`)."""

    role = "service"

    def __init__(self, node: Node, listen: Address, control: Address, batch: int, access: Access | None = None,
                 bind: Callable[[Address], Any] | None = None, registry: Registry = Registry()) -> None:  # fmt: skip
        if batch < 1:
            raise ValueError(f"--batch must be at least 1, got {batch}")
        open_runner = bind or (lambda address: UdpRunner.bind(node, address, batch=batch))
        self.runner = bind_or_explain(lambda: open_runner(listen), listen, "--listen")
        try:
            self.control = bind_or_explain(lambda: ControlServer(self, *control, access=access, registry=registry), control, "--control")
        except ValueError:
            self.runner.close()
            raise

    @property
    def address(self) -> Address:
        return self.runner.address

    @property
    def control_address(self) -> Address:
        return self.control.address

    def counters(self) -> dict[str, int]:
        return {"send_refused": self.runner.refused}

    def probe(self, group: Address, nonce: int) -> int:
        """Send probe datagrams to a RESULT group from the data address's interface (docs/protocol.md, section 7)."""
        return send_probe(self.address[0], group, nonce)

    def serve_forever(self) -> None:
        """Serve packets in the calling thread until `stop()`; re-raises what stopped it."""
        self.runner.serve_forever()

    def start(self: T) -> T:
        """Serve packets on a background thread."""
        self.runner.start()  # type: ignore[attr-defined]
        return self

    def stop(self) -> None:
        """Ask the packet loop to return; safe from a signal handler."""
        self.runner.stop()

    def close(self) -> None:
        """Stop both servers and release their sockets; re-raise what broke the packet loop, if anything."""
        self.control.close()
        self.runner.close()
        if self.runner.error is not None:
            raise self.runner.error

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def add_access_options(parser: argparse.ArgumentParser) -> None:
    """The control API's authentication and TLS options (docs/protocol.md, section 7): files, never secrets on the command line."""
    group = parser.add_argument_group("control API access (default: open, plain HTTP, on loopback only)")
    group.add_argument("--token-file", help=f"file holding the operator's token (default ${TOKEN_FILE}, else ${TOKEN})")
    group.add_argument("--tenants", help=f"operator policy file: tenants, their tokens, caps and quotas; reloaded when it changes (default ${TENANTS})")
    group.add_argument("--scrape-token-file", help=f"file holding a token that may read GET /metrics and GET /health only (default ${SCRAPE_TOKEN_FILE})")
    group.add_argument("--allow-unauthenticated", action="store_true",
                       help=f"serve an open control API beyond loopback (default ${ALLOW_UNAUTHENTICATED}=1)")
    group.add_argument("--tls-cert", metavar="FILE",
                       help=f"serve the control API over https with this PEM certificate (naming the host or address clients use; they verify it with ${CA_FILE})")
    group.add_argument("--tls-key", metavar="FILE", help="the certificate's PEM private key (unencrypted, mode 0600)")


def add_registry_options(parser: argparse.ArgumentParser) -> None:
    """How long registrations live, and where the job table is kept (docs/protocol.md, section 7, "Leases and restarts")."""
    group = parser.add_argument_group("registrations")
    group.add_argument("--lease", type=float, default=DEFAULT_LEASE,
                       help="seconds a job stays registered without its rank 0 renewing it; 0: for ever (default %(default)s)")
    group.add_argument("--state", metavar="FILE", help="keep the job table in FILE and serve its jobs again after a restart (default: memory only)")


def registry_from_args(args: argparse.Namespace) -> Registry:
    return Registry(Leases(args.lease).lease, JobStore(args.state) if args.state else None)


def access_from_args(args: argparse.Namespace) -> Access:
    """The Access the options describe, the environment filling in what they leave out; ValueError says what is wrong."""
    environ = dict(os.environ)
    for value, variable in ((args.token_file, TOKEN_FILE), (args.tenants, TENANTS), (args.scrape_token_file, SCRAPE_TOKEN_FILE)):
        if value:
            environ[variable] = value
    if args.allow_unauthenticated:
        environ[ALLOW_UNAUTHENTICATED] = "1"
    return Access.from_environment(environ, server_context(args.tls_cert, args.tls_key))


def run_service(name: str, build: Callable[[], Service], describe: Callable[[Any], str]) -> int:
    """Build and serve until Ctrl-C or SIGTERM, then print the counters; exit status 2 on a bad configuration."""
    with log_job_changes(name):
        return _serve(name, build, describe)


def _serve(name: str, build: Callable[[], Service], describe: Callable[[Any], str]) -> int:
    try:
        server = build()
    except ValueError as error:
        print(f"ina {name}: {error}", file=sys.stderr)
        return 2
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: server.stop())
    (host, port), (chost, cport) = server.address, server.control_address
    scheme = "http" if server.control.access.tls is None else "https"
    print(f"ina {name}: data udp://{host}:{port}, control {scheme}://{chost}:{cport}, {describe(server)}", flush=True)
    try:
        server.serve_forever()
    finally:
        counters = server.counters()
        server.close()
    print(f"ina {name}: stopped; counters {json.dumps(counters)}", flush=True)
    return 0


@contextlib.contextmanager
def log_job_changes(name: str) -> Iterator[None]:
    """Print every change to the job table on stdout beside the banner and the counters while the
    service runs, so that its log says which jobs it served (a short job can come and go between two
    scrapes)."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(f"ina {name}: %(message)s"))
    changes.addHandler(handler)
    changes.setLevel(logging.INFO)
    changes.propagate = False
    try:
        yield
    finally:
        changes.removeHandler(handler)
        changes.propagate = True
