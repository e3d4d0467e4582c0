"""Run a function in N local worker processes joined by a process group (gloo by default), and
a software switch and PS for them to aggregate through.

``ina demo`` and the tests use it: no root, no hardware, no fixed port. The parent hosts the
rendezvous store on a port the OS picks, so concurrent runs never collide. Any failure in a
worker (an exception, a crash, a timeout) stops all of them and surfaces as :class:`WorkerError`
with the worker's traceback, never as a hang.
"""
from __future__ import annotations

import functools
import multiprocessing
import pickle
import time
import traceback
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

if TYPE_CHECKING:
    from ina.ps.server import PSServer
    from ina.switch.server import SwitchServer

T = TypeVar("T")

_HOST = "127.0.0.1"


class WorkerError(RuntimeError):
    """A local worker failed (`failed_at`, its clock's time), died, or overran its time."""

    def __init__(self, message: str, rank: int = -1, died: bool = False, failed_at: float = 0.0) -> None:
        super().__init__(message)
        self.rank, self.died, self.failed_at = rank, died, failed_at


def run_workers(
    fn: Callable[..., T],
    workers: int,
    *args: Any,
    timeout: float = 120.0,
    backend: str = "gloo",
    host: str = _HOST,
    setup: Optional[Callable[[int], None]] = None,
) -> list[T]:
    """Return ``[fn(rank, workers, *args) for each rank]``, each run in its own process.

    ``fn`` runs after ``init_process_group(backend)`` with one intra-op thread (the workers
    share the machine's cores); it and its arguments and result must pickle. ``timeout`` bounds
    the whole run and each collective. ``host`` is the address the rendezvous store listens on
    and the workers reach it at; ``setup(rank)``, when given (it must pickle too), runs in each
    worker before it joins the process group: to enter an emulated node's network namespace, say.
    """
    import torch.distributed as dist

    limit = timedelta(seconds=timeout)
    store = dist.TCPStore(host, 0, None, True, timeout=limit, wait_for_workers=False)
    # forkserver: children start from a clean, torch-preloaded process, which is fast and,
    # unlike fork, safe when the parent has already started threads. DDP's constructor imports
    # torch._dynamo (seconds per process); preloading it pays that once.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch.distributed", "torch._dynamo"])
    processes, pipes = [], {}
    try:
        for rank in range(workers):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(
                target=_worker_main,
                args=(fn, rank, workers, (host, store.port), timeout, backend, setup, sender, args),
                name=f"ina-worker-{rank}",
                daemon=True,
            )
            process.start()
            sender.close()
            processes.append(process)
            pipes[receiver] = rank
        return _collect(processes, pipes, time.monotonic() + timeout)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(5)
            if process.is_alive():
                process.kill()


_GRACE = 1.0
"""Seconds the launcher waits after a worker's failure for the others' before it says which caused them."""


def _collect(processes: list, pipes: dict[Connection, int], deadline: float) -> list:
    """Gather one report per worker; after a failure, the others' for `_GRACE` seconds more, then raise
    the one that caused them (`_first`)."""
    results: dict[int, Any] = {}
    failures: dict[int, WorkerError] = {}
    until = deadline
    while pipes:
        remaining = until - time.monotonic()
        if remaining <= 0:
            if failures:
                break
            raise WorkerError(f"workers {sorted(pipes.values())} did not finish in time")
        # A worker that exits closes its pipe; its sentinel also catches a pipe held open elsewhere.
        ready = set(wait([*pipes, *(processes[rank].sentinel for rank in pipes.values())], timeout=remaining))
        for pipe, rank in list(pipes.items()):
            if pipe in ready or processes[rank].sentinel in ready:
                del pipes[pipe]
                try:
                    results[rank] = _result(rank, processes, pipe)
                except WorkerError as failure:
                    until = min(deadline, time.monotonic() + _GRACE) if not failures else until
                    failures[rank] = failure
    if failures:
        raise _first(failures)
    return [results[rank] for rank in range(len(processes))]


