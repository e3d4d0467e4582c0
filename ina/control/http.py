"""The control API over JSON/HTTP (docs/protocol.md, section 7): one server helper, one client.

Standard library only: the API is a handful of requests, and `curl` can drive it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from ina.control.auth import Access
from ina.control.credentials import token_from_environment
from ina.control.jobs import Endpoint, JobSpec
from ina.control.metrics import CONTENT_TYPE, ServiceCollector, exposition
from ina.control.watch import Waiting, Watch
from ina.control.policy import Forbidden, Principal
from ina.control.registry import Registrar, Registry
from ina.control.tls import CA_FILE, client_context
from ina.protocol.addresses import is_multicast

logger = logging.getLogger("ina.control")
MAX_BODY = 64 * 1024
"""The largest request body a control API reads (a registration of 32 workers and a table is a few KiB)."""
REFUSALS = {400: "control_malformed", 401: "control_unauthorized", 403: "control_forbidden",
            404: "control_not_found", 413: "control_oversized"}  # fmt: skip
"""The counter each refusal is counted under (docs/protocol.md, section 7)."""
TLS_FAILED = "control_tls_failed"
"""The counter of connections refused for their TLS: a failed handshake, plain HTTP to an https API, TLS to a plain one."""
SCRAPES = {("GET", "/metrics"), ("GET", "/health")}
LEASE = "/lease"
"""`POST /jobs/<job>/lease` renews the job's lease."""
PROBE = "/probe"
"""`POST /probe` sends probe datagrams to a RESULT group."""
"""What a scrape token may ask."""
WATCH_PERIOD = 0.1
"""Seconds between the watch's samples of a target's held chunks, unless the target sets `watch_period`."""


class ControlError(RuntimeError):
    """The control API refused a request (`status` its HTTP status), or its server did not answer (`status` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ControlTlsError(ControlError):
    """The client and the server disagree on TLS, or the client does not trust the server's certificate;
    the message says what to set."""


class ControlTarget(Protocol):
    """What a switch or PS exposes to its control plane."""

    role: str

    def config(self) -> dict[str, Any]: ...

    def register(self, spec: JobSpec) -> dict[str, Any]: ...

    def deregister(self, job: int) -> None: ...

    def jobs(self) -> list[dict[str, Any]]: ...

    def counters(self) -> dict[str, int]: ...


class Watched(Protocol):
    """A ControlTarget whose partially held chunks the watch can sample (ina.control.watch)."""

    def waiting(self) -> Waiting: ...


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ControlServer:
    """Serves a ControlTarget's API on a daemon thread until `close()`.

    `access` says who may use it (default: `Access.from_environment()`, so a server built without
    settings takes the operator token and tenants from INA_TOKEN_FILE / INA_TOKEN / INA_TENANTS);
    an open API is refused on an address other than loopback unless `access` allows it.
    Registrations and deregistrations are serialized, so an ownership check and the change it
    guards see the same job table.
    """

    read_timeout = 10.0
    """Seconds a request may take to arrive."""

    def __init__(self, target: ControlTarget, host: str = "127.0.0.1", port: int = 0, access: Access | None = None,
                 registry: Registry = Registry()) -> None:  # fmt: skip
        self.access = Access.from_environment() if access is None else access
        self.access.check_bind(host)
        self.target = target
        self.registrar = Registrar(target, registry)
        self.registrar.restore(time.monotonic())
        self.refused = dict.fromkeys((*REFUSALS.values(), TLS_FAILED, "control_errors"), 0)
        self._collector = ServiceCollector(self)
        self._lock = threading.Lock()
        self._httpd = _HTTPServer((host, port), _handler_for(self), self)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=f"{target.role}-control", daemon=True)
        self._thread.start()
        watched = getattr(target, "waiting", None)
        self._watch = None if watched is None else Watch(watched, self._fanins, getattr(target, "watch_period", WATCH_PERIOD))
        self.registrar.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        self.registrar.close()
        if self._watch is not None:
            self._watch.close()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def count(self, name: str) -> None:
        with self._lock:
            self.refused[name] += 1

    def counters(self) -> dict[str, int]:
        with self._lock:
            return self.target.counters() | self.refused | {"leases_expired": self.registrar.expired}

    def _fanins(self) -> dict[int, int]:
        return {int(job["job"]): len(job["workers"]) for job in self.target.jobs()}

    def lateness(self, job: int) -> dict[str, Any] | None:
        """What the watch measured of `job` (None: the target is not watched, or the job is new to it)."""
        return None if self._watch is None else self._watch.lateness.report(job)

    def jobs(self) -> list[dict[str, Any]]:
        """The job table, each job with the chunks it holds and its slowest and stalled ranks, where watched."""
        listed = self.target.jobs()
        for job in listed:
            report = self.lateness(job["job"])
            if report is not None:
                job |= {name: report[name] for name in ("held", "slowest_rank", "stalled_ranks")}
        return listed

    def job(self, job: int) -> dict[str, Any]:
        """One job's entry with, per rank, what the watch measured."""
        entry = next((j for j in self.jobs() if j["job"] == job), None)
        if entry is None:
            raise _Refused(404, f"job {job} is not registered here")
        report = self.lateness(job)
        return entry | {"ranks": [] if report is None else report["ranks"]}

    def metrics(self) -> bytes:
        return exposition([self._collector])

    # -- the requests, once authenticated ------------------------------------------------

    def whoami(self, caller: Principal) -> dict[str, Any]:
        used = sum(int(j.get("slots", 0)) for j in self.target.jobs() if j.get("owner") == caller.name) if caller.name else 0
        return caller.describe() | {"slots_used": used}

    def register(self, caller: Principal, body: Any) -> dict[str, Any]:
        return self.registrar.register(caller, JobSpec.from_json(body), time.monotonic())

    def deregister(self, caller: Principal, job: int) -> dict[str, Any]:
        self.registrar.deregister(caller, job)
        return {"ok": True}

    def probe(self, body: Any) -> dict[str, Any]:
        """Send probe datagrams to a multicast group, where the target can (404 where it cannot)."""
        if not hasattr(self.target, "probe"):
            raise _Refused(404, f"this {self.target.role} sends no RESULTs to groups")
        if not isinstance(body, dict):
            raise ValueError("a probe is a JSON object {'group': {'host', 'port'}, 'nonce': n}")
        group = Endpoint.parse(body.get("group"), "group")
        if not is_multicast(group.host):
            raise ValueError(f"group: {group.host} is not an IPv4 multicast address (224.0.0.0/4)")
        return {"sent": self.target.probe(group.addr, int(body.get("nonce", 0)))}

    def renew(self, caller: Principal, job: int) -> dict[str, Any]:
        renewed = self.registrar.renew(caller, job, time.monotonic())
        if renewed is None:
            raise _Refused(404, f"job {job} is not registered here (its lease expired, or this service restarted without --state): register it again")
        return renewed


