"""How K and P trade against Tofino 1's resources: the TNA program compiled by bf-p4c for a grid of
words per packet (K) and pool sizes (P), one row per build with the compiler's own numbers.

    python -m benchmarks.tofino_fit [--words 23 32 64] [--pools 4096 8192 16384 32768] [--timeout 3600]

Each build is `ina p4 build --target tofino --words K --pool P` (cached as that command caches it).
A row that fits gives the MAU stages used, the SRAM and TCAM blocks, stateful ALUs and logical tables
over all stages (pipe/logs/resources.json) and the PHV containers used per width (pipe/logs/phv.json);
one that does not gives the compiler's first error line. The last lines name, per K, the largest
pool of the grid that fits. docs/p4.md, "Resources", holds the table for the shipped sizes.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

from ina.p4 import build as p4build
from ina.p4 import resources, toolchain


@dataclass(frozen=True)
class Fit:
    """One (K, P) build: the totals of `resources.stage_usage` when it fits, else why not."""

    words: int
    pool: int
    seconds: float
    stages: int = 0
    totals: dict[str, int] | None = None
    phv: str = ""
    error: str = ""


def first_error(message: str) -> str:
    """The compiler's first `error:` line: the one that says what did not fit (the assembler's, such as
    `tofino supports up to 12 stages, using 13`, comes after the compiler's "0 errors" tally)."""
    for line in message.splitlines():
        if "error:" in line.lower():
            return line[line.lower().index("error:") :].strip()[:160]
    return message.strip().splitlines()[-1][:160] if message.strip() else "no diagnostics"


def fit(words: int, pool: int, timeout: float) -> Fit:
    """Compile the TNA program for K = words, P = pool and read what it uses."""
    start = time.perf_counter()
    try:
        done = p4build.build(words, pool, target="tofino", timeout=timeout)
    except (p4build.BuildError, ValueError) as refused:  # bf-p4c's refusal, or `ina p4 build`'s own
        return Fit(words, pool, time.perf_counter() - start, error=first_error(str(refused)))
    seconds = time.perf_counter() - start
    assert done.tofino is not None
    rows = resources.stage_usage(json.loads(done.tofino.resources.read_text()))
    phv = ", ".join(f"{used}/{total}x{width}b" for width, (used, total) in resources.phv_beside(done.tofino.resources).items())
    return Fit(words, pool, seconds, len(rows), resources.totals(rows), phv)


def table(fits: list[Fit]) -> str:
    """The rows as a Markdown table, as docs/p4.md keeps it."""
    columns = resources.COLUMNS[1:]
    lines = ["| K | P | fits | MAU stages | " + " | ".join(columns) + " | PHV | compile s |", "|---" * (6 + len(columns)) + "|"]
    for f in fits:
        if f.totals is None:
            lines.append(f"| {f.words} | {f.pool} | no: {f.error} |" + " |" * (len(columns) + 2) + f" {f.seconds:.0f} |")
        else:
            cells = " | ".join(str(f.totals[c]) for c in columns)
            lines.append(f"| {f.words} | {f.pool} | yes | {f.stages} | {cells} | {f.phv} | {f.seconds:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--words", type=int, nargs="+", default=[23, 32, 64], help="K values to compile")
    parser.add_argument("--pools", type=int, nargs="+", default=[4096, 8192, 16384, 32768], help="P values (powers of two)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds one bf-p4c run may take")
    args = parser.parse_args()
    try:
        toolchain.require(p4build.COMPILERS["tofino"])
    except toolchain.ToolMissing as missing:
        raise SystemExit(str(missing)) from None
    fits = []
    for words in args.words:
        for pool in sorted(args.pools):
            fits.append(fit(words, pool, args.timeout))
            print(table(fits[-1:]).splitlines()[-1], flush=True)
    print("\n" + table(fits))
    for words in args.words:
        fitting = [f.pool for f in fits if f.words == words and f.totals is not None]
        print(f"K = {words}: largest pool of the grid that fits: {max(fitting) if fitting else 'none'}")


if __name__ == "__main__":
    main()
