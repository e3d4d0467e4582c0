"""Flat against two-level reductions, per emulated node: `python -m benchmarks.hierarchy`.

8 ranks on 2 emulated nodes (``--nodes``, ``--per-node``) reduce one bucket of N THC coordinates
(4-bit, g = 30: 8-bit lanes for up to 8 ranks) the way the hook does, the MAX of the norms and
the SUM of the table values, through each transport (``collective``: gloo; ``switch`` and ``ps``:
a software switch and PS, ``ina.launch.LocalAggregators``) in two layouts:

- flat: every rank is a worker of the transport;
- two-level: ``HierarchicalTransport``, the ranks of a node summing over their node's own gloo
  group first and its leader reducing the node's sum through the transport.

As root, each node's ranks run in a network namespace of its own with one link, shaped to
``--mbit`` each way, to a hub where the switch, the PS and the rendezvous store listen
(``benchmarks.emulated_nodes``); ranks of a node talk over their namespace's own stack, off the
link, as GPUs of a node over NVLink. "link kB/node" is what a node's link carried out of it per
reduction (its interface's counter, read on the node's first rank between barriers: the
barriers' few bytes included). Without root, everything runs on loopback and only the bytes the
transports count are shown. "counted kB/node" is the transports' own ``bytes_sent`` summed over
a node's ranks: UDP payloads for the switch and the PS, the tensors handed to all-reduce for the
collective (gloo's ring sends more and routes it its own way, which the link column shows).
All configurations run in the same processes, taking turns (one reduction each per round); a
reduction's time is the slowest rank's, from a barrier to its sum; the median of ``--repeats``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from typing import Any, Optional

LAYOUTS = ("flat", "two-level")


def _enter_node(namespaces: list[str], per_node: int, rank: int) -> None:
    """Run this worker in its node's namespace, gloo on the node's link."""
    from benchmarks.emulated_nodes import NODE_INTERFACE, enter

    enter(namespaces[rank // per_node])
    os.environ["GLOO_SOCKET_IFNAME"] = NODE_INTERFACE


def _worker(rank: int, workers: int, per_node: int, names: list[str], options: dict[str, dict[str, str]],
            size: int, repeats: int, links: bool) -> dict[tuple[str, str], tuple[list[float], float, Optional[float]]]:  # fmt: skip
    """Per (transport, layout): this rank's seconds per timed reduction, the bytes it counted per
    reduction, and (on a node's first rank, with links) its link's bytes out per reduction."""
    import torch
    import torch.distributed as dist

    from benchmarks.emulated_nodes import sent_bytes
    from ina.compression import THCCodec, THCConfig
    from ina.transport import create_transport
    from ina.transport.hierarchy import HierarchicalTransport

    codec = THCCodec(THCConfig(bits=4, granularity=30))
    group = dist.group.WORLD
    nodes = [list(range(first, first + per_node)) for first in range(0, workers, per_node)]
    generator = torch.Generator().manual_seed(rank)
    indices = torch.randint(0, 16, (size,), dtype=torch.uint8, generator=generator)
    norm = torch.rand((), generator=generator)
    counts_link = links and rank % per_node == 0
    transports: dict[tuple[str, str], Any] = {}
    try:
        for name in names:
            for layout in LAYOUTS:
                transport = create_transport(name, group, **options.get(name, {}))
                transports[name, layout] = transport if layout == "flat" else HierarchicalTransport(transport, nodes=nodes)
                transports[name, layout].attach(codec, group)
        seconds: dict[tuple[str, str], list[float]] = {key: [] for key in transports}
        link = dict.fromkeys(transports, 0)
        counted_before = {key: transport.bytes_sent for key, transport in transports.items()}
        for round_ in range(repeats + 1):  # round 0 warms up
            for key, transport in transports.items():
                encoded = codec.table_values(indices) if transport.takes_values else indices.clone()
                dist.barrier()
                link_before, started = sent_bytes() if counts_link else 0, time.perf_counter()
                transport.norm_max(norm, bucket=0).wait()
                transport.table_sum(encoded, codec, workers, bucket=0).wait()
                elapsed = time.perf_counter() - started
                dist.barrier()
                if round_:
                    seconds[key].append(elapsed)
                    link[key] += sent_bytes() - link_before if counts_link else 0
                else:
                    counted_before[key] = transport.bytes_sent
        return {key: (seconds[key], (transports[key].bytes_sent - counted_before[key]) / repeats,
                      link[key] / repeats if counts_link else None) for key in transports}  # fmt: skip
    finally:
        dist.barrier()  # no rank closes (rank 0 deregisters) while another still needs the job
        for transport in transports.values():
            transport.close()


def _run(args: argparse.Namespace, host: str, setup: Any) -> list[dict]:
    from ina.control.auth import Access
    from ina.launch import LocalAggregators, run_workers

    workers = args.nodes * args.per_node
    # The hub's control APIs are open: only this run's own namespaces reach them.
    access = Access(allow_unauthenticated=True) if setup is not None else None
    with LocalAggregators(words=args.words, pool=args.pool, host=host, access=access) as local:
        options = {name: {**local.options(name), "min_rto": args.min_rto} for name in args.transports if name != "collective"}
        return run_workers(_worker, workers, args.per_node, args.transports, options, 1 << args.size, args.repeats,
                           setup is not None, timeout=900.0, host=host, setup=setup)  # fmt: skip


def _table(args: argparse.Namespace, reports: list[dict], where: str, links: bool) -> None:
    workers = args.nodes * args.per_node
    print(f"{workers} ranks on {args.nodes} nodes of {args.per_node}, N = {1 << args.size:,} coordinates "
          f"(4-bit THC, 8-bit lanes), {where}; median of {args.repeats}")  # fmt: skip
    print(f"{'transport':<11}{'layout':<11}{'s/reduction':>12}{'link kB/node':>14}{'vs flat':>9}{'counted kB/node':>17}{'vs flat':>9}")
    for name in args.transports:
        flat: Optional[tuple[Optional[float], float]] = None
        for layout in LAYOUTS:
            key = (name, layout)
            seconds = statistics.median(max(r[key][0][i] for r in reports) for i in range(args.repeats))
            link = statistics.mean(r[key][2] for r in reports[:: args.per_node]) if links else None
            counted = sum(r[key][1] for r in reports) / args.nodes
            flat = flat or (link, counted)
            print(f"{name:<11}{layout:<11}{seconds:>12.4f}{_kb_and_ratio(link, flat[0], 14)}{_kb_and_ratio(counted, flat[1], 17)}")


def _kb_and_ratio(value: Optional[float], flat: Optional[float], width: int) -> str:
    """kB, and the ratio to the flat layout's, in columns of ``width`` and 9 characters ("-": not measured)."""
    if value is None or flat is None:
        return f"{'-':>{width}}{'-':>9}"
    return f"{value / 1000:>{width},.1f}{value / flat:>9.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--per-node", type=int, default=4, help="ranks on each node")
    parser.add_argument("--size", type=int, default=20, help="log2 of N, the coordinates per reduction")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mbit", type=float, default=200.0, help="each node's link, Mbit/s each way")
    parser.add_argument("--words", type=int, default=64, help="K, 32-bit words per packet through the switch")
    parser.add_argument("--pool", type=int, default=4096, help="the switch's aggregator slots")
    parser.add_argument("--min-rto", type=float, default=0.25,
                        help="the UDP transports' least resend timeout (s): above the queueing on a shaped link")  # fmt: skip
    parser.add_argument("--loopback", action="store_true", help="no namespaces, even as root")
    parser.add_argument("--transports", nargs="+", default=["collective", "switch", "ps"],
                        choices=["collective", "switch", "ps"])  # fmt: skip
    args = parser.parse_args()
    # torch's store logs a warning per connection whose peer has no host name, as in namespaces
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

    from benchmarks.emulated_nodes import HUB_ADDRESS, EmulatedNodes, why_not

    reason = "--loopback" if args.loopback else why_not()
    if reason is not None:
        _table(args, _run(args, "127.0.0.1", None), f"on loopback ({reason}: no links to count)", links=False)
        return
    with EmulatedNodes(args.nodes, args.mbit) as network, network.inside_hub():
        reports = _run(args, HUB_ADDRESS, functools.partial(_enter_node, network.nodes, args.per_node))
    _table(args, reports, f"links of {args.mbit:g} Mbit/s each way, one per node", links=True)


if __name__ == "__main__":
    main()
