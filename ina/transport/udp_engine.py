"""A worker's engine on a real UDP socket, served by a thread of its own.

`UdpEngine` serves the Python `Engine`: it is sans-IO and not thread-safe, and the training
thread submits reductions while packets arrive at any time, so one thread (a `UdpRunner`) owns
the engine: submissions reach it through `UdpRunner.call_soon`, and results leave it as
`concurrent.futures.Future`s, completed on that thread. `NativeUdpEngine` serves the native core
(`ina.transport.native`): its packet loop runs in C with the GIL released, submissions go
straight in (the core locks), and a completion thread, blocked in the core without the GIL until a
reduction is done, completes the futures. `serve_engine` picks the native one where it can.
Torch-free, so it is tested without a process group.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future
from typing import Literal, NamedTuple, Sequence

import numpy as np

from ina.net.frames import Frames
from ina.net.native import NativeRunner, peer_of
from ina.net.node import Datagram
from ina.net.udp import UdpRunner
from ina.transport.engine import Engine, EngineConfig
from ina.transport.errors import TransportError
from ina.transport.native import engine_error, new_core, new_reduction, runs_natively
from ina.transport.priority import PriorityPolicy


class _Submission(NamedTuple):
    future: Future
    words: np.ndarray
    op: Literal["sum", "max"]
    lane_bits: int
    index_bits: int
    out: np.ndarray | None


class UdpEngine:
    """`Engine(config, policy)` served on `sock` (bound; this object then owns it, and `group`, the job's
    RESULT group socket, read beside it) until `close()`.

    `submit` may be called from any thread. Each reduction's future gets its uint32 sums
    (`Engine.completed`), or the engine's `TransportError` once a peer stays silent for
    `peer_timeout`; after an error or `close()` every pending and later future fails with it.
    `bytes_sent` counts the UDP payload bytes handed to the socket: headers and resends included.
    """

    def __init__(self, config: EngineConfig, sock: socket.socket, policy: PriorityPolicy | None = None,
                 group: socket.socket | None = None) -> None:  # fmt: skip
        self.engine = Engine(config, policy)
        self.bytes_sent = 0
        self._lock = threading.Lock()
        self._inbox: deque[_Submission] = deque()  # submitted, not yet handed to the engine
        self._pending: deque[Future] = deque()  # handed to the engine, in handle order (runner thread only)
        self._failure: BaseException | None = None
        self.runner = UdpRunner(self, sock, group=group)
        self._thread = threading.Thread(target=self._serve, name=f"ina-job{config.job}-rank{config.rank}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.runner.address

    @property
    def counters(self) -> Counter[str]:
        """The engine's counters (`Engine.counters`), as of now."""
        return Counter(self.engine.counters)

    def submit(self, words: np.ndarray, *, op: Literal["sum", "max"] = "sum", lane_bits: int, index_bits: int = 0,
               out: np.ndarray | None = None) -> Future:  # fmt: skip
        """Queue one reduction (see `Engine.submit`, `out` too); its future completes on the serving thread."""
        future: Future = Future()
        with self._lock:
            if self._failure is not None:
                future.set_exception(self._failure)
                return future
            self._inbox.append(_Submission(future, words, op, lane_bits, index_bits, out))
        self.runner.call_soon(self._take)
        return future

    def close(self) -> None:
        """Stop serving, fail what is unfinished, and release the socket; calling it twice is harmless."""
        self.runner.stop()
        if self._thread is not threading.current_thread():
            self._thread.join()
        self.runner.close()

    # --- on the serving thread ---------------------------------------------------------

    def _take(self) -> None:
        with self._lock:
            submissions, self._inbox = self._inbox, deque()
        now = self.runner.clock()
        for s in submissions:
            try:
                self.engine.submit(s.words, op=s.op, lane_bits=s.lane_bits, index_bits=s.index_bits, now=now, out=s.out)
            except BaseException as error:  # noqa: BLE001 - the submitter hears of it through its future
                s.future.set_exception(error)
            else:
                self._pending.append(s.future)

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        return self.receive_frames(Frames.of(datagrams), now).datagrams()

    def tick(self, now: float) -> list[Datagram]:
        return self.tick_frames(now).datagrams()

    def receive_frames(self, frames: Frames, now: float) -> Frames:
        """What the runner calls (the engine's frames path: no Python object per packet sent)."""
        return self._settle(self.engine.receive_frames(frames, now))

    def tick_frames(self, now: float) -> Frames:
        return self._settle(self.engine.tick_frames(now))

    def next_deadline(self) -> float | None:
        return self.engine.next_deadline()

    def _settle(self, out: Frames) -> Frames:
        """Count what leaves, complete finished reductions, and fail everything once the engine has failed."""
        self.bytes_sent += int(out.length.sum())
        for _handle, words in self.engine.completed():
            self._pending.popleft().set_result(words)
        if self.engine.error is not None:
            self._fail(self.engine.error)
            self.runner.stop()
        return out

    def _serve(self) -> None:
        try:
            self.runner.serve_forever()
        except BaseException as error:  # noqa: BLE001 - reported through every future
            self._fail(_loop_failure(error))
        self._fail(TransportError("the transport is closed"))

    def _fail(self, error: BaseException) -> None:
        """Fail every unfinished reduction, and every later one, with the first error."""
        with self._lock:
            if self._failure is None:
                self._failure = error
            error = self._failure
            submissions, self._inbox = self._inbox, deque()
        for future in [s.future for s in submissions] + list(self._pending):
            future.set_exception(error)
        self._pending.clear()


