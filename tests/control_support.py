"""A policy of two tenants and an operator, and a raw HTTP client, for the control-plane tests."""

from __future__ import annotations

import http.client
import json
import os
from pathlib import Path
from typing import Any

from ina.control import Endpoint, JobSpec

OPERATOR_TOKEN = "operator-token-0123456789"
TOKENS = {"a": "tenant-a-token-0123456789", "b": "tenant-b-token-0123456789"}
TENANTS = [
    {"name": "a", "token": TOKENS["a"], "priority_cap": 100, "slots": 8, "jobs": ["100-199"]},
    {"name": "b", "token_file": "b.token", "priority_cap": 200, "slots": 16, "jobs": ["200-299", 7]},
]


def write_policy(directory: Path, tenants: list[dict[str, Any]] = TENANTS) -> Path:
    """The policy file (and tenant b's token file, mode 0600) in `directory`."""
    token = directory / "b.token"
    token.write_text(TOKENS["b"] + "\n")
    token.chmod(0o600)
    path = directory / "policy.json"
    path.write_text(json.dumps({"tenants": tenants}))
    path.chmod(0o600)
    return path


def rewrite(path: Path, tenants: list[dict[str, Any]]) -> None:
    """Replace the policy, with a modification time that surely differs from the last one."""
    before = path.stat().st_mtime_ns
    path.write_text(json.dumps({"tenants": tenants}))
    os.utime(path, ns=(before + 10**9, before + 10**9))


def spec(job: int, window: int = 4, priority_cap: int = 255, workers: int = 2, host: str = "127.0.0.1") -> JobSpec:
    return JobSpec(job=job, workers=tuple(Endpoint(host, 30000 + 10 * job + r) for r in range(workers)), window=window,
                   priority_cap=priority_cap, ps=Endpoint(host, 40000 + job))  # fmt: skip


def raw(address: tuple[str, int], method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, Any]:  # fmt: skip
    """One request as sent (no client-side checks); the status and the decoded JSON answer."""
    connection = http.client.HTTPConnection(*address, timeout=5)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None
    finally:
        connection.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
