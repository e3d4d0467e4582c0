"""The run file: a topology, link parameters, the switch, and one or more jobs.

A run file is YAML (or JSON, which YAML reads too). Every field has a default except ``jobs``;
an unknown field, a wrong type or a value out of range is a :class:`SpecError` that names the
field (``jobs[1].transport``) and says what is allowed. testbed/README.md documents the fields;
``testbed/*.yaml`` are examples.

The types here are plain frozen dataclasses (no torch, no Mininet): the CLI validates a run file
before it touches the network, and the workers get their job as JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

from ina.switch.config import POLICIES, QUEUES
from ina.transport.priority import POLICIES as PRIORITY_POLICIES

HOOKS = ("fp32", "fp16", "powersgd", "topk", "thc")
"""fp32: DDP's own allreduce; fp16, powersgd: torch's comm hooks; topk: ina.topk's baseline; thc: ina's hook."""
TRANSPORTS = ("collective", "switch", "ps")
TARGETS = ("software", "bmv2")
MODELS = {"mlp": ("digits", 0.05), "convnet": ("digits", 0.1), "transformer": ("pydoc", 0.003)}
"""Each model kind of ina.workloads: its data set and its default learning rate."""
MAX_HOSTS = 200
MAX_RACKS = MAX_RACK_HOSTS = 32
"""docs/protocol.md, section 10: a racked job spans 2..32 racks of 1..32 workers each."""
LEVELS = (1, 2)
"""How a racked run's switch job aggregates: 2 at its racks' leaves, then the spine; 1 at the spine alone."""


class SpecError(ValueError):
    """A run file that cannot run; the message names the field and what it may be."""


@dataclass(frozen=True)
class Link:
    """Every worker and PS host reaches the switch node over one link of this shape (each direction)."""

    bw: float = 100.0  # Mbit/s; 0: unshaped
    delay: float = 0.0  # ms, one way (needs the kernel's sch_netem)
    loss: float = 0.0  # percent of packets dropped, each direction
    duplicate: float = 0.0  # percent of packets sent twice, each direction
    reorder: float = 0.0  # percent of packets held back in a slow queue until the link's later packets have left, each direction

    @property
    def impaired(self) -> bool:
        """Whether nftables rules drop, duplicate or mark for the slow queue its packets (they need every packet a wire
        packet: no UDP GSO)."""
        return self.loss > 0 or self.duplicate > 0 or self.reorder > 0


@dataclass(frozen=True)
class Switch:
    target: str = "software"
    pool: int = 64
    words: int = 64
    policies: tuple[str, ...] = ("esa",)  # the jobs run once per policy, the switch and PS restarted
    slot_timeout: float = 1.0
    queues: str = "priority"  # every round's egress queues: "priority" or "fifo" (docs/protocol.md, "Egress queues")
    max_pps: float = 0.0  # the software switch serves at most this many packets a second (0: no cap): a switch as slow as BMv2
    latency: float = 0.0  # ms the software switch holds every packet it sends: a longer path, where the kernel cannot delay links
    result_copies: bool = True  # the switch copies every RESULT to the PS (docs/protocol.md, section 5, "Complete")


@dataclass(frozen=True)
class Job:
    name: str
    workers: int = 4
    hosts: tuple[int, ...] = ()  # worker host of each rank (a host of several ranks: a multi-GPU node); default 0..workers-1
    hierarchy: str = "auto"  # thc: "node" sums a host's ranks first (docs/transport.md, "Two levels"), "flat" never, "auto" when a host has several
    hidden: tuple[int, ...] = (256,)  # the MLP's hidden layer widths
    kind: str = "mlp"  # the model (ina.workloads): mlp, convnet or transformer
    width: int = 0  # convnet: the first stage's channels; transformer: the model dimension; 0: the kind's default
    target: Optional[float] = None  # the test accuracy (a language model: the test loss) whose first wall time is time_to_target
    ratio: float = 0.01  # topk: the fraction of each bucket's coordinates sent
    data: str = "digits"
    steps: int = 60
    batch: int = 64  # global batch, split evenly over the workers
    lr: float = 0.05
    hook: str = "thc"
    transport: str = "collective"  # thc only
    bits: int = 4
    granularity: int = 0  # 0: THC's default for the bits
    warm_up: int = 5  # steps of plain allreduce before compression (thc's start_iter, powersgd's start iteration)
    rank: int = 1  # powersgd's matrix approximation rank
    priority: Optional[int] = None  # switch transport: a fixed priority; None: the end-host policy `priority_policy`
    priority_policy: str = "intensity"  # intensity (ESA's: recent bytes a second), las (least attained service) or remaining (least work left)
    priority_cap: int = 255
    window: Optional[int] = None  # switch/ps transport: chunks in flight per worker
    min_rto: float = 0.02  # switch/ps transport: the least resend timeout (s); above the queueing a window causes
    failover: Optional[float] = None  # switch/ps transport: seconds without a result before DATA goes to the PS, or (the PS
    # silent too) the job to the collective; None: the default
    failback: float = 30.0  # switch/ps transport: seconds after a failover or fallback before trying the aggregators again
    phase: int = 0  # jobs of one phase run at once; phases run in increasing order
    start: float = 0.0  # seconds after its phase begins (every job of the phase set up) that the job begins training
    compute: float = 0.0  # seconds of emulated accelerator compute per step (a sleep: it takes no CPU)
    jitter: float = 0.0  # each worker's compute varies uniformly by +-jitter of it per step (stragglers), seeded by seed
    eval_every: int = 10  # steps between test-accuracy evaluations (and at the end)
    seed: int = 0
    levels: int = 2  # a racked run's switch job: 2 sums at its racks' leaves, then the spine; 1 sends every worker to the spine

    @property
    def method(self) -> str:
        """A short label: 'fp32', 'fp16', 'powersgd', or 'thc4-switch'."""
        return f"thc{self.bits}-{self.transport}" if self.hook == "thc" else self.hook

    @property
    def metric(self) -> str:
        """What the evaluation reports: a classifier's test accuracy (higher is better), a language model's test loss."""
        return "test_loss" if self.kind == "transformer" else "accuracy"

    def reached(self, value: float) -> bool:
        """Whether an evaluation's `value` meets the target."""
        return self.target is not None and (value <= self.target if self.metric == "test_loss" else value >= self.target)

    @property
    def thc_granularity(self) -> int:
        """THC's granularity: the run file's, else THC's default for its bits, 2 * (2**bits - 1), at most 255."""
        return self.granularity or min(2 * (2**self.bits - 1), 255)

    @property
    def uses_aggregators(self) -> bool:
        return self.hook == "thc" and self.transport != "collective"

    @property
    def uses_switch(self) -> bool:
        return self.hook == "thc" and self.transport == "switch"