class NativeUdpEngine:
    """The native core served on `sock` (bound; this object then owns it, and `group` too) until `close()`: `UdpEngine`'s
    interface and behaviour (futures, failures, `bytes_sent`), with no Python in the packet loop.

    `submit` may be called from any thread; the words are read in place until the reduction's
    future completes, so do not change them meanwhile. Raises ValueError for a policy the core
    cannot run (`ina.transport.native.native_policy`).
    """

    def __init__(self, config: EngineConfig, sock: socket.socket, policy: PriorityPolicy | None = None,
                 group: socket.socket | None = None) -> None:  # fmt: skip
        self.config = config
        self.policy, self.core = new_core(config, policy, peer_of, served=True)
        self.runner = NativeRunner(self.core, sock, group)
        self._lock = threading.Lock()
        self._pending: dict[int, Future] = {}  # by handle
        self._failure: BaseException | None = None
        self._closing = False
        name = f"ina-job{config.job}-rank{config.rank}"
        self._threads = [threading.Thread(target=self._serve, name=name, daemon=True),
                         threading.Thread(target=self._complete, name=f"{name}-results", daemon=True)]  # fmt: skip
        for thread in self._threads:
            thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.runner.address

    @property
    def bytes_sent(self) -> int:
        """UDP payload bytes handed to the socket: headers and resends included."""
        return self.core.bytes_sent()

    @property
    def counters(self) -> Counter[str]:
        """The engine's counters (`Engine.counters`), as of now."""
        return Counter(self.core.counters())

    def submit(self, words: np.ndarray, *, op: Literal["sum", "max"] = "sum", lane_bits: int, index_bits: int = 0,
               out: np.ndarray | None = None) -> Future:  # fmt: skip
        """Queue one reduction (see `Engine.submit`, `out` too); its future completes on the completion thread."""
        future: Future = Future()
        try:
            words, out = new_reduction(self.config, words, op, lane_bits, index_bits, out)
        except ValueError as error:
            future.set_exception(error)
            return future
        with self._lock:
            if self._failure is None:
                now = time.monotonic()
                self._pending[self.core.submit(words, out, op == "max", lane_bits, index_bits, now)] = future
                self.policy.observe(4 * words.size, now)
                return future
        future.set_exception(self._failure)
        return future

    def close(self) -> None:
        """Stop serving, fail what is unfinished, and release the socket; calling it twice is harmless."""
        self._closing = True
        self.core.stop()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()
        self.runner.close()

    def _serve(self) -> None:
        try:
            self.runner.serve_forever()
        except BaseException as error:  # noqa: BLE001 - reported through every future
            self._fail(_loop_failure(error))
        self._closing = True
        self.core.stop()

    def _complete(self) -> None:
        """Complete futures as reductions finish, until the engine fails or closes."""
        while True:
            self.core.wait(1.0)
            done = self.core.completed()
            with self._lock:
                futures = [self._pending.pop(handle) for handle, _ in done]
            for future, (_, words) in zip(futures, done):
                future.set_result(words)
            error = engine_error(self.config, self.core.failure())
            if error is not None:
                self._fail(error)
                return
            if self._closing:
                self._fail(TransportError("the transport is closed"))
                return

    def _fail(self, error: BaseException) -> None:
        """Fail every unfinished reduction, and every later one, with the first error."""
        with self._lock:
            if self._failure is None:
                self._failure = error
            error = self._failure
            futures, self._pending = list(self._pending.values()), {}
        for future in futures:
            future.set_exception(error)


ServedEngine = UdpEngine | NativeUdpEngine


def serve_engine(config: EngineConfig, sock: socket.socket, policy: PriorityPolicy | None = None,
                 group: socket.socket | None = None) -> ServedEngine:  # fmt: skip
    """The native engine where it is built and runs `policy`, else the Python one (saying why, for a policy);
    either reads the job's RESULT group socket `group` beside `sock`."""
    engine = NativeUdpEngine if runs_natively(policy) else UdpEngine
    return engine(config, sock, policy, group)


def _loop_failure(error: BaseException) -> TransportError:
    """What every unfinished reduction fails with when the packet loop itself broke."""
    failure = TransportError(f"the transport's packet loop failed: {error!r}")
    failure.__cause__ = error
    return failure

