"""The native worker engine (ina/transport/_native.c) behind `Engine`'s interface.

The C core runs the chunk stream of `ina.transport.engine.Engine` (the readable reference) with
the same checks, counters, timers and bytes on the wire; `NativeEngine` drives it sans-IO, as
the tests and the simulator drive the reference; `ina.transport.udp_engine.NativeUdpEngine`
serves it on a socket with its packet loop in C. Two differences, both by design: submitted
words are read in place until their reduction completes (do not change the array meanwhile),
and results land in an array allocated at submit, with no copy back.

It runs the built-in priority policies natively (`FixedPriority`, `IntensityPriority`, `AttainedServicePriority`,
`RemainingWorkPriority`, same arithmetic); any other policy object needs the Python engine (`native_policy` says which).
"""

from __future__ import annotations

import warnings
from collections import Counter
from types import ModuleType
from typing import Any, Literal, NamedTuple

import numpy as np

from ina.net.native import NativeFrameNode, load_native, native_on_path
from ina.net.node import Address
from ina.transport.buffers import ARRAYS
from ina.transport.chunks import result_length
from ina.transport.engine import Engine, EngineConfig, checked_output, checked_submission, failure_message
from ina.transport.errors import TransportError
from ina.transport.priority import AttainedServicePriority, FixedPriority, IntensityPriority, PriorityPolicy, RemainingWorkPriority

MODULE, WHAT = "ina.transport._native", "worker engine"


def native_module() -> ModuleType | None:
    """ina.transport._native, or None (not built, or INA_NATIVE_PACKETS=0; `load_native` says so once)."""
    return load_native(MODULE, WHAT)


def native_policy(policy: PriorityPolicy | None) -> dict[str, Any] | None:
    """The core's policy arguments for `policy` (None: the default IntensityPriority), or None when
    the core cannot run it: only the built-in policies, not subclasses, whose methods it would skip."""
    policy = IntensityPriority() if policy is None else policy
    if type(policy) is FixedPriority:
        return dict(level=policy.level, reference_rate=1.0, levels_per_doubling=0.0, time_constant=1.0, age_step=1.0,
                    decaying_bytes=0.0, observed_at=0.0)  # fmt: skip
    if type(policy) is IntensityPriority:
        return dict(level=-1, reference_rate=policy.reference_rate, levels_per_doubling=policy.levels_per_doubling,
                    time_constant=policy.time_constant, age_step=policy.age_step,
                    decaying_bytes=policy._bytes, observed_at=policy._at)  # fmt: skip  # its state so far
    if type(policy) in (AttainedServicePriority, RemainingWorkPriority):  # the same formula, descending, over bytes that
        # never decay: those attained, or those left of a total
        total = policy.total_bytes if isinstance(policy, RemainingWorkPriority) else 0.0
        return dict(level=-1, reference_rate=policy.reference_bytes, levels_per_doubling=-policy.levels_per_doubling,
                    time_constant=0.0, age_step=policy.age_step, decaying_bytes=policy.attained, observed_at=0.0,
                    offset=float(policy.top), total=total)  # fmt: skip
    return None


def runs_natively(policy: PriorityPolicy | None) -> bool:
    """Whether the native engine is built and runs `policy`; a policy it cannot run is named, once."""
    if native_module() is None:
        return False
    if native_policy(policy) is None:
        warnings.warn(f"ina: the native worker engine runs the built-in policies only (FixedPriority, IntensityPriority, AttainedServicePriority, RemainingWorkPriority); the policy "
                      f"{type(policy).__name__} runs on the much slower Python engine", RuntimeWarning, stacklevel=3)
        return False
    return True


def new_core(config: EngineConfig, policy: PriorityPolicy | None, peer: Any, *, served: bool) -> tuple[PriorityPolicy, Any]:
    """The policy (None: a fresh IntensityPriority) and a `_native.Engine` for `config` running it; `peer(address)`
    is an address's (ip, port). RuntimeError where the core is not built, ValueError for a policy it cannot run."""
    module = native_module()
    if module is None:
        raise RuntimeError("the native worker engine is not built (or INA_NATIVE_PACKETS=0)")
    policy = policy if policy is not None else IntensityPriority()
    arguments = native_policy(policy)
    if arguments is None:
        raise ValueError(f"the native engine runs FixedPriority, IntensityPriority, AttainedServicePriority and RemainingWorkPriority, not {type(policy).__name__}")
    return policy, module.Engine(**core_arguments(config, arguments, peer, served=served))


