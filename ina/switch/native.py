"""The software switch with its data plane in C (ina/switch/_native.c), behind `SwitchCore`'s interface.

The per-packet algorithm, the slot registers and the counters live in C, so `NativeRunner` serves
the switch with the GIL released and batched system calls. The control plane stays here, in the
Python `Jobs` table (registration checks, policy, slot_base and partition choice, tokens and
quotas), which pushes what the data plane needs of each job into the C core on every change.
`switch_core` picks the native core where it built, the Python reference otherwise.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

import numpy as np

from ina.control import JobSpec
from ina.net.native import NativeNode, load_native, native_on_path, peer_of
from ina.protocol import MAX_WORKERS
from ina.switch.config import POLICIES, SwitchConfig
from ina.control.watch import Waiting
from ina.switch.core import COUNTERS, JOB_COUNTERS, SwitchCore, waiting_in
from ina.switch.state import Jobs, Slots

MODULE, WHAT = "ina.switch._native", "software switch"


def native_module() -> ModuleType | None:
    """The C data plane, or None (not built, or INA_NATIVE_PACKETS=0: ina.net.native.load_native)."""
    return load_native(MODULE, WHAT)


def switch_core(config: SwitchConfig, path: str | None = None, messages: int = 64) -> SwitchCore | NativeSwitchCore:
    """The switch core on `path`: "native", "python", or None for native where it built."""
    module = native_on_path(path, MODULE, WHAT)
    return NativeSwitchCore(config, module, messages) if module is not None else SwitchCore(config)


class NativeSwitchCore(NativeNode):
    """`SwitchCore` with the C data plane: a `Node` and `FrameNode` for packets, a `ControlTarget`
    for its job table, and the `NativeCore` that `NativeRunner` serves. Thread-safe."""

    role = "switch"
    path = "native"

    def __init__(self, config: SwitchConfig, module: ModuleType, messages: int = 64) -> None:
        if tuple(module.COUNTERS) != COUNTERS:
            raise ImportError(f"{MODULE} counts {module.COUNTERS}, the Python switch {COUNTERS}: rebuild it")
        self.settings = config
        self.table = Jobs(config.pool, config.policy)
        self._core = module.Switch(config.pool, config.words, POLICIES.index(config.policy), config.slot_timeout, messages,
                                   copies=config.result_copies)  # fmt: skip
        self._job_words = module.JOB_WORDS
        self._lock = threading.Lock()  # the Python table; the C core has a lock of its own

    # -- control plane -------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        return self.settings.to_json()

    def register(self, spec: JobSpec) -> dict[str, Any]:
        with self._lock:
            entry = self.table.add(spec)
            self._push()
        return entry.answer(self.settings.pool)

    def deregister(self, job: int) -> None:
        """Table entry first (its packets are then unregistered), then its slots and redirects: both
        in one step of the data plane."""
        with self._lock:
            self.table.remove(job)
            self._push(forget=job)

    def jobs(self) -> list[dict[str, Any]]:
        """The job table, each job with its JOB_COUNTERS."""
        with self._lock:
            return [entry.to_json() | dict(zip(JOB_COUNTERS, self._core.job_counters(job))) for job, entry in self.table.entries.items()]

    def counters(self) -> dict[str, int]:
        return dict(zip(COUNTERS, self._core.counters()))

    def waiting(self) -> Waiting:
        key, bitmap = self._core.holders()
        return waiting_in(np.frombuffer(key, dtype=np.uint64), np.frombuffer(bitmap, dtype=np.uint32))

    def _push(self, forget: int = -1) -> None:
        """The data plane's job table: per job its id, n, slot_base, span mask, lane_bits, cap, PS, group (0, 0: none),
        its role here (docs/protocol.md, section 10) with a leaf's rack, full rack bitmap and spine (else 0s), and workers."""
        table = self.table
        rows = np.zeros((len(table.entries), self._job_words), dtype=np.uint32)
        for i, (row, entry) in enumerate(zip(rows, table.entries.values())):
            spec = entry.spec
            assert spec.ps is not None  # Jobs refuses a switch job without one
            assert table.index[spec.job] == i  # the role arrays' row
            group = peer_of(spec.group.addr) if spec.group else (0, 0)
            up = peer_of(spec.uplink.addr) if spec.uplink else (0, 0)
            row[:15] = (spec.job, spec.fanin, entry.slot_base, (entry.span or self.settings.pool) - 1, spec.lane_bits,
                        spec.priority_cap, *peer_of(spec.ps.addr), *group, table.role[i], table.rack[i], table.racks_full[i],
                        *up)  # fmt: skip
            peers = np.array([peer_of(w.addr) for w in spec.workers], dtype=np.uint32).reshape(-1)
            row[15 : 15 + peers.size] = peers
        assert rows.shape[1] == 15 + 2 * MAX_WORKERS
        self._core.set_jobs(rows.tobytes(), forget)

    # -- data plane ----------------------------------------------------------------------

    @property
    def slots(self) -> Slots:
        """A copy of the slot registers, as the Python core holds them (tests, test vectors)."""
        key, prio, bitmap, value, words, redirect, touched = self._core.registers()
        slots = Slots(self.settings.pool, self.settings.words)
        slots.key[:] = np.frombuffer(key, dtype=np.uint64)
        slots.prio[:] = np.frombuffer(prio, dtype=np.uint32)
        slots.bitmap[:] = np.frombuffer(bitmap, dtype=np.uint32)
        slots.value[:] = np.frombuffer(value, dtype=np.uint32).reshape(slots.value.shape)
        slots.words[:] = np.frombuffer(words, dtype=np.uint32)
        slots.redirect[:] = np.frombuffer(redirect, dtype=np.uint64)
        slots.touched[:] = np.frombuffer(touched, dtype=np.float64)
        return slots
