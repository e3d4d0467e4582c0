"""At attach time, whether a job's aggregators send its RESULTs to a group (docs/protocol.md, section 7,
"RESULT groups"): every rank joins the job's group, rank 0 has each aggregator probe it, and an
aggregator whose probe every rank heard gets the job with the group; the others keep unicast.
"""

from __future__ import annotations

import logging
import random
import socket

import torch.distributed as dist

from ina.control.http import ControlError
from ina.net.multicast import heard_probes, join, job_group
from ina.net.node import Address
from ina.transport.udp_setup import Aggregator, agree

logger = logging.getLogger(__name__)


def result_group(group: dist.ProcessGroup, aggregators: list[Aggregator], job: int, port: int, interface: str,
                 wanted: bool) -> tuple[socket.socket | None, Address, frozenset[str]]:  # fmt: skip
    """On every rank of `group` at once: this rank's socket on the job's RESULT group (None when no
    aggregator will use it), the group, and the roles of the aggregators that will send to it; a rank
    that does not want one (`wanted` False) makes the whole job unicast."""
    address = job_group(job, port)
    member = join(address, interface) if wanted else None
    joined: list[object] = [None] * group.size()
    dist.all_gather_object(joined, member is not None, group=group)
    if not all(joined):
        return _unicast(member, address, job, "some ranks did not join it")
    nonces = agree(group, lambda: _probe(aggregators, address))
    assert member is not None
    heard: list[object] = [None] * group.size()
    dist.all_gather_object(heard, heard_probes(member, set(nonces.values())), group=group)
    roles = frozenset(role for role, nonce in nonces.items() if all(nonce in h for h in heard))  # type: ignore[operator]
    if not roles:
        return _unicast(member, address, job, "no aggregator's probe reached every rank")
    return member, address, roles


def _probe(aggregators: list[Aggregator], address: Address) -> dict[str, int]:
    """Rank 0: ask each aggregator to probe the group; the nonce of each that did, by role."""
    nonces = {}
    for aggregator in aggregators:
        nonce = random.getrandbits(63)
        try:
            sent = aggregator.client().probe(address, nonce)["sent"]
        except ControlError as error:  # an aggregator that cannot send to groups (404): unicast from it
            logger.info("the %s does not probe RESULT groups (%s)", aggregator.role, error)
            continue
        if sent:
            nonces[aggregator.role] = nonce
    return nonces


def _unicast(member: socket.socket | None, address: Address, job: int, why: str) -> tuple[None, Address, frozenset[str]]:
    if member is not None:
        member.close()
    logger.info("job %d: RESULTs stay unicast, not to the group %s:%d: %s", job, *address, why)
    return None, address, frozenset()