@dataclass(frozen=True)
class Fault:
    """At `at` seconds after a round's first jobs begin training, stop or start a switch or the PS (it keeps its jobs on disk)."""

    at: float
    action: str  # "stop" or "start"
    service: str  # "ps", or a switch of `Run.switch_names`: "switch", or a racked run's "spine" and "leaf0", "leaf1", ...


@dataclass(frozen=True)
class Run:
    name: str
    jobs: tuple[Job, ...]
    worker_hosts: int = 4
    link: Link = field(default_factory=Link)
    ps_link: Optional[Link] = None  # the PS host's link (one server NIC that every job's PS traffic shares); None: `link`
    switch: Switch = field(default_factory=Switch)
    timeout: float = 900.0  # seconds for the whole run; then everything is stopped
    faults: tuple[Fault, ...] = ()
    racks: tuple[tuple[int, ...], ...] = ()  # the worker hosts under each rack's leaf; (): one switch node for every host
    uplink: Optional[Link] = None  # each leaf's link to the spine; None: `link`

    @property
    def ps_host_link(self) -> Link:
        return self.ps_link or self.link

    @property
    def uplink_link(self) -> Link:
        return self.uplink or self.link

    @property
    def links(self) -> tuple[Link, ...]:
        """Every shape of link the network has."""
        return (self.link, self.ps_host_link, *((self.uplink_link,) if self.racks else ()))

    @property
    def impaired(self) -> bool:
        return any(link.impaired for link in self.links)

    @property
    def switch_names(self) -> tuple[str, ...]:
        return switch_names(len(self.racks))

    def rack_of(self, host: int) -> int:
        """The rack whose leaf worker host `host` sits under (a racked run's)."""
        return next(r for r, hosts in enumerate(self.racks) if host in hosts)

    @property
    def phases(self) -> list[list[Job]]:
        return [[j for j in self.jobs if j.phase == p] for p in sorted({j.phase for j in self.jobs})]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def switch_names(racks: int) -> tuple[str, ...]:
    """A run's `ina switch` instances, by the names of their logs, counters and faults: one "switch", or each
    rack's leaf ("leaf0", "leaf1", ...) and the "spine"."""
    return (*(f"leaf{r}" for r in range(racks)), "spine") if racks else ("switch",)


