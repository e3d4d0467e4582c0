"""Benchmarks that publish their tables into a document, between two markers, so that the prose around them stays."""

from __future__ import annotations

from pathlib import Path

BEGIN, END = "<!-- tables: begin -->", "<!-- tables: end -->"


def write_docs(docs: Path, lines: list[str]) -> None:
    """Replace what stands between the markers of `docs` with `lines`."""
    text = docs.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    if not rest or END not in rest:
        raise SystemExit(f"{docs}: no {BEGIN} ... {END} markers to put the tables between")
    docs.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail)
