"""`ina p4 build`: compile p4src/ for a target (BMv2 with p4c, Tofino with bf-p4c) for a pool size P
and words per packet K.

Builds are cached by their inputs (the P4 sources, P, K, the target and the compiler, by path, size and
time), so a switch or a test that needs a build it already has starts at once.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ina.p4 import toolchain
from ina.switch.config import SwitchConfig

TARGETS = ("bmv2", "tofino")
TOFINO_WORDS_PER_PASS = 23
"""The words one ingress pass steps on Tofino 1 (ina_tna.p4's INA_WORD_GROUP: a stateful ALU a word, 23 fit
the stages after the slot decision); a larger K takes a word pass for each further group."""
WORD_GROUPS_MAX = 3
"""The most passes a packet's words take (p4src/headers.p4): the TNA parser reaches three groups' words."""
MAX_WORDS = {"bmv2": 256, "tofino": WORD_GROUPS_MAX * TOFINO_WORDS_PER_PASS}
"""p4src/each_word.p4 unrolls up to 256 words; on Tofino 1 the ingress parser reaches three passes' words."""
DEFAULT_WORD_GROUP = {"bmv2": 0, "tofino": TOFINO_WORDS_PER_PASS}
"""The words one pass steps (0: all K). BMv2 steps any K in one pass; built with a word group it runs the
word passes the Tofino program needs, so that the BMv2 tests check them too."""
DEFAULT_WORDS = 64
"""`ina p4 build`'s K: the protocol's 64, on Tofino 1 a pass of 23 words and two word passes (docs/p4.md,
"Word passes")."""
PROGRAMS = {"bmv2": "ina_v1model.p4", "tofino": "ina_tna.p4"}
COMPILERS = {"bmv2": "p4c", "tofino": "bf-p4c"}
ARCHITECTURES = {"bmv2": "v1model", "tofino": "tna"}


class BuildError(RuntimeError):
    """The compiler refused the program; the message holds its diagnostics."""


@dataclass(frozen=True, slots=True)
class TofinoOutputs:
    """What bf-p4c writes for bf_switchd: the pipe's binary and context, and the BfRt schema."""

    binary: Path
    context: Path
    bfrt: Path
    resources: Path


@dataclass(frozen=True, slots=True)
class Build:
    """A compiled program: the target's pipeline (BMv2 JSON, or Tofino's tofino.bin), its P4Info
    (text format), the compiler's warnings, and on Tofino the rest of bf-p4c's outputs."""

    target: str
    words: int
    pool: int
    pipeline: Path
    p4info: Path
    warnings: str
    tofino: TofinoOutputs | None = None
    word_group: int = 0
    """The words a pass steps (INA_WORD_GROUP); 0, or K or more: every word in one pass."""

    @property
    def pass_words(self) -> int:
        """The words one pass steps: word i of slot s is word i mod this of the group i div this, whose
        cells are s + group * P (p4src/word_passes.p4)."""
        return self.word_group if 0 < self.word_group < self.words else self.words


def sources() -> Path:
    """The folder of the P4 sources (p4src/, installed as the package data `ina.p4src`)."""
    return Path(str(resources.files("ina.p4src")))


