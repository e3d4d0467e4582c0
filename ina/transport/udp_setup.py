"""How the workers of a job find the switch and the PS, and register the job (docs/protocol.md, section 7).

Only rank 0 talks to the control APIs; it hands what it learnt (or why it failed) to every
rank over the process group, so a missing switch stops every worker with the same message
instead of leaving the others waiting.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, TypeVar

from ina.control import Endpoint, JobSpec
from ina.control.credentials import TOKEN, TOKEN_FILE, token_from_environment
from ina.control.http import ControlClient, ControlError, ControlTlsError
from ina.control.jobs import MAX_DATAGRAM
from ina.control.tls import CA_FILE, client_context
from ina.net.node import Address
from ina.net.udp import open_socket, parse_address
from ina.protocol import DEFAULT_PS_CONTROL_PORT, DEFAULT_SWITCH_CONTROL_PORT, HEADER_LEN
from ina.protocol.packing import fields_per_word
from ina.transport.errors import TransportError

T = TypeVar("T")
logger = logging.getLogger(__name__)

ENVIRONMENT = {
    "switch": "INA_SWITCH",  # the switch's UDP data address, host:port (a racked job: this worker's rack's leaf)
    "spine": "INA_SPINE",  # a racked job's spine (docs/protocol.md, section 10), host:port; unset: one switch
    "ps": "INA_PS",  # the PS's UDP data address, host:port
    "bind": "INA_BIND",  # the numeric IPv4 address workers bind (default: the one that routes to the aggregator)
    "job": "INA_JOB",  # the job id (default: derived from the workers' addresses, the first free one)
    "words": "INA_WORDS",  # PS-only: words per packet (default: the most the path to the PS carries)
}
"""Environment variables read when an option is not given; INA_SWITCH_CONTROL, INA_SPINE_CONTROL and INA_PS_CONTROL
name the control APIs (default: the data host, ports 47180 and 47181), INA_TOKEN_FILE (a path)
or INA_TOKEN the token rank 0 presents to them, and INA_CA_FILE the CA bundle (PEM) that makes rank 0
speak https to them and verify their certificates ("system": the default trust store; unset: plain
http) (docs/protocol.md, section 7)."""
_CONTROL_PORTS = {"switch": DEFAULT_SWITCH_CONTROL_PORT, "spine": DEFAULT_SWITCH_CONTROL_PORT, "ps": DEFAULT_PS_CONTROL_PORT}
_COMMANDS = {"switch": "ina switch", "spine": "ina switch", "ps": "ina ps"}
_SERVICE = {"switch": "switch", "spine": "switch", "ps": "ps"}
"""The role each aggregator's control API answers GET /health with."""
_IP_MTU = getattr(socket, "IP_MTU", 14)  # Linux: the path MTU of a connected socket