def job_from_json(text: str) -> Job:
    """The inverse of ``json.dumps(asdict(job))``: how a worker gets its job."""
    values = json.loads(text)
    return Job(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def load(path: str | Path) -> Run:
    """Read and validate a run file; SpecError says what is wrong and where."""
    try:
        import yaml  # PyYAML: the 'testbed' extra
    except ImportError:
        raise SpecError("reading run files needs PyYAML: pip install -e '.[testbed]' (or pip install pyyaml)") from None

    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise SpecError(f"{path}: cannot read ({error.strerror or error})") from None
    except yaml.YAMLError as error:
        raise SpecError(f"{path}: not valid YAML: {error}") from None
    return parse(document, default_name=path.stem)


def parse(document: Any, default_name: str = "run") -> Run:
    """A Run from the run file's parsed document (dicts, lists, scalars)."""
    top = _Fields(document, "the run file")
    name = top.take("name", str, default_name, check=_identifier)
    topology = _Fields(top.take("topology", dict, {}), "topology")
    worker_hosts = topology.take("workers", int, 0, check=_between(0, MAX_HOSTS))
    link = _link(_Fields(topology.take("link", dict, {}), "topology.link"), Link())
    given_ps_link = topology.take("ps_link", dict, None)
    ps_link = _link(_Fields(given_ps_link, "topology.ps_link"), link) if given_ps_link is not None else None
    racks = _racks(topology.take("racks", list, []))
    given_uplink = topology.take("uplink", dict, None)
    if given_uplink is not None and not racks:
        raise SpecError("topology.uplink: only a racked topology has uplinks; give topology.racks (the worker hosts under each leaf)")
    uplink = _link(_Fields(given_uplink, "topology.uplink"), link) if given_uplink is not None else None
    topology.done()
    switch = _switch(_Fields(top.take("switch", dict, {}), "switch"))
    timeout = top.take("timeout", float, Run.timeout, check=_between(1, 86_400))
    faults = _faults(top.take("faults", list, []), switch_names(len(racks)))
    raw_jobs = top.take("jobs", list, None)
    top.done()
    if not raw_jobs:
        raise SpecError("the run file: 'jobs' must list at least one job")
    jobs = tuple(_job(_Fields(raw, f"jobs[{i}]"), i, bool(racks)) for i, raw in enumerate(raw_jobs))
    names = [j.name for j in jobs]
    for n in names:
        if names.count(n) > 1:
            raise SpecError(f"jobs: the name {n!r} is used twice; job names must differ")
    needed = max(max(j.hosts) + 1 for j in jobs)
    if worker_hosts == 0:
        worker_hosts = max(needed, *(max(hosts) + 1 for hosts in racks)) if racks else needed
    elif worker_hosts < needed:
        raise SpecError(f"topology.workers: {worker_hosts} worker hosts, but a job places a rank on host {needed - 1}; "
                        f"set topology.workers to at least {needed}")  # fmt: skip
    if racks:
        _every_host_in_a_rack(racks, worker_hosts)
    for job in jobs:
        if job.window is not None and job.transport == "switch" and job.window > switch.pool:
            raise SpecError(f"job {job.name!r}: window {job.window} exceeds the switch's pool of {switch.pool} slots")
    if faults and not any(j.uses_aggregators for j in jobs):
        raise SpecError("faults: stop and start the switch or the PS, which only jobs with the switch or ps transport use")
    return Run(name=name, jobs=jobs, worker_hosts=worker_hosts, link=link, ps_link=ps_link, switch=switch, timeout=timeout,
               faults=faults, racks=racks, uplink=uplink)  # fmt: skip


def _racks(given: list[Any]) -> tuple[tuple[int, ...], ...]:
    """`[[0, 1], [2, 3, 4]]`: the worker hosts under each rack's leaf, each host under one."""
    if not given:
        return ()
    fits = 2 <= len(given) <= MAX_RACKS and all(
        isinstance(hosts, list) and 1 <= len(hosts) <= MAX_RACK_HOSTS and all(type(h) is int and h >= 0 for h in hosts) for hosts in given
    )
    if not fits:
        raise SpecError(f"topology.racks: {given!r}: give 2..{MAX_RACKS} racks, each a list of 1..{MAX_RACK_HOSTS} worker host "
                        f"numbers (the hosts under its leaf), e.g. [[0, 1], [2, 3]]")  # fmt: skip
    seen: dict[int, int] = {}
    for rack, hosts in enumerate(given):
        for host in hosts:
            if host in seen:
                raise SpecError(f"topology.racks: worker host {host} is in rack {seen[host]} and rack {rack}; a host sits under one leaf")
            seen[host] = rack
    return tuple(tuple(hosts) for hosts in given)


def _every_host_in_a_rack(racks: tuple[tuple[int, ...], ...], worker_hosts: int) -> None:
    placed = {host for hosts in racks for host in hosts}
    beyond = sorted(placed - set(range(worker_hosts)))
    if beyond:
        raise SpecError(f"topology.racks: worker host(s) {beyond}, but topology.workers is {worker_hosts} (hosts 0..{worker_hosts - 1})")
    missing = sorted(set(range(worker_hosts)) - placed)
    if missing:
        raise SpecError(f"topology.racks: worker host(s) {missing} are in no rack; every worker host sits under one rack's leaf")


def _link(fields: _Fields, default: Link) -> Link:
    """A link's fields; what is not given is `default`'s (the PS's link starts from every host's)."""
    link = Link(
        bw=fields.take("bw", float, default.bw, check=_between(0, 100_000)),
        delay=fields.take("delay", float, default.delay, check=_between(0, 10_000)),
        loss=fields.take("loss", float, default.loss, check=_between(0, 50)),
        duplicate=fields.take("duplicate", float, default.duplicate, check=_between(0, 50)),
        reorder=fields.take("reorder", float, default.reorder, check=_between(0, 50)),
    )
    fields.done()
    return link


def overridden(run: Run, policy: Optional[str] = None, queues: Optional[str] = None, pool: Optional[int] = None,
               result_copies: Optional[bool] = None, seed: Optional[int] = None, levels: Optional[int] = None,
               priority_policy: Optional[str] = None) -> Run:  # fmt: skip
    """`run` with the switch's policies (comma-separated), its queues, its pool, its result copies, every job's
    seed, every switch job's levels or every thc job's end-host priority policy (over a switch or the PS)
    replaced where given, checked as the run file's fields are (the switch's target too, which the CLI may
    have replaced)."""
    given = {"policy": policy.split(",") if policy else None, "queues": queues, "pool": pool, "result_copies": result_copies}
    switch = {name: value for name, value in asdict(run.switch).items() if name != "policies"} | {"policy": list(run.switch.policies)}
    checked = _switch(_Fields(switch | {name: value for name, value in given.items() if value is not None}, "switch"))
    if seed is not None and not 0 <= seed <= 2**31 - 1:
        raise SpecError(f"--seed {seed}: must be between 0 and {2**31 - 1}")
    jobs = run.jobs if seed is None else tuple(replace(job, seed=seed) for job in run.jobs)
    if levels is not None:
        if not run.racks or levels not in LEVELS:
            raise SpecError(f"--levels {levels}: give 2 (leaves, then the spine) or 1 (the spine alone) for a run file with topology.racks")
        jobs = tuple(replace(job, levels=levels) if job.uses_switch else job for job in jobs)
    if priority_policy is not None:
        if priority_policy not in PRIORITY_POLICIES:
            raise SpecError(f"--priority-policy {priority_policy}: give one of {list(PRIORITY_POLICIES)}")
        jobs = tuple(replace(job, priority_policy=priority_policy) if job.uses_aggregators else job for job in jobs)
    return replace(run, switch=checked, jobs=jobs)


def static_window(job: Job, run: Run) -> int:
    """The job's window under the `static` policy: at most its share of the pool among the switch jobs of its
    phase (a power of two, as the switch's partitions are), so that every one of them gets a partition."""
    sharing = sum(1 for j in run.jobs if j.phase == job.phase and j.uses_switch)
    share = 1 << max((run.switch.pool // max(sharing, 1)).bit_length() - 1, 0)
    return min(job.window or share, share)


def _faults(items: list[Any], switches: tuple[str, ...]) -> tuple[Fault, ...]:
    """`[{at: 20, stop: switch}, {at: 35, start: switch}]`: each service stopped before it is started again; the
    services are the PS and `switches` (a racked run's spine and leaves)."""
    services = (*switches, "ps")
    faults, running = [], dict.fromkeys(services, True)
    for i, item in enumerate(items):
        fields = _Fields(item, f"faults[{i}]")
        at = fields.take("at", float, None, check=_between(0, 86_400))
        stop, start = (fields.take(action, str, None, check=_one_of(services)) for action in ("stop", "start"))
        fields.done()
        if at is None or (stop is None) == (start is None):
            raise SpecError(f"faults[{i}]: give 'at' (seconds after the jobs begin training) and one of 'stop' or 'start' "
                            f"({' or '.join(services)})")  # fmt: skip
        service = stop or start
        if running[service] != (stop is not None) or (faults and at < faults[-1].at):
            raise SpecError(f"faults[{i}]: {'stop' if stop else 'start'} {service} at {at:g} s: faults come in time order, "
                            f"and each service is stopped before it is started again")  # fmt: skip
        running[service] = start is not None
        faults.append(Fault(at, "stop" if stop else "start", service))
    return tuple(faults)


def _switch(fields: _Fields) -> Switch:
    target = fields.take("target", str, Switch.target, check=_one_of(TARGETS))
    pool = fields.take("pool", int, Switch.pool, check=_power_of_two)
    words = fields.take("words", int, Switch.words, check=_between(1, 256))
    policy = fields.take("policy", (str, list), "esa")
    policies = tuple(policy) if isinstance(policy, list) else (policy,)
    if not policies or len(set(policies)) != len(policies) or any(p not in POLICIES for p in policies):
        raise SpecError(f"switch.policy: {policy!r}: give one of {list(POLICIES)} or a list of distinct ones")
    slot_timeout = fields.take("slot_timeout", float, Switch.slot_timeout, check=_between(0.001, 60))
    if "priority_queues" in fields.left:
        raise SpecError("switch.priority_queues: replaced by switch.queues (priority or fifo), which every policy's round gets alike")
    queues = fields.take("queues", str, Switch.queues, check=_one_of(QUEUES))
    max_pps = fields.take("max_pps", float, Switch.max_pps, check=_between(0, 1e9))
    latency = fields.take("latency", float, Switch.latency, check=_between(0, 1000))
    result_copies = fields.take("result_copies", bool, Switch.result_copies)
    if not result_copies and "atp" in policies:
        raise SpecError("switch.result_copies: atp sends every RESULT through the PS; drop atp from switch.policy or keep the copies")
    for name, value in (("max_pps", max_pps), ("latency", latency)):
        if value and target != "software":
            raise SpecError(f"switch.{name}: a setting of the software switch alone; leave it out for target {target}")
    fields.done()
    return Switch(target=target, pool=pool, words=words, policies=policies, slot_timeout=slot_timeout,
                  queues=queues, max_pps=max_pps, latency=latency, result_copies=result_copies)


def _job(fields: _Fields, index: int, racked: bool) -> Job:
    name = fields.take("name", str, f"job{index}", check=_identifier)
    given_hosts = fields.take("hosts", list, None)
    workers = fields.take("workers", int, len(given_hosts) if given_hosts else Job.workers, check=_between(1, 64))
    hosts = tuple(given_hosts if given_hosts is not None else range(workers))
    if len(hosts) != workers or any(not isinstance(h, int) or h < 0 for h in hosts):
        raise SpecError(f"{fields.where}.hosts: {list(hosts)}: give {workers} worker host numbers (0, 1, ...), one per rank")
    model = _Fields(fields.take("model", dict, {}), f"{fields.where}.model")
    kind = model.take("kind", str, Job.kind, check=_one_of(tuple(MODELS)))
    width = model.take("width", int, Job.width, check=_between(0, 4096))
    if kind != "mlp" and "hidden" in model.given:
        raise SpecError(f"{fields.where}.model.hidden: only the mlp takes it (the {kind}'s size is its width)")
    hidden = model.take("hidden", list, list(Job.hidden))
    if not hidden or any(not isinstance(h, int) or not 1 <= h <= 65536 for h in hidden):
        raise SpecError(f"{fields.where}.model.hidden: {hidden!r}: give a list of layer widths, e.g. [256] or [2048, 2048]")
    model.done()
    values: dict[str, Any] = dict(
        name=name, workers=workers, hosts=hosts, hidden=tuple(hidden), kind=kind, width=width,
        data=fields.take("data", str, MODELS[kind][0], check=_one_of((MODELS[kind][0],))),
        target=fields.take("target", float, None, check=_between(0, 100)),
        ratio=fields.take("ratio", float, Job.ratio, check=_between(1e-6, 1)),
        steps=fields.take("steps", int, Job.steps, check=_between(1, 10**7)),
        batch=fields.take("batch", int, Job.batch, check=_between(1, 1_000_000)),
        lr=fields.take("lr", float, MODELS[kind][1], check=_between(1e-9, 100)),
        hook=fields.take("hook", str, Job.hook, check=_one_of(HOOKS)),
        transport=fields.take("transport", str, Job.transport, check=_one_of(TRANSPORTS)),
        bits=fields.take("bits", int, Job.bits, check=_between(1, 8)),
        granularity=fields.take("granularity", int, Job.granularity, check=_between(0, 255)),
        warm_up=fields.take("warm_up", int, Job.warm_up, check=_between(0, 10**6)),
        rank=fields.take("rank", int, Job.rank, check=_between(1, 1024)),
        priority=fields.take("priority", int, None, check=_between(0, 255)),
        priority_policy=fields.take("priority_policy", str, Job.priority_policy, check=_one_of(tuple(PRIORITY_POLICIES))),
        priority_cap=fields.take("priority_cap", int, Job.priority_cap, check=_between(0, 255)),
        window=fields.take("window", int, None, check=_between(1, 65536)),
        min_rto=fields.take("min_rto", float, Job.min_rto, check=_between(0.001, 10)),
        failover=fields.take("failover", float, None, check=_between(0, 60)),
        failback=fields.take("failback", float, Job.failback, check=_between(0, 86_400)),
        hierarchy=fields.take("hierarchy", str, Job.hierarchy, check=_one_of(("auto", "node", "flat"))),
        phase=fields.take("phase", int, Job.phase, check=_between(0, 1000)),
        start=fields.take("start", float, Job.start, check=_between(0, 86_400)),
        compute=fields.take("compute", float, Job.compute, check=_between(0, 3600)),
        jitter=fields.take("jitter", float, Job.jitter, check=_between(0, 1)),
        eval_every=fields.take("eval_every", int, Job.eval_every, check=_between(1, 10**7)),
        seed=fields.take("seed", int, Job.seed, check=_between(0, 2**31 - 1)),
        levels=fields.take("levels", int, Job.levels, check=_between(*LEVELS)),
    )  # fmt: skip
    fields.done()
    job = Job(**values)
    if job.batch % job.workers:
        raise SpecError(f"{fields.where}.batch: {job.batch} is not divisible by its {job.workers} workers")
    if job.hook != "thc":
        for option in ("transport", "priority", "priority_policy", "window", "min_rto", "failover", "failback", "hierarchy"):
            if option in fields.given and (option != "transport" or job.transport != "collective"):
                raise SpecError(f"{fields.where}.{option}: only thc jobs take it (hook is {job.hook!r})")
    if "levels" in fields.given and not (racked and job.uses_switch):
        raise SpecError(f"{fields.where}.levels: only a switch job (hook thc, transport switch) of a racked run (topology.racks) "
                        f"aggregates at levels")  # fmt: skip
    if job.hook != "topk" and "ratio" in fields.given:
        raise SpecError(f"{fields.where}.ratio: only topk jobs take it (hook is {job.hook!r})")
    if job.hook in ("powersgd", "topk") and job.warm_up < 2:
        raise SpecError(f"{fields.where}.warm_up: {job.hook} needs at least 2 steps of plain allreduce, got {job.warm_up}")
    if job.hook == "thc":
        from ina.compression import THCConfig

        try:
            THCConfig(bits=job.bits, granularity=job.thc_granularity).check_workers(job.workers)
        except ValueError as error:
            raise SpecError(f"{fields.where}: {error}") from None
    return job


class _Fields:
    """Takes fields out of one mapping of the run file; whatever is left at the end is unknown."""

    def __init__(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise SpecError(f"{where}: expected a mapping of fields, got {type(value).__name__} {value!r}")
        self.left, self.where, self.given = dict(value), where, set(value)

    def take(self, key: str, kind: Any, default: Any, check: Optional[Callable[[Any], Optional[str]]] = None) -> Any:
        if key not in self.left or self.left[key] is None:
            self.left.pop(key, None)
            return default
        value = self.left.pop(key)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) != (bool in kinds) or not isinstance(value, kinds):
            names = " or ".join({str: "text", int: "an integer", float: "a number", list: "a list", dict: "a mapping",
                                 bool: "true or false"}[k] for k in kinds)  # fmt: skip
            raise SpecError(f"{self.where}.{key}: expected {names}, got {value!r}")
        problem = check(value) if check else None
        if problem:
            raise SpecError(f"{self.where}.{key}: {value!r}: {problem}")
        return value

    def done(self) -> None:
        if self.left:
            raise SpecError(f"{self.where}: unknown field(s) {sorted(self.left)}; see testbed/README.md for the fields")


def _between(low: float, high: float) -> Callable[[Any], Optional[str]]:
    return lambda v: None if low <= v <= high else f"must be between {low:g} and {high:g}"


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], Optional[str]]:
    return lambda v: None if v in choices else f"must be one of {list(choices)}"


def _power_of_two(value: int) -> Optional[str]:
    return None if 1 <= value <= 65536 and value & (value - 1) == 0 else "must be a power of two up to 65536"


def _identifier(value: str) -> Optional[str]:
    ok = value and len(value) <= 40 and all(c.isalnum() or c in "-_." for c in value)
    return None if ok else "use up to 40 letters, digits, '-', '_' or '.'"
