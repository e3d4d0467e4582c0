"""`ina p4 tools`: which P4 tools ina would run, where it found them, which version they say they are,
and what each target still lacks. p4lang's tools are installed by hand (packages or a source build),
so this is the one place that says, before a build fails, what a machine has (docs/p4.md, "Tools")."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from ina.p4 import toolchain

VERSION_SECONDS = 30
"""How long a tool may take to print its version (bf-p4c's driver starts Python)."""


@dataclass(frozen=True, slots=True)
class ToolState:
    """One tool as ina finds it: its path (None: not found), its version line, and the files it lacks."""

    tool: str
    path: str | None
    version: str | None
    lacks: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        return self.path is not None and not self.lacks


def version(path: str) -> str | None:
    """The first line of `path --version` that holds a digit (p4c-bm2-ss prints its name first), or None."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=VERSION_SECONDS)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in (done.stdout + "\n" + done.stderr).splitlines() if line.strip()]
    return next((line for line in lines if any(c.isdigit() for c in line)), lines[0] if lines else None)


def survey() -> list[ToolState]:
    """Every tool ina runs (toolchain.TOOLS), as found now."""
    states = []
    for tool in toolchain.TOOLS:
        path = toolchain.find(tool)
        lacking = tuple(toolchain.lacks(tool, path)) if path else ()
        states.append(ToolState(tool, path, version(path) if path else None, lacking))
    return states


def target_gaps(states: list[ToolState], target: str) -> list[str]:
    """What `target` lacks: its tools that are not usable, and the pip packages of its controller."""
    found = {state.tool: state for state in states}
    tools = [tool if found[tool].path is None else f"{tool} (found, but lacks files)"
             for tool in toolchain.TARGETS[target] if not found[tool].usable]  # fmt: skip
    return tools + [f"{package} (the 'p4' extra)" for package in toolchain.missing_modules(target)]


def render(states: list[ToolState]) -> str:
    """The report: a line a tool (with what a found one lacks), then a line a target and for p4testgen."""
    width = max(len(tool) for tool in toolchain.TOOLS)
    lines = []
    for state in states:
        if state.path is None:
            lines.append(f"{state.tool:<{width}}  missing: looked in {toolchain.looked_in(state.tool)}")
            continue
        lines.append(f"{state.tool:<{width}}  {state.path}  {state.version or '(no version)'}")
        if state.lacks:
            lines.append(f"{'':<{width}}  lacks {', '.join(state.lacks)}")
    lines.append("")
    for target in toolchain.TARGETS:
        gaps = target_gaps(states, target)
        needs = " + ".join(toolchain.TARGETS[target])
        lines.append(f"{target}: ready ({needs})" if not gaps else f"{target}: missing {', '.join(gaps)}")
    for tool, purpose in toolchain.OPTIONAL.items():
        ready = any(state.tool == tool and state.usable for state in states)
        lines.append(f"{tool}: {'found' if ready else 'missing'} (optional: {purpose})")
    for state in states:
        if not state.usable:
            lines.append(f"  to get {state.tool}: {toolchain.INSTALL_HINTS[state.tool]}, or set ${toolchain.TOOLS[state.tool]} to its path")
    return "\n".join(lines)
