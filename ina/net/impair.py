"""Link impairments where the kernel has no netem: an nftables ruleset that drops, duplicates, or
marks for a slow queue (so delays and reorders) a random share of the packets leaving interfaces.

Used by the Mininet testbed's lossy links and by the BMv2 end-to-end tests.
"""

from __future__ import annotations

from typing import Iterable

SLOW_CLASS = "1:2"
"""The priority that `reorder` marks packets with by default: an HTB class id, whose slow class the caller adds
(tests/bmv2_support.py's; the testbed's links name their own, ina.testbed.network.SLOW_CLASS)."""
_SCALE = 1_000_000


def chain_name(device: str) -> str:
    """The chain that impairs `device` (its rules count what they dropped, duplicated and marked)."""
    return "loss_" + device.replace("-", "_")


def egress_rules(table: str, devices: Iterable[str], loss: float, duplicate: float = 0.0, reorder: float = 0.0,
                 slow_class: str = SLOW_CLASS) -> str:  # fmt: skip
    """`nft -f` input: netdev table `table` with one egress chain per device; each rate is a fraction. `reorder` marks
    packets with the priority `slow_class`, which HTB takes as the class to queue them in (before any filter)."""
    lines = [f"table netdev {table} {{"]
    for device in devices:
        lines += [f'chain {chain_name(device)} {{ type filter hook egress device "{device}" priority 0; policy accept;',
                  f"numgen random mod {_SCALE} < {round(loss * _SCALE)} counter drop"]  # fmt: skip
        if duplicate:
            lines.append(f'numgen random mod {_SCALE} < {round(duplicate * _SCALE)} counter dup to "{device}"')
        if reorder:
            lines.append(f"numgen random mod {_SCALE} < {round(reorder * _SCALE)} counter meta priority set {slow_class}")
        lines.append("}")
    return "\n".join([*lines, "}"]) + "\n"


def rule_counters(listing: str, chains: dict[str, str]) -> dict[str, dict[str, int]]:
    """Per action of the rules (`drop`, `dup`, `priority`), the packets each device's rule counted, from `nft list
    ruleset`'s `listing`; `chains` names the device of each chain (chain_name) to read."""
    counts: dict[str, dict[str, int]] = {}
    device = None
    for line in listing.splitlines():
        words = line.split()
        if words[:1] == ["chain"]:
            device = chains.get(words[1])
        elif device and "packets" in words:
            after = words[words.index("bytes") + 2 :]
            action = "priority" if "priority" in after else after[0]
            counts.setdefault(action, {})[device] = int(words[words.index("packets") + 1])
    return counts
