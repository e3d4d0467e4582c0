"""Records services' `/metrics` over time: ``python -m ina.testbed.scrape OUT.jsonl ROLE=HOST:PORT ... [--interval S]``.

The testbed runs it beside the switch and the PS of each round, in the PS's host, until SIGTERM.
Each line of OUT.jsonl is one scrape: seconds since the recorder started, the service's role and
every `ina_*` sample as ``{"name{labels}": value}`` (parsed with `prometheus_client`'s own
parser). A scrape that fails (a service restarting) is skipped and counted in the last line.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ina.control.http import ControlClient, ControlError
from ina.net.udp import parse_address


def samples(text: str) -> dict[str, float]:
    """Every `ina_*` sample of an exposition, keyed by name and labels as Prometheus writes them."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("ina_"):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def record(path: str, services: dict[str, ControlClient], interval: float, stop: threading.Event) -> dict[str, Any]:
    """Scrape every service each `interval` seconds into `path` until `stop`; returns the tally."""
    began, tally = time.monotonic(), {"scrapes": 0, "failed": 0}
    with open(path, "w") as out:
        while not stop.is_set():
            for role, client in services.items():
                at = time.monotonic() - began
                try:
                    scraped = samples(client.metrics())
                except (ControlError, ValueError):
                    tally["failed"] += 1
                    continue
                out.write(json.dumps({"t": round(at, 3), "role": role, "samples": scraped}) + "\n")
                tally["scrapes"] += 1
            out.flush()
            stop.wait(interval)
        out.write(json.dumps({"tally": tally}) + "\n")
    return tally


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ina.testbed.scrape", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the JSON-lines file to write")
    parser.add_argument("services", nargs="+", metavar="ROLE=HOST:PORT", help="a control API to scrape, e.g. switch=10.0.0.254:47180")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between scrapes (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        services = {}
        for text in args.services:
            role, _, address = text.partition("=")
            services[role] = ControlClient(*parse_address(address, role), timeout=max(args.interval, 2.0))
        if not args.interval > 0:
            raise ValueError("--interval must be positive")
    except ValueError as error:
        print(f"ina.testbed.scrape: {error}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    tally = record(args.out, services, args.interval, stop)
    print(f"ina.testbed.scrape: {tally['scrapes']} scrapes, {tally['failed']} failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
