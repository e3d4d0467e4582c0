"""The operator policy (docs/protocol.md, section 7, "Operator policy"): tenants, their caps and quotas.

Who is asking travels with the request as a context variable (`acting_as`), so the places that
validate registrations (the switch's job table, which the P4 controller shares, and the PS's) see
the caller without every ControlTarget's signature changing. Outside a control request the caller
is `OPEN`: no limits, as before any policy existed.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from ina.control.credentials import read_token_file
from ina.control.jobs import JobSpec

logger = logging.getLogger("ina.control")
MAX_JOB = (1 << 16) - 1


class Forbidden(PermissionError):
    """A known caller asked for what its tenant may not do (HTTP 403)."""


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant of a shared switch: its token, priority cap, share of the pool and job ids."""

    name: str
    token: str
    priority_cap: int = 255
    slots: int | None = None  # None: the whole pool
    jobs: tuple[tuple[int, int], ...] | None = None  # inclusive ranges; None: any id

    def allows(self, job: int) -> bool:
        return self.jobs is None or any(lo <= job <= hi for lo, hi in self.jobs)

    def describe(self) -> dict[str, Any]:
        """What the tenant may do, without its token."""
        return {"tenant": self.name, "priority_cap": self.priority_cap, "slots": self.slots,
                "jobs": None if self.jobs is None else [list(r) for r in self.jobs]}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of a control request: the operator, a tenant, the metrics scraper, or anyone (an open API)."""

    name: str | None  # what a job's `owner` records; None for an open API
    operator: bool
    tenant: Tenant | None = None
    scrape_only: bool = False
    """May read GET /metrics and GET /health only (the scrape token): a monitoring system holds no more."""

    def describe(self) -> dict[str, Any]:
        if self.tenant is not None:
            return {**self.tenant.describe(), "operator": False}
        return {"tenant": self.name, "operator": self.operator, "priority_cap": 255, "slots": None, "jobs": None}


OPEN = Principal(None, True)
"""No token or policy configured: everyone may do everything (single-user, loopback)."""
OPERATOR = Principal("operator", True)
SCRAPER = Principal("scraper", False, scrape_only=True)
"""Whoever presents the scrape token (docs/protocol.md, section 7, "Authentication")."""

_caller: contextvars.ContextVar[Principal] = contextvars.ContextVar("ina_control_caller", default=OPEN)


def caller() -> Principal:
    """Who the current control request is from (OPEN outside one)."""
    return _caller.get()


@contextmanager
def acting_as(principal: Principal) -> Iterator[None]:
    """Run a ControlTarget call on behalf of `principal`."""
    token = _caller.set(principal)
    try:
        yield
    finally:
        _caller.reset(token)


def grant(spec: JobSpec, principal: Principal) -> JobSpec:
    """The registration as the caller's tenant may have it: an allowed job id, the cap at most the tenant's."""
    tenant = principal.tenant
    if tenant is None:
        return spec
    if not tenant.allows(spec.job):
        allowed = ", ".join(f"{lo}-{hi}" if lo != hi else str(lo) for lo, hi in tenant.jobs or ())
        raise Forbidden(f"tenant {tenant.name!r} may not use job id {spec.job}; its job ids: {allowed or 'none'}")
    return replace(spec, priority_cap=min(spec.priority_cap, tenant.priority_cap))


def check_quota(principal: Principal, job: int, slots: int, used: int) -> None:
    """Refuse a job that would take the caller's tenant over its share of the pool."""
    tenant = principal.tenant
    if tenant is not None and tenant.slots is not None and used + slots > tenant.slots:
        free = max(tenant.slots - used, 0)
        raise Forbidden(f"job {job} needs {slots} slots but tenant {tenant.name!r} has {free} of its {tenant.slots} "
                        f"free; register a window of at most {free} slots, or deregister one of its jobs")  # fmt: skip


def check_owner(principal: Principal, job: int, owner: str | None) -> None:
    """Only a job's owner or the operator may deregister it."""
    if not principal.operator and owner != principal.name:
        raise Forbidden(f"job {job} belongs to {'another tenant' if owner else 'the operator'}; "
                        f"tenant {principal.name!r} may deregister only its own jobs")


