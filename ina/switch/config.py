"""The switch's deployment settings (docs/protocol.md, section 5, "Configuration")."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ina.protocol import HEADER_LEN

POLICIES = ("esa", "fcfs", "atp", "static")
"""esa: preemption by priority, slots freed at completion; fcfs: first come, freed at completion; atp: first come,
held until the PS returns the RESULT (ATP's deallocation); static: SwitchML's fixed partitions."""
QUEUES = ("priority", "fifo")
"""The switch's egress queues, the same for every policy: by kind and priority, or one FIFO a port."""
MAX_POOL = 1 << 16  # the header's slot field is 16 bits
MAX_WORDS = (65507 - HEADER_LEN) // 4  # a DATA packet must fit one UDP datagram


@dataclass(frozen=True, slots=True)
class SwitchConfig:
    """Pool size P, words per packet K, the pool policy, the egress queues, the idle-sweep timeout (seconds) and
    whether a completed chunk's RESULT is copied to the PS."""

    pool: int = 64
    words: int = 64
    policy: str = "esa"
    slot_timeout: float = 1.0
    queues: str = "priority"
    result_copies: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.pool <= MAX_POOL or self.pool & (self.pool - 1):
            raise ValueError(f"pool must be a power of two in 1..{MAX_POOL} (slot = (slot_base + seq) mod P is a mask), got {self.pool}")
        if not 1 <= self.words <= MAX_WORDS:
            raise ValueError(f"words must be in 1..{MAX_WORDS} so that a packet fits one UDP datagram, got {self.words}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.queues not in QUEUES:
            raise ValueError(f"queues must be one of {QUEUES}, got {self.queues!r}")
        if self.policy == "atp" and not self.result_copies:
            raise ValueError("policy atp sends every RESULT through the PS (ATP's deallocation): run it with result copies")
        if not self.slot_timeout > 0:
            raise ValueError(f"slot_timeout must be a positive number of seconds, got {self.slot_timeout}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