def check(target: str, words: int, pool: int, word_group: int = 0) -> None:
    """ValueError naming the option to change, for a build p4src/ cannot make."""
    if target not in TARGETS:
        raise ValueError(f"--target must be one of {TARGETS}, got {target!r}")
    if not 1 <= words <= MAX_WORDS[target]:
        raise ValueError(f"--words must be in 1..{MAX_WORDS[target]} for the {target} program, got {words}")
    if word_group < 0:
        raise ValueError(f"--word-group must be at least 1 (or 0: every word in one pass), got {word_group}")
    if 0 < word_group < words:
        groups = -(-words // word_group)
        if groups > WORD_GROUPS_MAX:
            raise ValueError(f"--words {words} needs more than {WORD_GROUPS_MAX} passes of {word_group} words: "
                             f"raise --word-group to at least {-(-words // WORD_GROUPS_MAX)}")  # fmt: skip
        if target == "bmv2" and words % word_group:
            raise ValueError(f"on bmv2 --words must be a multiple of --word-group (each group is one field), got {words} and {word_group}")
        if pool * groups > 65536:
            raise ValueError(f"--pool {pool} times {groups} word passes is more than the 65536 cells a word register indexes")
    SwitchConfig(pool=pool, words=words)  # the pool's own rules


def _run_compiler(command: list[str], timeout: float | None) -> subprocess.CompletedProcess:
    """Run the compiler driver in a process group of its own, so that a timeout stops the compiler
    it started too, not only the driver."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise BuildError(f"{command[0]} did not finish within {timeout:g} s ({' '.join(command)})") from None
    code = process.returncode
    if code in (128 + signal.SIGSEGV, 256 - signal.SIGSEGV, -signal.SIGSEGV):  # the driver passes a crash on as 245
        stderr += f"\n{command[0]} crashed (SIGSEGV)"
    return subprocess.CompletedProcess(command, code, stdout, stderr)


def build(words: int, pool: int, target: str = "bmv2", out: Path | None = None, timeout: float | None = None,
          word_group: int | None = None) -> Build:
    """Compile (or reuse the cached build of) the program for `target` with K = words, P = pool and
    `word_group` words a pass (None: the target's own, DEFAULT_WORD_GROUP); BuildError if the compiler
    refuses it or runs past `timeout` seconds."""
    group = DEFAULT_WORD_GROUP[target] if word_group is None else word_group
    check(target, words, pool, group)
    compiler = toolchain.require(COMPILERS[target])
    src = sources()
    installed = os.stat(compiler)  # a compiler installed anew at the same path builds anew
    digest = hashlib.sha256(f"{target} {words} {pool} {group} {compiler} {installed.st_size} {installed.st_mtime_ns}".encode())
    for path in sorted(src.glob("*.p4")):
        digest.update(path.name.encode() + path.read_bytes())
    out = out or _cache() / f"{target}-K{words}-P{pool}-G{group}-{digest.hexdigest()[:12]}"
    program = src / PROGRAMS[target]
    p4info = out / (program.stem + ".p4info.txtpb")
    outputs = _outputs(target, out, program)
    warnings_file = out / "compiler.stderr"
    if not (all(path.exists() for path in outputs) and p4info.exists()):
        out.mkdir(parents=True, exist_ok=True)
        command = [compiler, "--target", target, "--arch", ARCHITECTURES[target], "--std", "p4-16", f"-DWORDS={words}",
                   f"-DPOOL={pool}", "-I", str(src), "-o", str(out), "--p4runtime-files", str(p4info), str(program)]  # fmt: skip
        if group:
            command.insert(-1, f"-DINA_WORD_GROUP={group}")
        if target == "tofino":
            command.insert(1, "-g")  # the resource logs (pipe/logs), whose summary `ina p4 build` prints
        done = _run_compiler(command, timeout)
        if done.returncode != 0:
            raise BuildError(f"{COMPILERS[target]} failed ({' '.join(command)}):\n{done.stderr or done.stdout}")
        missing = [str(path) for path in outputs if not path.exists()]
        if missing:
            raise BuildError(f"{COMPILERS[target]} exited 0 but did not write {', '.join(missing)}:\n{done.stderr or done.stdout}")
        warnings_file.write_text(done.stderr)
    warnings = warnings_file.read_text() if warnings_file.exists() else ""
    if target == "tofino":
        return Build(target, words, pool, outputs[0], p4info, warnings, TofinoOutputs(*outputs), group)
    return Build(target, words, pool, outputs[0], p4info, warnings, word_group=group)


def _outputs(target: str, out: Path, program: Path) -> list[Path]:
    """The files a successful build leaves in `out`: the pipeline first."""
    if target == "tofino":
        pipe = out / "pipe"
        return [pipe / "tofino.bin", pipe / "context.json", out / "bfrt.json", pipe / "logs" / "resources.json"]
    return [out / (program.stem + ".json")]


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ina" / "p4"