def core_arguments(config: EngineConfig, policy: dict[str, Any], peer: Any, *, served: bool) -> dict[str, Any]:
    """The keyword arguments of `_native.Engine` for `config`; `peer(address)` is an address's (ip, port)."""
    others = config.sources - {config.destination}
    ps = config.ps
    return dict(
        job=config.job, rank=config.rank, workers=config.workers, words=config.words, window=config.window,
        destination=peer(config.destination), other=peer(next(iter(others))) if others else None,
        ps=None if ps is None else peer(ps), pool=config.pool, slot_base=config.slot_base,
        span=config.span or config.pool, ps_only=config.ps_only, min_rto=config.min_rto, max_rto=config.max_rto,
        initial_rto=config.initial_rto, peer_timeout=config.peer_timeout, first_seq=config.first_seq,
        served=served, failover=config.failover, failback=config.failback, pad=config.pad, racks=config.racks,
        early_resend=config.early_resend, **policy,
    )  # fmt: skip


def new_reduction(config: EngineConfig, words: np.ndarray, op: str, lane_bits: int, index_bits: int,
                  out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """A submission's checked, contiguous words and the array its results will fill (`out`, if given)."""
    words = np.ascontiguousarray(checked_submission(config, words, op, lane_bits, index_bits))
    length = result_length(words.size, -(-words.size // config.words), config.words, index_bits, lane_bits)
    out = checked_output(out, length)
    return words, ARRAYS.take(length) if out is None else out


def engine_error(config: EngineConfig, failure: tuple[int, int, int, int | None] | None) -> TransportError | None:
    """The TransportError of the core's `failure()` facts (the reference's message)."""
    return None if failure is None else TransportError(failure_message(config, *failure))


class RttState(NamedTuple):
    """The core's RttEstimator: srtt (None before a sample), rttvar and the current rto."""

    srtt: float | None
    rttvar: float
    rto: float


class _AddressBook:
    """Native cores name peers by (IPv4, port); a sans-IO engine's peers may be any (host, port)
    (the simulator's, the tests'), so each distinct address gets a number of its own (port 0)."""

    def __init__(self) -> None:
        self._codes: dict[Address, int] = {}
        self._addresses: list[Address] = []

    def peer(self, address: Address) -> tuple[int, int]:
        code = self._codes.get(address)
        if code is None:
            code = self._codes[address] = len(self._addresses)
            self._addresses.append(tuple(address))
        return code, 0

    def address(self, code: int, _port: int) -> Address:
        return self._addresses[code]


class NativeEngine(NativeFrameNode):
    """`Engine(config, policy)` on the native core, sans-IO: the same interface, counters and bytes.

    Raises ValueError for a policy the core cannot run (`native_policy`); pick the Python
    `Engine` for those. The policy object still sees `observe` for every submission, so
    whoever reads it (its `rate`, its `base`) sees what the core computes with.
    """

    def __init__(self, config: EngineConfig, policy: PriorityPolicy | None = None) -> None:
        self.config = config
        book = _AddressBook()
        self._peer, self._address = book.peer, book.address
        self.policy, self._core = new_core(config, policy, book.peer, served=False)
        self._error: TransportError | None = None

    def submit(self, words: np.ndarray, *, op: Literal["sum", "max"] = "sum", lane_bits: int, index_bits: int = 0,
               now: float, out: np.ndarray | None = None) -> int:  # fmt: skip
        """Queue one reduction (see `Engine.submit`); `words` is read in place until it completes."""
        if self.error is not None:
            raise self.error
        words, out = new_reduction(self.config, words, op, lane_bits, index_bits, out)
        handle = self._core.submit(words, out, op == "max", lane_bits, index_bits, now)
        self.policy.observe(4 * words.size, now)
        return handle

    def completed(self) -> list[tuple[int, np.ndarray]]:
        return self._core.completed()

    @property
    def idle(self) -> bool:
        return self._core.idle()

    @property
    def counters(self) -> Counter[str]:
        return Counter(self._core.counters())

    @property
    def error(self) -> TransportError | None:
        if self._error is None:
            self._error = engine_error(self.config, self._core.failure())
        return self._error

    @property
    def rtt(self) -> RttState:
        return RttState(*self._core.rtt())



def engine(config: EngineConfig, policy: PriorityPolicy | None = None, path: str | None = None) -> Engine | NativeEngine:
    """The sans-IO engine on `path`: "python", "native" (an error where not built), or None for native where it
    is built and runs `policy` (as the transports choose it)."""
    native = native_on_path(path, MODULE, WHAT) is not None and runs_natively(policy)
    return NativeEngine(config, policy) if native else Engine(config, policy)
