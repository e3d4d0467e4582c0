"""Packaging: the codec maps to ina.compression and every subpackage ships in a wheel."""

import importlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_codec_is_importable_as_ina_compression():
    module = importlib.import_module("ina.compression")
    assert module.__name__ == "ina.compression"
    assert Path(module.__file__).parent == ROOT / "compression"


def test_every_subpackage_is_listed_for_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {"ina"} | {f"ina.{init.parent.name}" for init in (ROOT / "ina").glob("*/__init__.py")} | {"ina.compression", "ina.p4src"}
    assert listed == on_disk


def ina_imports(package: str) -> set[str]:
    """The ina subpackages that the modules of `package` import (read with ast: nothing is executed)."""
    import ast

    found = set()
    for path in (ROOT / "ina" / package).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found |= {".".join(name.split(".")[:2]) for name in names if name.startswith("ina.")}
    return found


def test_the_protocol_is_the_ground_floor_and_the_control_plane_stays_below_the_network_layer():
    """ina/net imports the control plane (jobs, registration), so the control plane must not import it
    back; what both need of the protocol (a RESULT group's address check) lives in ina/protocol."""
    assert ina_imports("protocol") == {"ina.protocol"}
    assert ina_imports("control") == {"ina.control", "ina.protocol"}
    assert "ina.control" in ina_imports("net")
