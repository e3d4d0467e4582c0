"""Serve any `Node` on a UDP socket, with batched I/O.

Python's socket API moves one datagram per system call, and on loopback the kernel's
per-datagram cost dominates even that. `BatchSocket` therefore uses, where Linux offers them:

- recvmmsg/sendmmsg (libc, through ctypes, with numpy-built message arrays): one system
  call for many messages;
- UDP GSO on send: consecutive datagrams to one destination, of one size, leave as one
  message with a UDP_SEGMENT control message (the kernel cuts it into datagrams);
- UDP GRO on receive: the kernel hands over runs of datagrams of one flow as one buffer
  plus their size, which `BatchSocket` cuts apart again.

Datagrams stay datagrams on the wire; per-destination order is kept. `recv_frames` and
`send_frames` move them as `Frames` (one buffer, no object per datagram); `recv` and `send`
are the same with `Datagram` lists. Elsewhere, or when asked, it falls back to
recvfrom/sendto with the same interface.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import socket
import sys
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

import numpy as np

from ina.net.frames import FrameNode, Frames, FrameTimers
from ina.net.node import Address, Datagram, Node

MAX_DATAGRAM = 65536  # a receive buffer larger than any UDP payload (or GRO run): nothing is truncated
MAX_PAYLOAD = 65507  # the most one UDP message (a whole GSO run) may carry
MAX_SEGMENTS = 64  # UDP_MAX_SEGMENTS of older kernels
_SOL_UDP, _UDP_SEGMENT, _UDP_GRO = 17, 103, 104
_SO_SNDBUFFORCE, _SO_RCVBUFFORCE = 32, 33  # Linux
_SOCKADDR_IN = 16
_CMSG_SPACE = 24  # room for one cmsghdr (16 bytes) carrying an int
_MSG_DONTWAIT = 0x40

# struct mmsghdr on LP64 Linux: struct msghdr (56 bytes) then unsigned int msg_len, padded to 64.
_MMSGHDR = np.dtype(
    {
        "names": ["name", "namelen", "iov", "iovlen", "control", "controllen", "flags", "len"],
        "formats": ["u8", "u4", "u8", "u8", "u8", "u8", "i4", "u4"],
        "offsets": [0, 8, 16, 24, 32, 40, 48, 56],
        "itemsize": 64,
    }
)
_IOVEC = np.dtype([("base", "u8"), ("len", "u8")])
# struct cmsghdr followed by its data: size_t len, int level, int type, then (here) one int.
_CMSG = np.dtype({"names": ["len", "level", "type", "value"], "formats": ["u8", "i4", "i4", "i4"],
                  "offsets": [0, 8, 12, 16], "itemsize": _CMSG_SPACE})  # fmt: skip


def _load_libc() -> ctypes.CDLL | None:
    """libc with recvmmsg/sendmmsg, or None where the layouts above do not hold."""
    if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) != 8 or sys.byteorder != "little":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
        libc.sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
        libc.recvmmsg.restype = libc.sendmmsg.restype = ctypes.c_int
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_libc()


def parse_address(text: str, what: str = "address") -> Address:
    """'host:port' to a (host, port) tuple, with an error that says what to change."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{what} must look like 127.0.0.1:47100, got {text!r}")
    return host, int(port)


SOCKET_BUFFER_BYTES = 8 << 20
"""The kernel buffers every socket of ours asks for, each way."""


