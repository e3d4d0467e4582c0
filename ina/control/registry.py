"""Registrations as leases, and the job table kept on disk (docs/protocol.md, section 7, "Leases and restarts").

A control API grants each registration a lease that the job's rank 0 renews; one not renewed in
time is removed, so jobs whose processes are all gone leave without an operator. With a state
file the job table outlives the service: a restarted switch or PS registers the same jobs again,
with the same owners and slots, before it serves.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ina.control.jobs import FIELDS, JobSpec
from ina.control.policy import OPEN, OPERATOR, Principal, acting_as, check_owner, grant

logger = logging.getLogger("ina.control")
changes = logging.getLogger("ina.control.jobs")
"""Every change to the job table, at INFO: the services print it (`log_job_changes`), an audit trail."""

DEFAULT_LEASE = 60.0
"""Seconds a registration lives without renewal."""

_placement: contextvars.ContextVar[tuple[int, int | None] | None] = contextvars.ContextVar("ina_control_placement", default=None)


def placement() -> tuple[int, int | None] | None:
    """The `(slot_base, span)` a restored job must get back (None: a new registration, placed as usual)."""
    return _placement.get()


@contextmanager
def placing(slot_base: int, span: int | None) -> Iterator[None]:
    """Register within this block at the slots the job held before a restart."""
    token = _placement.set((slot_base, span))
    try:
        yield
    finally:
        _placement.reset(token)


@dataclass(frozen=True, slots=True)
class Saved:
    """One job as the state file keeps it: the registration as granted, its owner, its slots at a switch."""

    spec: JobSpec
    owner: str | None
    slot_base: int | None = None
    span: int | None = None

    @classmethod
    def of(cls, entry: dict[str, Any]) -> Saved:
        """From an entry of a target's job table (`GET /jobs`)."""
        body = {name: value for name, value in entry.items() if name in FIELDS}
        return cls(JobSpec.from_json(body), entry.get("owner"), entry.get("slot_base"), entry.get("span"))

    def to_json(self) -> dict[str, Any]:
        return {"registration": self.spec.to_json(), "owner": self.owner, "slot_base": self.slot_base, "span": self.span}

    @classmethod
    def from_json(cls, body: Any) -> Saved:
        if not isinstance(body, dict) or not isinstance(body.get("registration"), dict):
            raise ValueError("each job is {'registration', 'owner', 'slot_base', 'span'}")
        return cls(JobSpec.from_json(body["registration"]), body.get("owner"), body.get("slot_base"), body.get("span"))

    @property
    def principal(self) -> Principal:
        """Who restores it: its owner, beyond quotas (it held its slots already)."""
        if self.owner is None:
            return OPEN
        return OPERATOR if self.owner == OPERATOR.name else Principal(self.owner, True)


