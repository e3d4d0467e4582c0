"""The Python side of the native packet paths (ina/csrc): frames across the C boundary, and a runner.

A native core (the C twin of the worker engine, the PS or the software switch) takes and returns
datagrams as five flat buffers: the bytes, each datagram's start and length, and its peer's IPv4
address and port (ina/csrc/ina_pynode.h). `to_native` and `from_native` convert `Frames` to and
from them, so tests drive a native core exactly as they drive its Python reference.

`NativeRunner` serves a native core on a bound UDP socket with the interface of `UdpRunner`:
its whole packet loop (recvmmsg with GRO, sendmmsg with GSO, timers) runs in C with the GIL
released, so Python threads of the same process keep running while packets flow.
"""

from __future__ import annotations

import importlib
import ipaddress
import os
import socket
import warnings
from types import ModuleType
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from ina.net.frames import Frames
from ina.net.node import Address, Datagram
from ina.net.udp import LoopThread, open_socket

DISABLE = "INA_NATIVE_PACKETS"
"""Set to 0 to run the Python references instead of the native cores everywhere."""

PATHS = ("python", "native")
"""What a core may be asked to run on; None asks for the native one where it built."""

NativeFrames = tuple[Any, Any, Any, Any, Any]
"""(data, start int64, length int64, ip uint32, port uint16) as bytes-like buffers, every integer in host order."""


class NativeCore(Protocol):
    """What a native core's extension type offers to the runner (ina/csrc/ina_pynode.h)."""

    def serve(self, fd: int, group: int = -1) -> None: ...

    def stop(self) -> None: ...

    def refused(self) -> int: ...


def load_native(module: str, what: str) -> ModuleType | None:
    """The native core's extension `module` (e.g. "ina.switch._native"), or None: the Python
    reference then runs. Disabled on purpose with INA_NATIVE_PACKETS=0; a missing build says so
    once per module, with how to get it, as the codec does."""
    if os.environ.get(DISABLE, "1") == "0":
        return None
    try:
        return importlib.import_module(module)
    except ImportError as error:
        warnings.warn(f"ina: the native {what} is not built ({error}); using the much slower Python reference. "
                      "Reinstall with a C compiler present (pip install -e .) to build it.", RuntimeWarning, stacklevel=2)
        return None


def native_on_path(path: str | None, module: str, what: str) -> ModuleType | None:
    """The extension to run on `path`: none for "python", `module` for "native" (RuntimeError, saying how to
    get it, where it is not available), and for None the native one where it built (`load_native`)."""
    if path not in (None, *PATHS):
        raise ValueError(f"path must be one of {PATHS} or None (native where built), got {path!r}")
    loaded = load_native(module, what) if path != "python" else None
    if loaded is None and path == "native":
        raise RuntimeError(f"the native {what} is not available: build it (python setup.py build_ext --inplace) "
                           f"and unset {DISABLE}=0, or use the Python path")  # fmt: skip
    return loaded


def ipv4(host: str) -> int:
    """A host's IPv4 address as an integer, as native cores name peers (names resolved, as `BatchSocket` does)."""
    try:
        return int(ipaddress.IPv4Address(host))
    except ValueError:
        return int(ipaddress.IPv4Address(socket.gethostbyname(host)))


def peer_of(address: Address) -> tuple[int, int]:
    """An address as a native core names it: (IPv4 as an integer, port)."""
    host, port = address
    return ipv4(host), port


def address_of(ip: int, port: int) -> Address:
    """The inverse of `peer_of`: a dotted quad and a port."""
    return str(ipaddress.IPv4Address(ip)), port


def to_native(frames: Frames, peer: Callable[[Address], tuple[int, int]] = peer_of) -> NativeFrames:
    """The buffers a native core's `receive` takes (every datagram's peer spelled out, as `peer` names it),
    without copying the frames' own arrays when they are contiguous already."""
    named = np.array([peer(address) for address in frames.addresses], dtype=np.int64).reshape(-1, 2)
    peers = named[frames.peer] if len(frames) else np.zeros((0, 2), dtype=np.int64)
    return (
        np.ascontiguousarray(frames.buffer, dtype=np.uint8),
        np.ascontiguousarray(frames.start, dtype=np.int64),
        np.ascontiguousarray(frames.length, dtype=np.int64),
        peers[:, 0].astype(np.uint32),
        peers[:, 1].astype(np.uint16),
    )