def open_socket(address: Address, buffer_bytes: int = SOCKET_BUFFER_BYTES, shared: bool = False) -> socket.socket:
    """An IPv4 UDP socket bound to `address`, with large kernel buffers (bursts of a batch must fit);
    `shared` lets other sockets bind the same address (a multicast group's workers on one host).

    The kernel caps SO_RCVBUF and SO_SNDBUF at net.core.rmem_max and wmem_max; a process that
    may (root, CAP_NET_ADMIN) gets the full size with the FORCE variants, without changing them.
    Bound to one unicast address, it sends multicast out of that address's interface (a RESULT
    group, docs/protocol.md section 7), loopback included, rather than where the routes say."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for force, option in ((_SO_RCVBUFFORCE, socket.SO_RCVBUF), (_SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, buffer_bytes)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, option, buffer_bytes)
        sock.bind(address)
        host = sock.getsockname()[0]
        if host != "0.0.0.0" and not shared:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(host))
    except OSError:
        sock.close()
        raise
    return sock


@dataclass(frozen=True, slots=True)
class _Plan:
    """Messages for sendmmsg: message i sends datagrams `begin[i]` .. `begin[i] + count[i] - 1` of
    `order` (frames stably sorted by destination) to `addresses[i]`, as one GSO message of
    `segment[i]`-byte datagrams when count > 1."""

    order: np.ndarray
    begin: np.ndarray
    count: np.ndarray
    segment: np.ndarray
    addresses: list[Address]


def _plan(frames: Frames, segments: int) -> _Plan:
    """Consecutive datagrams of one size to one destination, up to `segments` of them within
    MAX_PAYLOAD, share a message (each destination's order kept; an empty datagram goes alone)."""
    order = np.argsort(frames.peer, kind="stable")
    peer, size = frames.peer[order], frames.length[order]
    group = np.empty(size.size, dtype=bool)
    group[0] = True
    group[1:] = (peer[1:] != peer[:-1]) | (size[1:] != size[:-1])
    starts = np.flatnonzero(group)
    position = np.arange(size.size) - np.repeat(starts, np.diff(starts, append=size.size))
    cap = np.maximum(np.minimum(segments, MAX_PAYLOAD // np.maximum(size, 1)), 1)
    begin = np.flatnonzero(group | (position % cap == 0) | (size == 0))
    count = np.diff(begin, append=size.size)
    return _Plan(order, begin, count, np.where(count > 1, size[begin], 0), [frames.addresses[p] for p in peer[begin].tolist()])


class BatchSocket:
    """Batched receive and send of datagrams on one IPv4 UDP socket, which it then owns
    (with GRO on, a plain recvfrom would see merged datagrams). One thread at a time."""

    def __init__(self, sock: socket.socket, messages: int = 64, mmsg: bool | None = None, gso: bool | None = None) -> None:
        if sock.family != socket.AF_INET or sock.type != socket.SOCK_DGRAM:
            raise ValueError("BatchSocket needs an IPv4 UDP socket")
        self.sock = sock
        self.messages = messages
        self.mmsg = _LIBC is not None and mmsg is not False
        if gso is None and os.environ.get("INA_UDP_GSO") == "0":
            gso = False  # one datagram per message: what the Mininet testbed's per-packet loss needs
        self.gso = self.mmsg and gso is not False and _enable_gro(sock)
        self._sockaddrs: dict[Address, bytes] = {}
        self._sources: dict[int, Address] = {}
        if self.mmsg:
            self._buffers = np.zeros((messages, MAX_DATAGRAM), dtype=np.uint8)
            self._names = np.zeros((messages, _SOCKADDR_IN), dtype=np.uint8)
            self._controls = np.zeros(messages, dtype=_CMSG)
            self._iov = np.zeros(messages, dtype=_IOVEC)
            self._iov["base"] = self._buffers.ctypes.data + MAX_DATAGRAM * np.arange(messages, dtype=np.uint64)
            self._iov["len"] = MAX_DATAGRAM
            self._headers = _message_array(self._names.ctypes.data, self._iov.ctypes.data, np.arange(messages),
                                           np.ones(messages, dtype=np.int64), self._controls.ctypes.data,
                                           np.full(messages, _CMSG_SPACE if self.gso else 0))  # fmt: skip

    def fileno(self) -> int:
        return self.sock.fileno()

    # -- receive -----------------------------------------------------------------------------

    def recv(self) -> list[Datagram]:
        """Datagrams already waiting (never blocks); [] when none."""
        return self.recv_frames().datagrams()

    def recv_frames(self) -> Frames:
        """Datagrams already waiting, up to `messages` messages' worth (a GRO message holds up to
        64 datagrams; never blocks). They point into the receive buffer: use them before the next call."""
        if not self.mmsg:
            return Frames.of(self._recv_plain())
        headers = self._headers
        headers["namelen"] = _SOCKADDR_IN
        if self.gso:
            headers["controllen"] = _CMSG_SPACE
        count = _LIBC.recvmmsg(self.sock.fileno(), headers.ctypes.data, self.messages, _MSG_DONTWAIT, None)
        if count <= 0:
            error = ctypes.get_errno()
            if count < 0 and error not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                raise OSError(error, os.strerror(error))
            return Frames.empty()
        lengths = headers["len"][:count].astype(np.int64)
        sizes = lengths
        if self.gso:
            control = self._controls[:count]
            merged = (headers["controllen"][:count] >= 20) & (control["level"] == _SOL_UDP) & (control["type"] == _UDP_GRO)
            sizes = np.where(merged & (control["value"] > 0), control["value"], lengths)
        pieces = np.maximum(-(-lengths // np.maximum(sizes, 1)), 1)  # a 0-byte datagram is one too
        message = np.repeat(np.arange(count), pieces)
        within = np.arange(message.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        offset = within * sizes[message]
        start = message * MAX_DATAGRAM + offset
        length = np.minimum(sizes[message], lengths[message] - offset)
        names = self._names[:count]
        keys = ((names[:, 4:8].view(">u4").ravel().astype(np.int64) << 16) | names[:, 2:4].view(">u2").ravel()).tolist()
        return Frames(self._buffers.reshape(-1), start, length, message, [self._source(key) for key in keys])

    def _source(self, key: int) -> Address:
        address = self._sources.get(key)
        if address is None:
            address = self._sources[key] = (socket.inet_ntoa((key >> 16).to_bytes(4, "big")), key & 0xFFFF)
        return address

    def _recv_plain(self) -> list[Datagram]:
        received = []
        while len(received) < self.messages:
            try:
                data, address = self.sock.recvfrom(MAX_DATAGRAM, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            received.append(Datagram(data, address))
        return received

    # -- send --------------------------------------------------------------------------------

    def send(self, datagrams: Sequence[Datagram]) -> int:
        """Send every datagram (blocking while the socket buffer is full); returns how many the kernel refused."""
        if not self.mmsg:
            return self._send_plain(datagrams)
        return self.send_frames(Frames.of(datagrams))

    def send_frames(self, frames: Frames) -> int:
        """Send every frame to its peer; returns how many the kernel refused."""
        if not len(frames):
            return 0
        if not self.mmsg:
            return self._send_plain(frames.datagrams())
        plan = _plan(frames, MAX_SEGMENTS if self.gso else 1)
        count = plan.begin.size
        names = b"".join([self._sockaddr(address) for address in plan.addresses])
        iov = np.empty(len(frames), dtype=_IOVEC)
        iov["base"] = frames.buffer.ctypes.data + frames.start[plan.order]
        iov["len"] = frames.length[plan.order]
        controls = np.zeros(count, dtype=_CMSG)
        controls["len"], controls["level"], controls["type"], controls["value"] = 18, _SOL_UDP, _UDP_SEGMENT, plan.segment
        headers = _message_array(_address_of(names), iov.ctypes.data, plan.begin, plan.count, controls.ctypes.data,
                                 np.where(plan.segment > 0, _CMSG_SPACE, 0))  # fmt: skip
        sent, refused = 0, 0
        while sent < count:
            done = _LIBC.sendmmsg(self.sock.fileno(), headers.ctypes.data + sent * _MMSGHDR.itemsize, count - sent, 0)
            if done < 0:
                error = ctypes.get_errno()
                if error == errno.EINTR:
                    continue
                if plan.segment[sent] > 0 and error in (errno.EINVAL, errno.EIO, errno.ENOPROTOOPT, errno.EMSGSIZE):
                    self.gso = False  # this path cannot segment: send the rest one datagram at a time
                    rest = plan.order[plan.begin[sent] :]
                    return refused + self._send_plain(Frames(frames.buffer, frames.start[rest], frames.length[rest],
                                                                frames.peer[rest], frames.addresses).datagrams())  # fmt: skip
                refused, done = refused + int(plan.count[sent]), 1  # this message cannot go (e.g. no route): skip it
            sent += done
        del names, iov, controls  # alive until here: the kernel read through their addresses
        return refused

    def _send_plain(self, datagrams: Sequence[Datagram]) -> int:
        refused = 0
        for d in datagrams:
            try:
                self.sock.sendto(d.data, d.addr)
            except OSError:
                refused += 1
        return refused

    def _sockaddr(self, address: Address) -> bytes:
        packed = self._sockaddrs.get(address)
        if packed is None:
            host, port = address
            ip = socket.inet_aton(socket.gethostbyname(host))
            packed = self._sockaddrs[address] = socket.AF_INET.to_bytes(2, sys.byteorder) + port.to_bytes(2, "big") + ip + bytes(8)
        return packed


def _address_of(data: bytes) -> int:
    return np.frombuffer(data, dtype=np.uint8).ctypes.data if data else 0


def _message_array(names: int, iov: int, begin: np.ndarray, count: np.ndarray, controls: int,
                   control_size: np.ndarray) -> np.ndarray:  # fmt: skip
    """An mmsghdr array: message i has sockaddr `names + 16i`, iovecs `begin[i]` .. `begin[i] + count[i] - 1`
    of the array at `iov`, and (where `control_size[i]` > 0) the control buffer `controls + 24i`."""
    messages = begin.size
    index = np.arange(messages, dtype=np.uint64)
    headers = np.zeros(messages, dtype=_MMSGHDR)
    headers["name"] = names + _SOCKADDR_IN * index
    headers["namelen"] = _SOCKADDR_IN
    headers["iov"] = iov + _IOVEC.itemsize * begin.astype(np.uint64)
    headers["iovlen"] = count
    headers["control"] = np.where(control_size > 0, controls + _CMSG_SPACE * index, 0)
    headers["controllen"] = control_size
    return headers


def _enable_gro(sock: socket.socket) -> bool:
    try:
        sock.setsockopt(_SOL_UDP, _UDP_GRO, 1)
        return True
    except OSError:
        return False


T = TypeVar("T", bound="LoopThread")


class LoopThread(ABC):
    """A packet loop (`serve_forever` until `stop`) that can also run on a daemon thread of its own: what
    the Python and the native runners share. An exception there is kept in `error`."""

    thread_name = "udp-runner"
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    @abstractmethod
    def serve_forever(self) -> None:
        """Serve in the calling thread until `stop()`."""

    @abstractmethod
    def stop(self) -> None:
        """Ask the loop to return (safe from any thread)."""

    def start(self: T) -> T:
        """Serve on a daemon thread."""

        def run() -> None:
            try:
                self.serve_forever()
            except BaseException as error:  # noqa: BLE001 - reported through `error`
                self.error = error

        self._thread = threading.Thread(target=run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    @property
    def native_id(self) -> int | None:
        """The serving thread's kernel id (None before `start`): /proc/<pid>/task/<id> says what serving costs."""
        return None if self._thread is None else self._thread.native_id

    def join(self) -> None:
        """Stop, and wait for the serving thread if there is one."""
        self.stop()
        if self._thread is not None:
            self._thread.join()


class UdpRunner(LoopThread):
    """Serves a `Node` on a bound UDP socket until `stop()`: receive in batches, send the
    outputs, and call `tick` whenever the node's next deadline passes.

    The node gets at most `batch` datagrams per call and each call's output leaves at once,
    so replies flow while the rest of a large backlog is processed (peers keep working).
    A `FrameNode` gets them as `Frames` (no Python object per datagram), and a `FrameTimers`
    node's timers answer `Frames` too (`tick_frames`). Other threads reach
    the node through `call_soon`, so a node need not be thread-safe. A worker's RESULT group socket
    `group` (owned too) is read beside `sock`; everything leaves through `sock`.
    """

    def __init__(self, node: Node, sock: socket.socket, batch: int = 256, mmsg: bool | None = None, gso: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, group: socket.socket | None = None) -> None:  # fmt: skip
        if batch < 1:
            raise ValueError(f"batch must be at least 1 datagram, got {batch}")
        self.node = node
        self.batch = batch
        self.io = BatchSocket(sock, mmsg=mmsg, gso=gso)
        self.inputs = [self.io] if group is None else [self.io, BatchSocket(group, mmsg=mmsg, gso=gso)]
        self.clock = clock
        self.refused = 0
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._calls: list[Callable[[], None]] = []
        self._calls_lock = threading.Lock()

    @classmethod
    def bind(cls, node: Node, address: Address, **options: object) -> UdpRunner:
        """A runner on a fresh socket bound to `address` (port 0: any free port)."""
        return cls(node, open_socket(address), **options)  # type: ignore[arg-type]

    @property
    def address(self) -> Address:
        host, port = self.io.sock.getsockname()[:2]
        return str(host), int(port)

    def serve_forever(self) -> None:
        """Run in the calling thread until `stop()`."""
        node, io = self.node, self.io
        frames_in_frames_out = isinstance(node, FrameNode)
        ticks_frames = isinstance(node, FrameTimers)
        while not self._stopping.is_set():
            if self._calls:
                self._run_calls()
            got = 0
            for source in self.inputs:
                frames = source.recv_frames()
                got += len(frames)
                for start in range(0, len(frames), self.batch):
                    part = frames.slice(start, start + self.batch)
                    if frames_in_frames_out:
                        self.refused += io.send_frames(node.receive_frames(part, self.clock()))
                    else:
                        self._send(node.receive(part.datagrams(), self.clock()))
            deadline = node.next_deadline()
            if deadline is not None and self.clock() >= deadline:
                if ticks_frames:
                    self.refused += io.send_frames(node.tick_frames(self.clock()))
                else:
                    self._send(node.tick(self.clock()))
                continue
            if not got and not self._calls:
                timeout = None if deadline is None else max(0.0, deadline - self.clock())
                if self._wake_r in select.select([*self.inputs, self._wake_r], [], [], timeout)[0]:
                    self._drain_wakes()

    def call_soon(self, function: Callable[[], None]) -> None:
        """Run `function` on the serving thread before its next receive (safe from any thread).

        How another thread changes a node that is not thread-safe, for example submits work to
        it: the call runs between the node's other calls, and the node's deadline is read after
        it. An exception from `function` stops the loop, as one from the node does.
        """
        with self._calls_lock:
            self._calls.append(function)
        self._wake()

    def _run_calls(self) -> None:
        with self._calls_lock:
            calls, self._calls = self._calls, []
        for call in calls:
            call()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:  # closed, or the buffer is full of wake-ups already
            pass

    def _drain_wakes(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:  # nothing left (BlockingIOError) or closed
            pass

    def _send(self, datagrams: Sequence[Datagram]) -> None:
        if datagrams:
            self.refused += self.io.send(datagrams)


    def stop(self) -> None:
        """Ask the loop to return (safe from any thread or a signal handler)."""
        self._stopping.set()
        self._wake()

    def close(self) -> None:
        """Stop, wait for the serving thread, and release the sockets."""
        self.join()
        for sock in (*(source.sock for source in self.inputs), self._wake_r, self._wake_w):
            sock.close()