class JobStore:
    """The state file: the job table as a JSON list, replaced atomically, readable by its owner only."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> list[Saved]:
        """The saved jobs, oldest registration first ([] for a file not there yet); ValueError names the file."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        except OSError as error:
            raise ValueError(f"--state {self.path}: {error.strerror or error}") from None
        try:
            body = json.loads(text)
            if not isinstance(body, dict) or not isinstance(body.get("jobs"), list):
                raise ValueError('a state file is {"jobs": [...]}')
            return [Saved.from_json(job) for job in body["jobs"]]
        except ValueError as error:
            raise ValueError(f"--state {self.path} is not a job table ({error}); move it away to start with no jobs") from None

    def save(self, jobs: list[Saved]) -> None:
        temporary = self.path.with_name(self.path.name + ".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            json.dump({"jobs": [job.to_json() for job in jobs]}, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)


class Leases:
    """Each leased job's deadline; thread-safe."""

    def __init__(self, lease: float = DEFAULT_LEASE) -> None:
        if lease < 0:
            raise ValueError(f"--lease must be 0 (no expiry) or a positive number of seconds, got {lease}")
        self.lease = lease
        self._deadlines: dict[int, float] = {}
        self._lock = threading.Lock()

    def grant(self, job: int, now: float) -> None:
        """Start (or renew) `job`'s lease."""
        if self.lease:
            with self._lock:
                self._deadlines[job] = now + self.lease

    def drop(self, job: int) -> None:
        with self._lock:
            self._deadlines.pop(job, None)

    def expired(self, now: float) -> list[int]:
        """The jobs whose lease ended by `now`, forgotten here."""
        with self._lock:
            gone = [job for job, deadline in self._deadlines.items() if deadline <= now]
            for job in gone:
                del self._deadlines[job]
            return gone


@dataclass(frozen=True, slots=True)
class Registry:
    """How a control API keeps its registrations: their lease, and the state file (None: memory only)."""

    lease: float = DEFAULT_LEASE
    store: JobStore | None = None


class Registrar:
    """Every change to a target's job table that comes through its control API: registrations,
    deregistrations, renewals and expiries, one at a time (so an ownership check and the change it
    guards see the same table), each saved to the state file. `restore()` first, at start."""

    def __init__(self, target: Any, registry: Registry) -> None:
        self.target = target
        self.store = registry.store
        self.leases = Leases(registry.lease)
        self.expired = 0
        self._changes = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Expire leases on a daemon thread, checking a few times per lease, until `close()`."""
        if self.leases.lease:
            self._thread = threading.Thread(target=self._run, name="ina-leases", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(min(1.0, self.leases.lease / 4)):
            try:
                self.expire(time.monotonic())
            except Exception:  # noqa: BLE001 - a target that cannot be changed now (a BMv2 restarting) is retried
                logger.exception("expiring leases failed; retrying")

    def close(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()

    def restore(self, now: float) -> int:
        """Register the state file's jobs again, oldest first; how many. ValueError names the file."""
        saved = self.store.load() if self.store is not None else []
        with self._changes:
            for job in saved:
                try:
                    with acting_as(job.principal), placing(job.slot_base, job.span) if job.slot_base is not None else nullcontext():
                        self.target.register(job.spec)
                except ValueError as error:
                    raise ValueError(f"--state {self.store.path}: job {job.spec.job} cannot be restored: {error}") from None  # type: ignore[union-attr]
                self.leases.grant(job.spec.job, now)
                changes.info("job %d restored from %s: %d workers", job.spec.job, self.store.path, len(job.spec.workers))  # type: ignore[union-attr]
        return len(saved)

    def register(self, caller: Principal, spec: JobSpec, now: float) -> dict[str, Any]:
        spec = grant(spec, caller)
        with self._changes:
            with acting_as(caller):
                answer = self.target.register(spec)
            self.leases.grant(spec.job, now)
            self._save()
        changes.info("job %d registered by %s: %d workers, priority cap %d", spec.job, caller.name or "anyone", len(spec.workers), spec.priority_cap)
        answer |= {"lease": self.leases.lease}
        return answer if caller.tenant is None else answer | {"priority_cap": spec.priority_cap}

    def deregister(self, caller: Principal, job: int) -> None:
        with self._changes:
            entry = self._entry(job)
            if entry is not None:  # checked before the target changes anything (a P4 switch writes tables first)
                check_owner(caller, job, entry.get("owner"))
            with acting_as(caller):
                self.target.deregister(job)
            self.leases.drop(job)
            self._save()
        changes.info("job %d deregistered by %s", job, caller.name or "anyone")

    def renew(self, caller: Principal, job: int, now: float) -> dict[str, Any] | None:
        """The renewed lease, or None for a job not registered here."""
        with self._changes:
            entry = self._entry(job)
            if entry is None:
                return None
            check_owner(caller, job, entry.get("owner"))
            self.leases.grant(job, now)
        return {"job": job, "lease": self.leases.lease}

    def expire(self, now: float) -> list[int]:
        """Remove the jobs whose lease ended; their ids."""
        gone = []
        with self._changes:
            for job in self.leases.expired(now):
                if self._entry(job) is None:
                    continue
                with acting_as(OPERATOR):
                    self.target.deregister(job)
                changes.warning("job %d: no renewal of its %g s lease, so its workers are gone: removed", job, self.leases.lease)
                gone.append(job)
            if gone:
                self.expired += len(gone)
                self._save()
        return gone

    def _entry(self, job: int) -> dict[str, Any] | None:
        return next((j for j in self.target.jobs() if j.get("job") == job), None)

    def _save(self) -> None:
        if self.store is not None:
            self.store.save([Saved.of(entry) for entry in self.target.jobs()])
