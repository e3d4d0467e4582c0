"""The job registration record the control plane hands to the switch and the PS."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ina.protocol.addresses import is_multicast
from ina.protocol.constants import HEADER_LEN, LANE_WIDTHS, MAX_INDEX_BITS, MAX_RACKS, MAX_WORKERS

MAX_DATAGRAM = 65507
"""The largest UDP payload (IPv4): no packet of any job can be longer."""
MAX_WORDS = (MAX_DATAGRAM - HEADER_LEN) // 4
"""The most payload words one packet can carry."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A UDP address as the control plane names it."""

    host: str
    port: int

    @property
    def addr(self) -> tuple[str, int]:
        return (self.host, self.port)

    @classmethod
    def parse(cls, value: Any, what: str) -> Endpoint:
        """From `{"host", "port"}`, `[host, port]` or `"host:port"`, with a clear error."""
        try:
            if isinstance(value, str):
                host, port = value.rsplit(":", 1)
            elif isinstance(value, dict):
                host, port = value["host"], value["port"]
            else:
                host, port = value
            port = int(port)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{what}: expected {{'host': ..., 'port': ...}} or 'host:port', got {value!r}") from None
        if not 0 < port < 65536:
            raise ValueError(f"{what}: port {port} is not in 1..65535")
        return cls(str(host), port)


@dataclass(frozen=True, slots=True)
class Uplink:
    """A leaf's way up (docs/protocol.md, section 10): the spine's data address, the leaf's rack there of the
    job's `racks`, and the slots the spine gave the job (every level uses the same) in a pool of `pool` slots."""

    host: str
    port: int
    rack: int
    racks: int
    slot_base: int
    span: int
    pool: int

    @property
    def addr(self) -> tuple[str, int]:
        return (self.host, self.port)

    def __post_init__(self) -> None:
        if not 2 <= self.racks <= MAX_RACKS or not 0 <= self.rack < self.racks:
            raise ValueError(f"uplink: rack {self.rack} of {self.racks} racks; need 2 <= racks <= {MAX_RACKS} and 0 <= rack < racks")
        if self.pool < 1 or self.pool & (self.pool - 1) or self.span < 1 or self.span & (self.span - 1) or self.span > self.pool:
            raise ValueError(f"uplink span {self.span} and pool {self.pool} must be powers of two, span <= pool")
        if not 0 <= self.slot_base < self.pool:
            raise ValueError(f"uplink slot_base {self.slot_base} must be in 0..{self.pool - 1}")

    @classmethod
    def parse(cls, value: Any) -> Uplink:
        if not isinstance(value, dict):
            raise ValueError(f"uplink: expected {{'host', 'port', 'rack', 'racks', 'slot_base', 'span', 'pool'}}, got {value!r}")
        endpoint = Endpoint.parse(value, "uplink")
        try:
            numbers = [int(value[name]) for name in ("rack", "racks", "slot_base", "span", "pool")]
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"uplink: {error!r}; expected rack, racks, slot_base, span and pool as integers") from None
        return cls(endpoint.host, endpoint.port, *numbers)


LEVELS = ("spine",)
"""The `level` a registration may name: a switch is a job's spine (its workers are the leaves); a leaf names its `uplink`."""
FIELDS = frozenset({"job", "workers", "window", "lane_bits", "priority_cap", "ps", "switch", "index_bits", "table", "words", "group",
                    "level", "uplink", "racks", "leaves"})
