"""Link impairments where the kernel has no netem: an nftables ruleset that drops, duplicates, or
marks for a slow queue (so delays and reorders) a random share of the packets leaving interfaces.

Used by the Mininet testbed's lossy links and by the BMv2 end-to-end tests.
"""

from __future__ import annotations

from typing import Iterable

SLOW_CLASS = "1:2"
"""The priority that `reorder` marks packets with: an HTB class id, whose slow class the caller adds."""
_SCALE = 1_000_000


def chain_name(device: str) -> str:
    """The chain that impairs `device` (its drop rule counts what it dropped)."""
    return "loss_" + device.replace("-", "_")


def egress_rules(table: str, devices: Iterable[str], loss: float, duplicate: float = 0.0, reorder: float = 0.0) -> str:
    """`nft -f` input: netdev table `table` with one egress chain per device; each rate is a fraction."""
    lines = [f"table netdev {table} {{"]
    for device in devices:
        lines += [f'chain {chain_name(device)} {{ type filter hook egress device "{device}" priority 0; policy accept;',
                  f"numgen random mod {_SCALE} < {round(loss * _SCALE)} counter drop"]  # fmt: skip
        if duplicate:
            lines.append(f'numgen random mod {_SCALE} < {round(duplicate * _SCALE)} dup to "{device}"')
        if reorder:
            lines.append(f"numgen random mod {_SCALE} < {round(reorder * _SCALE)} meta priority set {SLOW_CLASS}")
        lines.append("}")
    return "\n".join([*lines, "}"]) + "\n"