def _first(failures: dict[int, WorkerError]) -> WorkerError:
    """The failure that caused the others: a worker that died (its peers' collectives then fail),
    else the one that failed earliest, else the lowest rank."""
    return min(failures.values(), key=lambda f: (not f.died, f.failed_at, f.rank))


def _result(rank: int, processes: list, pipe: Connection) -> Any:
    """The worker's result, or WorkerError with its traceback or its exit code."""
    try:
        status, payload, *when = pickle.loads(pipe.recv_bytes()) if pipe.poll() else ("died", None)
    except EOFError:
        status, payload, when = "died", None, []
    if status == "ok":
        return payload
    if status == "error":
        raise WorkerError(f"worker {rank} of {len(processes)} failed:\n{payload}", rank=rank, failed_at=when[0])
    processes[rank].join(1)
    raise WorkerError(f"worker {rank} of {len(processes)} died with exit code {processes[rank].exitcode}", rank=rank, died=True)


def _worker_main(
    fn: Callable[..., Any],
    rank: int,
    workers: int,
    store_address: tuple[str, int],
    timeout: float,
    backend: str,
    setup: Optional[Callable[[int], None]],
    pipe: Connection,
    args: tuple,
) -> None:
    import torch
    import torch.distributed as dist

    try:
        torch.set_num_threads(1)
        if setup is not None:
            setup(rank)
        limit = timedelta(seconds=timeout)
        store = dist.TCPStore(*store_address, workers, False, timeout=limit)
        dist.init_process_group(backend, store=store, rank=rank, world_size=workers, timeout=limit)
        result = fn(rank, workers, *args)
        dist.barrier()
    except BaseException:
        _report(pipe, "error", traceback.format_exc(), time.time())
        return
    _report(pipe, "ok", result)
    dist.destroy_process_group()


def _report(pipe: Connection, status: str, payload: Any, *when: float) -> None:
    # Plain pickle copies tensors; multiprocessing's own would pass shared-memory handles
    # that die with this process before the parent opens them.
    pipe.send_bytes(pickle.dumps((status, payload, *when)))