class Policy:
    """A policy file (JSON), reloaded when its modification time changes; a bad reload keeps the old policy."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._stamp: int | None = None
        self.tenants: tuple[Tenant, ...] = ()
        self.reload(strict=True)

    def current(self) -> tuple[Tenant, ...]:
        """The tenants in force, reloading the file first if it changed."""
        try:
            stamp = self.path.stat().st_mtime_ns
        except OSError:
            stamp = None
        if stamp != self._stamp:
            self.reload()
        return self.tenants

    def reload(self, strict: bool = False) -> None:
        """Read the file; ValueError if `strict` (at start), else log and keep the policy in force."""
        try:
            stamp = self.path.stat().st_mtime_ns
            tenants = parse_policy(json.loads(self.path.read_text()), self.path.parent)
        except (OSError, ValueError) as error:
            if strict:
                raise ValueError(f"policy file {self.path}: {error}") from None
            logger.error("policy file %s not reloaded, keeping the policy in force: %s", self.path, error)
            self._stamp = None if isinstance(error, OSError) else stamp  # retry a missing file, not a bad one
            return
        self.tenants, self._stamp = tenants, stamp
        logger.info("policy file %s: %d tenants", self.path, len(tenants))


def parse_policy(body: Any, base: Path) -> tuple[Tenant, ...]:
    """Tenants from a policy document; ValueError names the field to fix."""
    if not isinstance(body, dict) or not isinstance(body.get("tenants"), list) or set(body) - {"tenants"}:
        raise ValueError('a policy is {"tenants": [{"name", "token" or "token_file", "priority_cap", "slots", "jobs"}, ...]}')
    tenants: list[Tenant] = []
    for i, item in enumerate(body["tenants"]):
        what = f"tenants[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{what}: expected an object")
        unknown = set(item) - {"name", "token", "token_file", "priority_cap", "slots", "jobs"}
        if unknown:
            raise ValueError(f"{what}: unknown fields {sorted(unknown)}")
        name = item.get("name")
        if not isinstance(name, str) or not name or name in (OPERATOR.name, SCRAPER.name):
            raise ValueError(f"{what}: 'name' must be a non-empty string other than {OPERATOR.name!r} and {SCRAPER.name!r}")
        if ("token" in item) == ("token_file" in item):
            raise ValueError(f"{what} ({name}): give exactly one of 'token' and 'token_file'")
        token = read_token_file(base / item["token_file"]) if "token_file" in item else item["token"]
        if not isinstance(token, str) or len(token) < 16:
            raise ValueError(f"{what} ({name}): a token must be a string of at least 16 characters")
        cap, slots = item.get("priority_cap", 255), item.get("slots")
        if not _is_int(cap) or not 0 <= cap <= 255:
            raise ValueError(f"{what} ({name}): priority_cap must be an integer in 0..255")
        if slots is not None and (not _is_int(slots) or slots < 0):
            raise ValueError(f"{what} ({name}): slots must be a non-negative integer")
        tenants.append(Tenant(name, token, cap, slots, _job_ranges(item.get("jobs"), f"{what} ({name})")))
    for field in ("name", "token"):
        values = [getattr(t, field) for t in tenants]
        if len(set(values)) != len(values):
            raise ValueError(f"two tenants share a {field}")
    return tuple(tenants)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _job_ranges(value: Any, what: str) -> tuple[tuple[int, int], ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError(f"{what}: 'jobs' is a list of ids and 'lo-hi' ranges")
    ranges = []
    for item in value:
        if _is_int(item):
            lo = hi = item
        elif isinstance(item, str) and item.count("-") == 1 and all(p.strip().isdigit() for p in item.split("-")):
            lo, hi = (int(p) for p in item.split("-"))
        else:
            raise ValueError(f"{what}: job ids are integers or 'lo-hi' ranges, got {item!r}")
        if not 0 <= lo <= hi <= MAX_JOB:
            raise ValueError(f"{what}: job range {item!r} must lie in 0..{MAX_JOB}, low end first")
        ranges.append((lo, hi))
    return tuple(ranges)