"""The fields of a registration body."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job: who its workers are (by rank) and how it may use the aggregators."""

    job: int
    workers: tuple[Endpoint, ...]
    window: int
    lane_bits: int = 8
    priority_cap: int = 255
    ps: Endpoint | None = None
    switch: Endpoint | None = None
    index_bits: int = 0
    table: tuple[int, ...] = field(default=())
    words: int = 0
    """K for this job alone (PS-only jobs, docs/protocol.md section 7); 0: the aggregator's K."""
    group: Endpoint | None = None
    """The job's RESULT group (a multicast address), which every worker receives: each RESULT made on
    completion goes there once instead of once per worker (docs/protocol.md, section 7, "RESULT groups")."""
    level: str | None = None
    """At a switch, "spine": its workers are the job's leaves by rack (docs/protocol.md, section 10)."""
    uplink: Uplink | None = None
    """At a switch: it is the job's leaf for rack `uplink.rack`, its sums go up to the spine there."""
    racks: tuple[int, ...] = ()
    """At the PS: the workers of each rack (`workers` lists them rack by rack); () for a job of one switch."""
    leaves: tuple[Endpoint, ...] = ()
    """At the PS: each rack's leaf (data address), by rack; `switch` is the spine."""

    def __post_init__(self) -> None:
        if not 0 <= self.job < 1 << 16:
            raise ValueError(f"job id {self.job} must be in 0..65535")
        self._check_levels()
        most = MAX_WORKERS * MAX_RACKS if self.racks else MAX_WORKERS
        if not 1 <= len(self.workers) <= most:
            raise ValueError(f"a job has 1..{MAX_WORKERS} workers (up to {MAX_RACKS} racks of {MAX_WORKERS} in racks), got {len(self.workers)}")
        if len(set(self.workers)) != len(self.workers):
            raise ValueError("two ranks registered the same address; give every worker its own port")
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        if self.lane_bits not in LANE_WIDTHS:
            raise ValueError(f"lane_bits must be one of {LANE_WIDTHS}, got {self.lane_bits}")
        if not 0 <= self.priority_cap <= 255:
            raise ValueError(f"priority_cap must be in 0..255, got {self.priority_cap}")
        if not 0 <= self.index_bits <= MAX_INDEX_BITS:
            raise ValueError(f"index_bits must be in 0..{MAX_INDEX_BITS}, got {self.index_bits}")
        if self.index_bits and len(self.table) != 1 << self.index_bits:
            raise ValueError(f"index_bits {self.index_bits} needs a table of {1 << self.index_bits} levels, got {len(self.table)}")
        if self.table and max(self.table) * len(self.workers) >= 1 << self.lane_bits:
            raise ValueError(
                f"{len(self.workers)} workers x table maximum {max(self.table)} overflows {self.lane_bits}-bit lanes; "
                "use wider lane_bits"
            )
        if not 0 <= self.words <= MAX_WORDS:
            raise ValueError(f"words must be 0 (the aggregator's K) or 1..{MAX_WORDS} (one UDP datagram), got {self.words}")
        if self.group is not None and not is_multicast(self.group.host):
            raise ValueError(f"group: {self.group.host} is not an IPv4 multicast address (224.0.0.0/4)")

    def _check_levels(self) -> None:
        """What a racked registration must be (docs/protocol.md, section 10): one role, racks that add up."""
        if self.level is not None and self.level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS} (a leaf names its 'uplink' instead), got {self.level!r}")
        if sum(map(bool, (self.level, self.uplink, self.racks))) > 1:
            raise ValueError("a registration names one of 'level' (the spine), 'uplink' (a leaf) and 'racks' (the PS)")
        if self.level and not 2 <= len(self.workers) <= MAX_RACKS:
            raise ValueError(f"a spine's workers are the job's leaves: 2..{MAX_RACKS}, got {len(self.workers)}")
        if not self.racks:
            if self.leaves:
                raise ValueError("'leaves' needs 'racks' (the workers of each rack)")
            return
        if not 2 <= len(self.racks) <= MAX_RACKS or not all(1 <= n <= MAX_WORKERS for n in self.racks):
            raise ValueError(f"racks: 2..{MAX_RACKS} racks of 1..{MAX_WORKERS} workers each, got {list(self.racks)}; "
                             "a job under one switch registers without racks")  # fmt: skip
        if sum(self.racks) != len(self.workers):
            raise ValueError(f"racks {list(self.racks)} hold {sum(self.racks)} workers but 'workers' lists {len(self.workers)}")
        if len(self.leaves) != len(self.racks) or self.switch is None:
            raise ValueError(f"a racked job names its spine as 'switch' and one leaf per rack in 'leaves' ({len(self.racks)})")
        if self.index_bits or self.group is not None:
            raise ValueError("a racked job adds lanes at its switches and uses no RESULT group: register it without index_bits and group")

    @property
    def rack_offsets(self) -> tuple[int, ...]:
        """The position in `workers` of each rack's first worker."""
        return tuple(sum(self.racks[:r]) for r in range(len(self.racks)))

    @property
    def fanin(self) -> int:
        return len(self.workers)

    @property
    def full_bitmap(self) -> int:
        return (1 << self.fanin) - 1

    def to_json(self) -> dict[str, Any]:
        """The registration body, ready for json.dumps."""
        body = asdict(self)
        body["workers"] = list(body["workers"])
        body["table"] = list(body["table"])
        if not self.words:
            del body["words"]  # absent: the aggregator's K, as before the field existed
        if self.group is None:
            del body["group"]  # absent: unicast RESULTs, as before the field existed
        for name in ("level", "uplink", "racks", "leaves"):  # absent: a job of one switch (section 10)
            if not body[name]:
                del body[name]
        if self.leaves:
            body["leaves"] = list(body["leaves"])
            body["racks"] = list(body["racks"])
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> JobSpec:
        """Build from a registration body (docs/protocol.md, section 7); ValueError says what is wrong."""
        if not isinstance(body, dict):
            raise ValueError("a job registration is a JSON object")
        unknown = set(body) - FIELDS
        if unknown:
            raise ValueError(f"unknown job fields {sorted(unknown)}; known: {sorted(FIELDS)}")
        for required in ("job", "workers", "window"):
            if required not in body:
                raise ValueError(f"job registration lacks '{required}'")
        workers = body["workers"]
        if not isinstance(workers, list):
            raise ValueError("'workers' must be a list of {'host', 'port'} by rank")

        def optional(name: str) -> Endpoint | None:
            value = body.get(name)
            return None if value is None else Endpoint.parse(value, name)

        try:
            return cls(
                job=int(body["job"]),
                workers=tuple(Endpoint.parse(w, f"workers[{rank}]") for rank, w in enumerate(workers)),
                window=int(body["window"]),
                lane_bits=int(body.get("lane_bits", 8)),
                priority_cap=int(body.get("priority_cap", 255)),
                ps=optional("ps"),
                switch=optional("switch"),
                index_bits=int(body.get("index_bits", 0)),
                table=tuple(int(v) for v in body.get("table", ())),
                words=int(body.get("words", 0)),
                group=optional("group"),
                level=body.get("level"),
                uplink=None if body.get("uplink") is None else Uplink.parse(body["uplink"]),
                racks=tuple(int(n) for n in body.get("racks", ())),
                leaves=tuple(Endpoint.parse(leaf, f"leaves[{r}]") for r, leaf in enumerate(body.get("leaves", ()))),
            )
        except TypeError as error:
            raise ValueError(f"bad job registration: {error}") from None
