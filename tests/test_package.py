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