def from_native(native: NativeFrames, address: Callable[[int, int], Address] = address_of) -> Frames:
    """`Frames` of what a native core returned, its peers named back by `address(ip, port)`."""
    data, start, length, ip, port = native
    keys = np.frombuffer(ip, dtype=np.uint32).astype(np.int64) << 16 | np.frombuffer(port, dtype=np.uint16)
    unique, peer = np.unique(keys, return_inverse=True)
    addresses = [address(int(key) >> 16, int(key) & 0xFFFF) for key in unique.tolist()]
    return Frames(np.frombuffer(data, dtype=np.uint8), np.frombuffer(start, dtype=np.int64),
                  np.frombuffer(length, dtype=np.int64), peer.astype(np.int64).reshape(-1), addresses)  # fmt: skip


class NativeFrameNode:
    """A native core (the extension object in `_core`) as a `Node` and `FrameNode` for packets: what the
    native PS, switch and sans-IO engine share. Peers cross as `_peer` names them and come back as
    `_address` names them (`peer_of` and `address_of` unless an instance sets its own)."""

    _core: Any
    _peer: Callable[[Address], tuple[int, int]] = staticmethod(peer_of)
    _address: Callable[[int, int], Address] = staticmethod(address_of)

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        return self.receive_frames(Frames.of(datagrams), now).datagrams()

    def receive_frames(self, frames: Frames, now: float) -> Frames:
        return from_native(self._core.receive(*to_native(frames, self._peer), now), self._address)

    def tick(self, now: float) -> list[Datagram]:
        return self.tick_frames(now).datagrams()

    def tick_frames(self, now: float) -> Frames:
        return from_native(self._core.tick(now), self._address)

    def next_deadline(self) -> float | None:
        return self._core.next_deadline()


class NativeNode(NativeFrameNode):
    """A native core as a `Node` and `FrameNode`, and as the `NativeCore` that `NativeRunner` serves:
    what the native PS and switch share."""

    def serve(self, fd: int, group: int = -1) -> None:
        self._core.serve(fd, group)

    def stop(self) -> None:
        self._core.stop()

    def refused(self) -> int:
        return self._core.refused()


class NativeRunner(LoopThread):
    """Serves a native core on a bound UDP socket (which it then owns) until `stop()`, as
    `UdpRunner` serves a Python node, reading a RESULT group's socket `group` (owned too) beside it;
    `error` keeps what stopped a background loop."""

    thread_name = "ina-native-loop"

    def __init__(self, core: NativeCore, sock: socket.socket, group: socket.socket | None = None) -> None:
        self.core = core
        self.sock = sock
        self.group = group

    @classmethod
    def bind(cls, core: NativeCore, address: Address) -> NativeRunner:
        """A runner on a fresh socket bound to `address` (port 0: any free port)."""
        return cls(core, open_socket(address))

    @property
    def address(self) -> Address:
        host, port = self.sock.getsockname()[:2]
        return str(host), int(port)

    @property
    def refused(self) -> int:
        """Datagrams the kernel refused to send (for example, no route)."""
        return self.core.refused()

    def serve_forever(self) -> None:
        """Run the core's packet loop in the calling thread until `stop()` (Ctrl-C handlers still run)."""
        self.core.serve(self.sock.fileno(), -1 if self.group is None else self.group.fileno())

    def stop(self) -> None:
        """Ask the loop to return, now or as soon as it starts (safe from any thread or a signal handler)."""
        self.core.stop()

    def close(self) -> None:
        """Stop, wait for the serving thread, and release the sockets."""
        self.join()
        for sock in filter(None, (self.sock, self.group)):
            sock.close()
