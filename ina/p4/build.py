"""`ina p4 build`: compile p4src/ with p4c for a pool size P and words per packet K.

Builds are cached by their inputs (the P4 sources, P, K, the target and the compiler), so a
switch or a test that needs a build it already has starts at once.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ina.p4 import toolchain
from ina.switch.config import SwitchConfig

TARGETS = ("bmv2",)
MAX_WORDS = 256  # p4src/each_word.p4 unrolls up to 256 words
PROGRAMS = {"bmv2": "ina_v1model.p4"}


class BuildError(RuntimeError):
    """p4c refused the program; the message holds its diagnostics."""


@dataclass(frozen=True, slots=True)
class Build:
    """A compiled program: the target's pipeline (BMv2 JSON) and its P4Info (text format)."""

    target: str
    words: int
    pool: int
    pipeline: Path
    p4info: Path
    warnings: str


def sources() -> Path:
    """The folder of the P4 sources (p4src/, installed as the package data `ina.p4src`)."""
    return Path(str(resources.files("ina.p4src")))


def check(target: str, words: int, pool: int) -> None:
    """ValueError naming the option to change, for a build p4src/ cannot make."""
    if target not in TARGETS:
        raise ValueError(f"--target must be one of {TARGETS}, got {target!r}")
    if not 1 <= words <= MAX_WORDS:
        raise ValueError(f"--words must be in 1..{MAX_WORDS} for the P4 program, got {words}")
    SwitchConfig(pool=pool, words=words)  # the pool's own rules


def build(words: int, pool: int, target: str = "bmv2", out: Path | None = None) -> Build:
    """Compile (or reuse the cached build of) the program for `target` with K = words, P = pool."""
    check(target, words, pool)
    p4c = toolchain.require("p4c")
    src = sources()
    digest = hashlib.sha256(f"{target} {words} {pool} {p4c}".encode())
    for path in sorted(src.glob("*.p4")):
        digest.update(path.name.encode() + path.read_bytes())
    out = out or _cache() / f"{target}-K{words}-P{pool}-{digest.hexdigest()[:12]}"
    program = src / PROGRAMS[target]
    pipeline, p4info = out / (program.stem + ".json"), out / (program.stem + ".p4info.txtpb")
    warnings_file = out / "p4c.stderr"
    if not (pipeline.exists() and p4info.exists()):
        out.mkdir(parents=True, exist_ok=True)
        command = [p4c, "--target", target, "--arch", "v1model", "--std", "p4-16", f"-DWORDS={words}",
                   f"-DPOOL={pool}", "-I", str(src), "-o", str(out), "--p4runtime-files", str(p4info), str(program)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"p4c failed ({' '.join(command)}):\n{done.stderr or done.stdout}")
        warnings_file.write_text(done.stderr)
    return Build(target, words, pool, pipeline, p4info, warnings_file.read_text() if warnings_file.exists() else "")


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ina" / "p4"
