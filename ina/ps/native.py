"""The parameter server with its data plane in C (ina/ps/_native.c), behind `ParameterServer`'s interface.

Pieces, exact cover, the result ring, fetches, FLUSH timers and every counter live in C, so
`NativeRunner` serves the PS with the GIL released and batched system calls. The control plane
stays here: registration checks and the operator policy (ina.ps.limits, shared with the Python
PS), which hand each admitted job to the C core. `ps_core` picks the native PS where it built,
the Python reference otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ina.control import Endpoint, JobSpec
from ina.control.policy import caller, check_owner
from ina.control.watch import Waiting
from ina.net.native import NativeNode, load_native, native_on_path, peer_of
from ina.ps.core import COUNTERS, ParameterServer
from ina.ps.limits import MAX_WORDS, admit, check_options, describe

MODULE, WHAT = "ina.ps._native", "parameter server"


def native_module() -> ModuleType | None:
    """The C data plane, or None (not built, or INA_NATIVE_PACKETS=0: ina.net.native.load_native)."""
    return load_native(MODULE, WHAT)


def ps_core(words: int, path: str | None = None, messages: int = 64, **options: Any) -> ParameterServer | NativeParameterServer:
    """The PS on `path`: "native", "python", or None for native where it built; `options` as for `ParameterServer`,
    and the native loop's datagrams per receive call `messages`."""
    module = native_on_path(path, MODULE, WHAT)
    if module is None:
        return ParameterServer(words, **options)
    return NativeParameterServer(words, messages=messages, module=module, **options)


class NativeParameterServer(NativeNode):
    """`ParameterServer` with the C data plane: a `Node` and `FrameNode` for packets, a `ControlTarget`
    for its jobs, and the `NativeCore` that `NativeRunner` serves. Thread-safe."""

    role = "ps"
    path = "native"

    def __init__(self, words: int, *, flush_delay: float = 0.002, piece_timeout: float = 60.0, result_retention: int = 64,
                 max_words: int = MAX_WORDS, messages: int = 64, module: ModuleType | None = None) -> None:  # fmt: skip
        check_options(words, flush_delay, piece_timeout, result_retention, max_words)
        module = module or native_module()
        if module is None:
            raise RuntimeError(f"{MODULE} is not built: python setup.py build_ext --inplace")
        if tuple(module.COUNTERS) != COUNTERS:
            raise ImportError(f"{MODULE} counts {module.COUNTERS}, the Python PS {COUNTERS}: rebuild it")
        self.words = words
        self.max_words = max_words
        self.flush_delay = flush_delay
        self.piece_timeout = piece_timeout
        self.result_retention = result_retention
        self._core = module.ParameterServer(words, flush_delay, piece_timeout, messages)
        self._jobs: dict[int, tuple[JobSpec, str | None, int]] = {}
        """The registered jobs as the control plane admitted them: spec, owner, ring."""
        self._lock = threading.Lock()  # the Python table; the C core has a lock of its own

    # --- ControlTarget ----------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        return describe(self)

    def register(self, spec: JobSpec) -> dict[str, Any]:
        """Add a job, as the control request's caller may have it (docs/protocol.md, section 7)."""
        with self._lock:
            spec, owner, words, ring = admit(spec, self._jobs, self.words, self.max_words, self.result_retention)
            workers, leaves = (_peers(endpoints) for endpoints in (spec.workers, spec.leaves))
            switch, group = (None if e is None else peer_of(e.addr) for e in (spec.switch, spec.group))
            table, racks = (np.asarray(values, dtype=np.uint32).tobytes() for values in (spec.table, spec.racks))
            self._core.register(spec.job, words, spec.window, ring, spec.lane_bits, spec.index_bits, workers, switch, table, group,
                                racks, leaves)  # fmt: skip
            self._jobs[spec.job] = (spec, owner, ring)
        return {"job": spec.job, "ring": ring}

    def deregister(self, job: int) -> None:
        with self._lock:
            entry = self._jobs.get(job)
            if entry is None:
                raise ValueError(f"job {job} is not registered")
            check_owner(caller(), job, entry[1])
            del self._jobs[job]
            self._core.deregister(job)

    def jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            listed = []
            for job, (spec, owner, ring) in self._jobs.items():
                pending, results, fetching, completed, switch_completed = self._core.job_state(job)
                listed.append({**spec.to_json(), "pending": pending, "results": results, "ring": ring, "fetching": fetching,
                               "completed": completed, "switch_completed": switch_completed,
                               **({} if owner is None else {"owner": owner})})  # fmt: skip
            return listed

    def counters(self) -> dict[str, int]:
        return dict(zip(COUNTERS, self._core.counters()))

    def waiting(self) -> Waiting:
        rows, width = self._core.waiting()
        rows = np.frombuffer(rows, dtype=np.uint32)
        count = rows.size // (3 + width)
        job, seq, is_max = rows[: 3 * count].reshape(3, count).astype(np.uint64)
        return Waiting(job.astype(np.int64), seq | is_max << np.uint64(32), rows[3 * count :].reshape(count, width).copy())


def _peers(endpoints: Sequence[Endpoint]) -> bytes:
    """Addresses as the C core takes them: (IPv4, port) pairs of uint32."""
    return np.array([peer_of(e.addr) for e in endpoints], dtype=np.uint32).reshape(-1, 2).tobytes()
