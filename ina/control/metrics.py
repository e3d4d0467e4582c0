"""`GET /metrics`: a control API's state in Prometheus' text format (docs/protocol.md, section 7, "Metrics").

Built with `prometheus_client` at each scrape from what the JSON API serves at that moment: every
counter of `GET /counters`, the job table of `GET /jobs` with each job's own counters and the
chunks it holds, and per rank what the watch measured (ina.control.watch), so a scrape and the
JSON API never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus' text exposition format, as `prometheus_client` writes it."""

JOB_COUNTERS = {
    "completed": "chunks of the job completed here",
    "switch_completed": "chunks of the job completed at its switch (the RESULT copies the PS received)",
    "preempting": "slots the job's packets took from other jobs' partials",
    "preempted": "the job's partials that other jobs' packets evicted to the PS",
    "collisions": "the job's packets that met another job's chunk and went to the PS",
}
"""Per-job counters, where a target's job table has them."""
RANK_METRICS = {
    "wait_seconds": (CounterMetricFamily, "chunk-seconds the job's chunks here waited for the rank after another rank's contribution"),
    "waited_on": (GaugeMetricFamily, "the job's chunks here waiting for the rank, on average over recent seconds"),
    "waiting_chunks": (GaugeMetricFamily, "the job's chunks here waiting for the rank now"),
    "oldest_wait": (GaugeMetricFamily, "seconds the longest-waiting chunk here has waited for the rank"),
}


class ServiceCollector(Collector):
    """Collects one control API's metrics at each scrape; `server` is its ControlServer."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        server = self.server
        prefix = f"ina_{server.target.role}"
        for name, value in server.counters().items():
            yield CounterMetricFamily(f"{prefix}_{name}", f"the {name} counter of GET /counters", value=value)
        jobs = server.jobs()
        yield GaugeMetricFamily(f"{prefix}_jobs", "jobs registered", value=len(jobs))
        pool = server.target.config().get("pool")
        if server.target.role == "switch" and pool:
            yield GaugeMetricFamily(f"{prefix}_pool_slots", "aggregator slots in the pool", value=pool)
        yield from _job_metrics(prefix, jobs)
        yield from _rank_metrics(prefix, {job["job"]: server.lateness(job["job"]) for job in jobs})


def _job_metrics(prefix: str, jobs: list[dict[str, Any]]) -> Iterator[Metric]:
    info = GaugeMetricFamily(f"{prefix}_job_info", "a registered job (always 1)", labels=("job", "tenant", "workers", "window", "priority_cap"))
    held = GaugeMetricFamily(f"{prefix}_job_held", "chunks the job holds here now (a switch: slots)", labels=("job", "tenant"))
    slowest = GaugeMetricFamily(f"{prefix}_job_slowest_rank", "the rank the job waited for most recently (-1: none)", labels=("job",))
    tenants: dict[str, int] = {}
    counters = {name: CounterMetricFamily(f"{prefix}_job_{name}", help, labels=("job",)) for name, help in JOB_COUNTERS.items()}
    for job in jobs:
        label, tenant = str(job["job"]), job.get("owner") or ""
        info.add_metric((label, tenant, str(len(job["workers"])), str(job["window"]), str(job["priority_cap"])), 1)
        held.add_metric((label, tenant), job.get("held", 0))
        tenants[tenant] = tenants.get(tenant, 0) + job.get("held", 0)
        slowest.add_metric((label,), -1 if job.get("slowest_rank") is None else job["slowest_rank"])
        for name, family in counters.items():
            if name in job:
                family.add_metric((label,), job[name])
    by_tenant = GaugeMetricFamily(f"{prefix}_tenant_held", "chunks the tenant's jobs hold here now (a switch: slots)", labels=("tenant",))
    for tenant, count in tenants.items():
        by_tenant.add_metric((tenant,), count)
    yield from (info, held, by_tenant, slowest)
    yield from (family for family in counters.values() if family.samples)


def _rank_metrics(prefix: str, reports: Mapping[int, dict[str, Any] | None]) -> Iterator[Metric]:
    families = {name: kind(f"{prefix}_rank_{name}", help, labels=("job", "rank")) for name, (kind, help) in RANK_METRICS.items()}
    for job, report in reports.items():
        for rank in (report or {}).get("ranks", ()):
            for name, family in families.items():
                family.add_metric((str(job), str(rank["rank"])), rank[name])
    yield from families.values()


def exposition(collectors: Iterable[Collector]) -> bytes:
    """The text a scrape gets: every metric of `collectors`, collected now."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)