@dataclass(frozen=True)
class Aggregator:
    """A switch or a PS as a worker reaches it: its control API, and its data address if given
    (else the one its control API reports)."""

    role: str  # "switch", "spine" (a racked job's, a switch too) or "ps"
    control: Address
    data: Address | None = None
    token: str | None = field(default=None, repr=False)
    ca_file: str = ""  # "": plain http

    @classmethod
    def configure(cls, role: str, data: str | None = None, control: str | None = None) -> Aggregator:
        """From explicit `host:port` options, else the environment, else the defaults (loopback); the
        token from INA_TOKEN_FILE or INA_TOKEN, the CA bundle from INA_CA_FILE."""
        variable = ENVIRONMENT[role]
        data = data or os.environ.get(variable) or None
        control = control or os.environ.get(f"{variable}_CONTROL") or None
        data_address = None if data is None else parse_address(data, f"the {role} address ({role}= or {variable})")
        try:
            token = token_from_environment()
        except ValueError as error:
            raise TransportError(f"{error}; check {TOKEN_FILE}") from None
        ca_file = os.environ.get(CA_FILE, "")
        try:
            client_context(ca_file)  # a CA file that cannot be read stops the job here, not at the first request
        except ValueError as error:
            raise TransportError(str(error)) from None
        if control is None:
            host = "127.0.0.1" if data_address is None else data_address[0]
            return cls(role, (host, _CONTROL_PORTS[role]), data_address, token, ca_file)
        return cls(role, parse_address(control, f"the {role} control address ({role}_control= or {variable}_CONTROL)"),
                   data_address, token, ca_file)  # fmt: skip

    def client(self) -> ControlClient:
        return ControlClient(*self.control, token=self.token or "", ca_file=self.ca_file)

    def describe(self) -> dict[str, Any]:
        """Its health and configuration, with `listen` as the numeric address workers send to.

        Raises TransportError saying what to start or set when nothing answers."""
        variable = ENVIRONMENT[self.role]
        host, port = self.control
        try:
            health = self.client().health()
            config = self.client().config()
            caller = self.client().whoami()
        except ControlTlsError as error:
            raise TransportError(f"the {self.role} control API at {host}:{port}: {error}") from None
        except ControlError as error:
            if error.status in (401, 403):
                raise TransportError(
                    f"the {self.role} control API at {host}:{port} refused this job's token ({error}): set {TOKEN_FILE} "
                    f"to a file holding the token the operator gave you (or {TOKEN})"
                ) from None
            raise TransportError(
                f"no {self.role} control API answers at {host}:{port} ({error}). Start `{_COMMANDS[self.role]}` "
                f"there, or point the workers at yours: set {variable}=host:port (and {variable}_CONTROL=host:port "
                f"unless its control port is {_CONTROL_PORTS[self.role]}), or pass {self.role}=... to the transport"
            ) from None
        if health.get("role") != _SERVICE[self.role]:
            raise TransportError(f"{host}:{port} is the control API of a {health.get('role')!r}, not of a {_SERVICE[self.role]}; "
                                 f"check {variable}_CONTROL")  # fmt: skip
        listen_host, listen_port = parse_address(config["listen"], f"the {self.role}'s reported address")
        if listen_host in ("0.0.0.0", ""):
            listen_host = host  # bound to every interface: reachable where its control API is
        data = self.data or (listen_host, listen_port)
        if self.data is not None and self.data[1] != listen_port:
            logger.warning("%s says the %s listens on port %d, but it was given as %s:%d", self.control, self.role, listen_port, *self.data)
        return config | {"listen": (_numeric(data[0], variable), data[1]), "caller": caller}


@dataclass(frozen=True)
class Deployment:
    """What every worker needs to know of the aggregators: K, the switch's pool, their data addresses."""

    words: int
    pool: int  # 1 without a switch
    ps: Address
    switch: Address | None
    slots_free: int | None = None  # what this tenant may still hold at the switch; None: no quota
    job_ids: frozenset[int] | None = None  # the ids this tenant may use; None: any
    max_words: int | None = None  # PS-only: the most words per packet the PS takes for a job; None: its words
    short_chunks: bool = True  # DATA may be shorter than K words: false for a switch that takes only whole chunks (P4)

    @property
    def destination(self) -> Address:
        """Where DATA goes: the switch, or the PS in PS-only mode."""
        return self.switch or self.ps


def locate(ps: Aggregator, switch: Aggregator | None) -> Deployment:
    """Ask the control APIs (rank 0) how the aggregators are set up; they must agree on K."""
    switch_config = switch.describe() if switch else None  # the destination first: its absence is the news
    ps_config = ps.describe()
    job_ids = _job_ids(ps_config["caller"], switch_config["caller"] if switch_config else None)
    if switch_config is None:
        return Deployment(ps_config["words"], 1, ps_config["listen"], None, job_ids=job_ids, max_words=ps_config.get("max_words"))
    if switch_config["words"] != ps_config["words"]:
        raise TransportError(
            f"the switch carries {switch_config['words']} words per packet and the PS {ps_config['words']}: "
            "start both with the same --words"
        )
    caller = switch_config["caller"]
    free = None if caller.get("slots") is None else max(caller["slots"] - caller.get("slots_used", 0), 0)
    return Deployment(switch_config["words"], switch_config["pool"], ps_config["listen"], switch_config["listen"], free, job_ids,
                      short_chunks=bool(switch_config.get("short_chunks", False)))  # fmt: skip


