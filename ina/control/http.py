"""The control API over JSON/HTTP (docs/protocol.md, section 7): one server helper, one client.

Standard library only: the API is a handful of requests, and `curl` can drive it.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from ina.control.jobs import JobSpec


class ControlError(RuntimeError):
    """The control API refused a request, or its server did not answer."""


class ControlTarget(Protocol):
    """What a switch or PS exposes to its control plane."""

    role: str

    def config(self) -> dict[str, Any]: ...

    def register(self, spec: JobSpec) -> dict[str, Any]: ...

    def deregister(self, job: int) -> None: ...

    def jobs(self) -> list[dict[str, Any]]: ...

    def counters(self) -> dict[str, int]: ...


class ControlServer:
    """Serves a ControlTarget's API on a daemon thread until `close()`."""

    def __init__(self, target: ControlTarget, host: str = "127.0.0.1", port: int = 0) -> None:
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(target))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=f"{target.role}-control", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def _handler_for(target: ControlTarget) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep servers quiet
            pass

        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method: str) -> None:
            path = self.path.rstrip("/")
            try:
                if method == "GET" and path == "/health":
                    self._reply(200, {"role": target.role, "ok": True})
                elif method == "GET" and path == "/config":
                    self._reply(200, target.config())
                elif method == "GET" and path == "/jobs":
                    self._reply(200, target.jobs())
                elif method == "GET" and path == "/counters":
                    self._reply(200, target.counters())
                elif method == "POST" and path == "/jobs":
                    length = int(self.headers.get("Content-Length", 0))
                    body = json.loads(self.rfile.read(length) or b"null")
                    self._reply(200, target.register(JobSpec.from_json(body)))
                elif method == "DELETE" and path.startswith("/jobs/"):
                    target.deregister(int(path.removeprefix("/jobs/")))
                    self._reply(200, {"ok": True})
                else:
                    self._reply(404, {"error": f"no such request: {method} {self.path}"})
            except (ValueError, KeyError) as error:
                self._reply(400, {"error": str(error)})

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler


class ControlClient:
    """Talks to one switch's or PS's control API; errors carry the server's message."""

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self.base = f"http://{host}:{port}"
        self.timeout = timeout

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            message = json.loads(error.read() or b"{}").get("error", error.reason)
            raise ControlError(f"{method} {self.base}{path}: {message}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise ControlError(f"{method} {self.base}{path}: no answer ({error})") from None

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def config(self) -> dict[str, Any]:
        return self._request("GET", "/config")

    def register(self, spec: JobSpec) -> dict[str, Any]:
        return self._request("POST", "/jobs", spec.to_json())

    def deregister(self, job: int) -> None:
        self._request("DELETE", f"/jobs/{job}")

    def jobs(self) -> list[dict[str, Any]]:
        return self._request("GET", "/jobs")

    def counters(self) -> dict[str, int]:
        return self._request("GET", "/counters")
