"""Address checks the protocol's rules rest on (docs/protocol.md, section 7: a job's RESULT group is
an IPv4 multicast address). Here, on the ground floor, so that the control plane, which checks a
registration, and the network layer, which joins the group, both use them without importing each other."""

from __future__ import annotations

import ipaddress


def is_multicast(host: str) -> bool:
    """Whether `host` is a numeric IPv4 multicast address (224.0.0.0/4)."""
    try:
        return ipaddress.IPv4Address(host).is_multicast
    except ValueError:
        return False