class LocalAggregators:
    """A software switch and a PS on loopback (or ``host``), on ports the OS picks, served by threads of this
    process until :meth:`close`: what the ``switch`` and ``ps`` transports of local workers use.

    ``options(name)`` are the transport's address options (``SwitchTransport(**options)``), and
    ``environment(name)`` the same as the INA_* variables a torchrun worker reads. ``access``
    (an ``ina.control.auth.Access``) guards both control APIs; the default reads INA_TOKEN_FILE,
    INA_TOKEN and INA_TENANTS, as ``ina switch`` and ``ina ps`` do. ``host`` is the numeric address
    both listen on (loopback by default); ``lease`` the seconds their registrations live unrenewed
    (default: the services' default); ``faults`` (an ``ina.switch.server.Faults``) the loss,
    duplication and reordering the switch applies to what it receives and sends.
    """

    def __init__(self, words: int = 64, pool: int = 64, access: Any = None, policy: str = "esa", host: str = _HOST,
                 lease: float | None = None, faults: Any = None) -> None:  # fmt: skip
        from ina.control.registry import DEFAULT_LEASE, Registry
        from ina.ps.native import ps_core
        from ina.ps.server import PSServer
        from ina.switch import SwitchConfig
        from ina.switch.server import Faults, SwitchServer

        local = (host, 0)
        registry = Registry(DEFAULT_LEASE if lease is None else lease)
        self.ps: PSServer = PSServer(ps_core(words), local, local, access=access, registry=registry).start()
        try:
            self.switch: SwitchServer = SwitchServer(SwitchConfig(pool=pool, words=words, policy=policy), local, local,
                                                     faults=faults or Faults(), access=access, registry=registry).start()  # fmt: skip
        except BaseException:
            self.ps.close()
            raise

    def options(self, transport: str) -> dict[str, str]:
        """Keyword options of the ``transport`` (``"switch"`` or ``"ps"``) that point it here."""
        ps = {"ps": "%s:%d" % self.ps.address, "ps_control": "%s:%d" % self.ps.control_address}
        if transport == "ps":
            return ps
        if transport == "switch":
            return {"switch": "%s:%d" % self.switch.address, "switch_control": "%s:%d" % self.switch.control_address, **ps}
        raise ValueError(f"only the 'switch' and 'ps' transports use aggregators, not {transport!r}")

    def environment(self, transport: str) -> dict[str, str]:
        """The same as environment variables (INA_SWITCH, INA_SWITCH_CONTROL, INA_PS, INA_PS_CONTROL)."""
        return {f"INA_{name.upper()}": value for name, value in self.options(transport).items()}

    def close(self) -> None:
        """Stop both servers; calling it twice is harmless."""
        for server in (self.switch, self.ps):
            server.close()

    def __enter__(self) -> LocalAggregators:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalRacks:
    """Racks on loopback (docs/protocol.md, section 10): a PS, a spine and one leaf a rack, each a service of this
    process on ports the OS picks, until :meth:`close`. ``racks`` lists the ranks under each leaf;
    ``options(rank)`` are that worker's ``SwitchTransport`` options (its leaf, the spine, the PS). ``faults``
    (an ``ina.switch.server.Faults``) applies at every switch; ``path`` picks the switches' core ("python",
    "native", None: native where it built)."""

    def __init__(self, racks: list[list[int]], words: int = 64, pool: int = 64, policy: str = "esa", faults: Any = None,
                 path: str | None = None, spine_state: str | None = None) -> None:  # fmt: skip
        from ina.control.registry import JobStore, Registry
        from ina.ps.native import ps_core
        from ina.ps.server import PSServer
        from ina.switch import SwitchConfig
        from ina.switch.server import Faults, SwitchServer

        local = (_HOST, 0)
        self.rack_of = {rank: r for r, ranks in enumerate(racks) for rank in ranks}
        self._switch = functools.partial(SwitchServer, SwitchConfig(pool=pool, words=words, policy=policy), faults=faults or Faults(),
                                         path=path)  # fmt: skip
        """Every switch's recipe: a server given its addresses and registry."""
        self._spine_registry = Registry(store=JobStore(spine_state)) if spine_state else Registry()
        self.services: list[Any] = [PSServer(ps_core(words), local, local).start()]
        try:
            self.services.append(self._switch(local, local, registry=self._spine_registry).start())
            self.services += [self._switch(local, local).start() for _ in racks]
        except BaseException:
            self.close()
            raise
        self.ps, self.spine, *self.leaves = self.services
        self._spine_addresses = (self.spine.address, self.spine.control_address)

    def stop_spine(self) -> None:
        """The spine dies: its process, slots and (without `spine_state`) its job table are gone."""
        self.spine.close()

    def start_spine(self) -> None:
        """The spine again, on its ports, with the jobs of its state file (`spine_state`)."""
        self.spine = self.services[1] = self._switch(*self._spine_addresses, registry=self._spine_registry).start()

    def options(self, rank: int) -> dict[str, str]:
        """Rank `rank`'s transport options: its rack's leaf as its switch, the spine and the PS."""
        leaf = self.leaves[self.rack_of[rank]]
        return {"switch": "%s:%d" % leaf.address, "switch_control": "%s:%d" % leaf.control_address,
                "spine": "%s:%d" % self.spine.address, "spine_control": "%s:%d" % self.spine.control_address,
                "ps": "%s:%d" % self.ps.address, "ps_control": "%s:%d" % self.ps.control_address}  # fmt: skip

    def close(self) -> None:
        for service in self.services:
            service.close()

    def __enter__(self) -> LocalRacks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