class _HTTPServer(ThreadingHTTPServer):
    """A control API's HTTP server, over TLS when its `access.tls` says so.

    Each connection's first byte is peeked in the connection's own thread (a TLS ClientHello starts
    with 0x16), and the handshake runs there too, under the read timeout: a client that stalls,
    speaks the other protocol or does not trust the certificate holds one thread for a while, never
    the accept loop. Such a connection is counted (control_tls_failed) and logged at INFO; plain HTTP
    to an https API is answered 426 with what to set, TLS to a plain API is closed.
    """

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], control: ControlServer) -> None:
        self.control = control
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        connection = self._connect(request, client_address[0])
        if connection is None:
            return
        try:
            super().finish_request(connection, client_address)
        finally:
            if connection is not request:
                connection.close()  # the TLS session; shutdown_request closes the plain socket

    def _connect(self, sock: socket.socket, peer: str) -> socket.socket | None:
        """The connection to serve: `sock` (plain HTTP), its TLS session, or None (refused, or gone before a byte)."""
        tls = self.control.access.tls
        sock.settimeout(self.control.read_timeout)
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except OSError:
            return None
        if not first:
            return None
        if (first == b"\x16") != (tls is not None):
            self._refuse(sock, peer, tls is not None)
            return None
        if tls is None:
            return sock
        secure = tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        try:
            secure.do_handshake()
        except OSError as error:  # ssl.SSLError: the client does not trust the certificate, ...; a timeout; a reset
            secure.close()
            self._failed(peer, f"TLS handshake failed ({error})")
            return None
        return secure

    def _refuse(self, sock: socket.socket, peer: str, https: bool) -> None:
        """Read what the client sent (closed unread, the connection would be reset before it reads the answer),
        and answer plain HTTP with 426 and what to set."""
        try:
            sock.recv(MAX_BODY)
            if https:
                body = json.dumps({"error": f"this control API speaks https only: verify its certificate with {CA_FILE}=<the CA "
                                            f"file that signed it> ({CA_FILE}=system if it is publicly trusted)"}).encode()  # fmt: skip
                sock.sendall(b"HTTP/1.1 426 Upgrade Required\r\nUpgrade: TLS/1.2, HTTP/1.1\r\nConnection: close\r\n"
                             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        except OSError:
            pass
        self._failed(peer, "plain HTTP to this https API" if https else "a TLS handshake with this plain-HTTP API")

    def _failed(self, peer: str, why: str) -> None:
        self.control.count(TLS_FAILED)
        logger.info("control connection from %s refused: %s", peer, why)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke (reset, timed out, a TLS error mid-request) is logged at INFO, not as a traceback on stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            logger.info("control connection from %s ended: %s", client_address[0], error)
        else:
            logger.exception("control connection from %s failed", client_address[0])


def _handler_for(server: ControlServer) -> type[BaseHTTPRequestHandler]:
    target = server.target

    class Handler(BaseHTTPRequestHandler):
        timeout = server.read_timeout  # a client that stalls mid-request does not hold a thread for ever

        def log_message(self, format: str, *args: Any) -> None:  # keep servers quiet
            pass

        def _reply(self, status: int, body: Any, headers: dict[str, str] | None = None, content_type: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            """The JSON body, read only once the request is authenticated and its size acceptable."""
            text = self.headers.get("Content-Length", "0")
            if not text.strip().isdigit():
                self.close_connection = True
                raise _Refused(400, f"Content-Length {text!r} is not a number of bytes")
            length = int(text)
            if length > MAX_BODY:
                self.close_connection = True  # the body stays unread
                raise _Refused(413, f"a request body holds at most {MAX_BODY} bytes, this one {length}")
            try:
                data = self.rfile.read(length)
            except OSError:
                self.close_connection = True
                raise _Refused(400, f"the body did not arrive within {server.read_timeout} s") from None
            if len(data) < length:
                self.close_connection = True
                raise _Refused(400, f"the body ended after {len(data)} of its {length} bytes")
            try:
                return json.loads(data or b"null")
            except (ValueError, RecursionError) as error:
                raise _Refused(400, f"the body is not JSON ({type(error).__name__}: {str(error)[:200]})") from None

        def _route(self, method: str) -> None:
            path = self.path.rstrip("/")
            try:
                caller = server.access.authenticate(self.headers.get("Authorization"))
                if caller is None:
                    self.close_connection = True
                    raise _Refused(401, "this control API needs 'Authorization: Bearer <token>' with a token it knows "
                                        "(workers read theirs from INA_TOKEN_FILE or INA_TOKEN)")  # fmt: skip
                if caller.scrape_only and (method, path) not in SCRAPES:
                    raise Forbidden("a scrape token may only GET /metrics and /health")
                if method == "GET" and path == "/health":
                    self._reply(200, {"role": target.role, "ok": True})
                elif method == "GET" and path == "/metrics":
                    self._reply(200, server.metrics(), content_type=CONTENT_TYPE)
                elif method == "GET" and path == "/config":
                    self._reply(200, target.config())
                elif method == "GET" and path == "/whoami":
                    self._reply(200, server.whoami(caller))
                elif method == "GET" and path == "/jobs":
                    self._reply(200, server.jobs())
                elif method == "GET" and path.startswith("/jobs/"):
                    self._reply(200, server.job(_job_id(path)))
                elif method == "GET" and path == "/counters":
                    self._reply(200, server.counters())
                elif method == "POST" and path == "/jobs":
                    self._reply(200, server.register(caller, self._body()))
                elif method == "POST" and path == PROBE:
                    self._reply(200, server.probe(self._body()))
                elif method == "POST" and path.startswith("/jobs/") and path.endswith(LEASE):
                    self._reply(200, server.renew(caller, _job_id(path.removesuffix(LEASE))))
                elif method == "DELETE" and path.startswith("/jobs/"):
                    self._reply(200, server.deregister(caller, _job_id(path)))
                else:
                    raise _Refused(404, f"no such request: {method} {self.path[:200]}")
            except _Refused as refusal:
                self._refuse(refusal.status, str(refusal))
            except Forbidden as error:
                self._refuse(403, str(error))
            except (ValueError, KeyError, TypeError, OverflowError) as error:
                self._refuse(400, str(error))
            except Exception as error:  # noqa: BLE001 - a bug must not take the control API down
                logger.exception("control %s %s from %s failed", method, self.path[:200], self.client_address[0])
                server.count("control_errors")
                self._reply(500, {"error": f"internal error ({type(error).__name__}); see the server's log"})

        def _refuse(self, status: int, message: str) -> None:
            server.count(REFUSALS[status])
            # the method, path and peer; never the Authorization header
            logger.log(logging.WARNING if status in (401, 403, 413) else logging.INFO, "control %s %s from %s refused (%d): %s",
                       self.command, self.path[:200], self.client_address[0], status, message)  # fmt: skip
            self._reply(status, {"error": message}, {"WWW-Authenticate": "Bearer"} if status == 401 else None)

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

        def do_PUT(self) -> None:
            self._route("PUT")

        def do_PATCH(self) -> None:
            self._route("PATCH")

    return Handler


def _job_id(path: str) -> int:
    """The job id of a `/jobs/<job>` path."""
    text = path.removeprefix("/jobs/")
    if not (text.isascii() and text.isdigit() and int(text) < 1 << 16):
        raise _Refused(400, f"job ids are integers in 0..65535, got {text[:40]!r}")
    return int(text)


class ControlClient:
    """Talks to one switch's or PS's control API; errors carry the server's message."""

    def __init__(self, host: str, port: int, timeout: float = 5.0, token: str | None = None, ca_file: str | None = None) -> None:
        """`token` is sent as `Authorization: Bearer`; default INA_TOKEN_FILE or INA_TOKEN, if set. With a CA
        bundle `ca_file` (default INA_CA_FILE; "system": the default trust store; "": none) the client speaks
        https and verifies the server's certificate, which must name `host`."""
        self._tls = client_context(os.environ.get(CA_FILE, "") if ca_file is None else ca_file)
        self.host = host
        self.base = f"{'http' if self._tls is None else 'https'}://{host}:{port}"
        self.timeout = timeout
        self._token = token_from_environment() if token is None else token

    def _request(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        """The answer's JSON (its text if `raw`); ControlError with the server's message otherwise."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._tls) as response:
                answer = response.read()
                return answer.decode() if raw else json.loads(answer)
        except urllib.error.HTTPError as error:
            try:
                message = json.loads(error.read() or b"{}").get("error", error.reason)
            except (ValueError, AttributeError):
                message = error.reason
            kind = ControlTlsError if error.code == 426 else ControlError  # plain HTTP to an https API
            raise kind(f"{method} {self.base}{path}: {message} ({error.code})", error.code) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise self._unanswered(f"{method} {self.base}{path}", getattr(error, "reason", error)) from None

    def _unanswered(self, request: str, reason: Any) -> ControlError:
        """Why `request` got no answer, saying what to set when TLS is the cause."""
        if isinstance(reason, ssl.SSLCertVerificationError):
            if "mismatch" in str(reason.verify_message):
                return ControlTlsError(f"{request}: the server's certificate does not name {self.host} ({reason.verify_message}): "
                                       "connect by a name or address its subjectAltName lists, or have it reissued for this one")  # fmt: skip
            return ControlTlsError(f"{request}: the server's certificate is not trusted ({reason.verify_message}): set "
                                   f"{CA_FILE} (or ca_file=) to the CA file that signed it, or to 'system' if it is publicly trusted")  # fmt: skip
        if self._tls is not None and isinstance(reason, (ssl.SSLError, ConnectionResetError)):
            return ControlTlsError(f"{request}: the TLS handshake failed ({reason}): if this control API serves plain http, "
                                   f"unset {CA_FILE} (or pass ca_file='')")  # fmt: skip
        return ControlError(f"{request}: no answer ({reason})")

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def config(self) -> dict[str, Any]:
        return self._request("GET", "/config")

    def whoami(self) -> dict[str, Any]:
        return self._request("GET", "/whoami")

    def register(self, spec: JobSpec) -> dict[str, Any]:
        return self._request("POST", "/jobs", spec.to_json())

    def deregister(self, job: int) -> None:
        self._request("DELETE", f"/jobs/{job}")

    def jobs(self) -> list[dict[str, Any]]:
        return self._request("GET", "/jobs")

    def counters(self) -> dict[str, int]:
        return self._request("GET", "/counters")

    def job(self, job: int) -> dict[str, Any]:
        return self._request("GET", f"/jobs/{job}")

    def renew(self, job: int) -> dict[str, Any]:
        return self._request("POST", f"/jobs/{job}{LEASE}")

    def probe(self, group: tuple[str, int], nonce: int) -> dict[str, Any]:
        return self._request("POST", PROBE, {"group": {"host": group[0], "port": group[1]}, "nonce": nonce})

    def metrics(self) -> str:
        return self._request("GET", "/metrics", raw=True)