def _job_ids(*callers: dict[str, Any] | None) -> frozenset[int] | None:
    """The job ids the token may use at every aggregator (None: any), from their GET /whoami."""
    allowed: frozenset[int] | None = None
    for caller in callers:
        if caller is not None and caller.get("jobs") is not None:
            ids = frozenset(j for lo, hi in caller["jobs"] for j in range(lo, hi + 1))
            allowed = ids if allowed is None else allowed & ids
    return allowed


def path_payload(toward: Address) -> int:
    """The largest UDP payload that leaves for `toward` unfragmented: the route's MTU less the IPv4
    and UDP headers (loopback: a whole datagram, 65507 bytes), from a connected probe socket."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(toward)  # picks the route, sends nothing
        try:
            mtu = probe.getsockopt(socket.IPPROTO_IP, _IP_MTU)
        except OSError:
            mtu = 1500  # no route MTU to read: the Ethernet default
    return max(min(mtu - 28, MAX_DATAGRAM), HEADER_LEN + 4)


def ps_only_words(deployment: Deployment, index_bits: int, lane_bits: int, requested: int | None = None) -> int:
    """K for a PS-only job (docs/protocol.md, section 7): `requested` (else INA_WORDS), else the most
    words whose DATA and RESULT each fit one unfragmented datagram to the PS, capped by the PS's `max_words`."""
    variable = ENVIRONMENT["words"]
    if requested is None and os.environ.get(variable):
        try:
            requested = int(os.environ[variable])
        except ValueError:
            raise TransportError(f"{variable} must be a number of words per packet, got {os.environ[variable]!r}") from None
    most = deployment.words if deployment.max_words is None else deployment.max_words
    if requested is not None:
        if not 1 <= requested <= most:
            raise TransportError(f"words per packet (words= or {variable}) must be 1..{most}, the most this PS takes; got {requested}")
        return requested
    room = (path_payload(deployment.ps) - HEADER_LEN) // 4
    fit = room if not index_bits else room * fields_per_word(lane_bits) // fields_per_word(index_bits)
    return max(1, min(room, fit, most))


@dataclass(frozen=True)
class Registration:
    job: int
    slot_base: int
    span: int = 0  # 0: the whole pool
    lease: float = 0.0  # seconds the job stays registered unrenewed at the aggregators (the shorter); 0: for ever


class LeaseKeeper:
    """Rank 0 renews the job's lease at its switch and PS every third of it, on a daemon thread,
    until `close()` (docs/protocol.md, section 7, "Leases and restarts"). A renewal that fails is
    logged and tried again at the next period: the job's packets say the rest."""

    def __init__(self, aggregators: list[Aggregator], job: int, lease: float) -> None:
        self.job, self.period = job, lease / 3
        self._clients = [aggregator.client() for aggregator in aggregators]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ina-lease-{job}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self.period):
            for client in self._clients:
                try:
                    client.renew(self.job)
                except ControlError as error:
                    logger.warning("job %d: renewing its lease at %s failed: %s", self.job, client.base, error)

    def close(self) -> None:
        self._stopped.set()
        self._thread.join()


def free_job(aggregators: list[Aggregator], deployment: Deployment, job: int) -> int:
    """The first job id from `job` on registered with none of the job's aggregators (and allowed for the token), so
    that concurrent jobs do not clash (rank 0)."""
    taken = {entry["job"] for aggregator in aggregators for entry in aggregator.client().jobs()}
    allowed = deployment.job_ids
    candidates = (j % (1 << 16) for j in range(job, job + (1 << 16)))
    free = next((j for j in candidates if j not in taken and (allowed is None or j in allowed)), None)
    if free is None:
        raise TransportError("every job id this token may use is registered already: deregister a job, or ask the operator for more ids")
    return free


def register(ps: Aggregator, switch: Aggregator | None, deployment: Deployment, spec: JobSpec, pick_job: bool,
             grouped: frozenset[str] = frozenset()) -> Registration:  # fmt: skip
    """Register the job with the PS, then the switch (rank 0); `pick_job` moves `spec.job` to `free_job`'s id.
    Only the aggregators whose roles are `grouped` get `spec.group` (docs/protocol.md, section 7, "RESULT groups")."""
    ps_client, switch_client = ps.client(), switch.client() if switch else None
    if pick_job:
        spec = replace(spec, job=free_job([a for a in (ps, switch) if a], deployment, spec.job))

    def group(role: str) -> Endpoint | None:
        return spec.group if role in grouped else None

    switch_address = None if deployment.switch is None else Endpoint(*deployment.switch)
    ps_lease = ps_client.register(replace(spec, switch=switch_address, group=group("ps"))).get("lease", 0.0)
    if switch_client is None:
        return Registration(spec.job, 0, lease=ps_lease)
    try:
        answer = switch_client.register(replace(spec, ps=Endpoint(*deployment.ps), index_bits=0, table=(), words=0,
                                                group=group("switch")))  # fmt: skip
    except ControlError:
        ps_client.deregister(spec.job)
        raise
    lease = min((t for t in (ps_lease, answer.get("lease", 0.0)) if t), default=0.0)
    return Registration(spec.job, answer["slot_base"], answer.get("span", 0), lease)


def deregister(aggregators: list[Aggregator], job: int) -> None:
    """Remove the job from its aggregators, the last registered first; one that is gone already is not an error."""
    for aggregator in reversed(aggregators):
        try:
            aggregator.client().deregister(job)
        except ControlError as error:
            logger.info("deregistering job %d: %s", job, error)


def derived_job(workers: list[Address]) -> int:
    """A job id from the workers' addresses: no two running jobs share a worker address."""
    return zlib.crc32(repr(workers).encode()) & 0xFFFF


def bind_socket(bind: str | None, toward: Address) -> socket.socket:
    """A UDP socket on `bind` (host or host:port; INA_BIND), else on the local address that routes to `toward`."""
    bind = bind or os.environ.get(ENVIRONMENT["bind"]) or None
    if bind is None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(toward)  # picks the route, sends nothing
            address: Address = (probe.getsockname()[0], 0)
    else:
        address = parse_address(bind if ":" in bind else f"{bind}:0", "the worker address (bind= or INA_BIND)")
        address = (_numeric(address[0], ENVIRONMENT["bind"]), address[1])
    return open_socket(address)


def agree(group: Any, decide: Callable[[], T]) -> T:
    """Rank 0 of `group` runs `decide`; every rank returns its value, or raises its error."""
    import torch.distributed as dist

    outcome: list[Any] = [None]
    if group.rank() == 0:
        try:
            outcome[0] = ("ok", decide())
        except Exception as error:  # noqa: BLE001 - every rank must hear of it, or the others wait forever
            known = isinstance(error, (TransportError, ControlError, ValueError))
            outcome[0] = ("error", str(error) if known else repr(error))
    dist.broadcast_object_list(outcome, src=dist.get_global_rank(group, 0), group=group)
    status, value = outcome[0]
    if status != "ok":
        raise TransportError(value)
    return value


def _numeric(host: str, variable: str) -> str:
    """Packets arrive from numeric addresses, and the aggregators match registered ones."""
    try:
        return socket.gethostbyname(host)
    except OSError as error:
        raise TransportError(f"cannot resolve {host!r} ({error}); check {variable}") from None
