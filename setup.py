"""Build hook for the optional native THC kernels; all metadata lives in pyproject.toml."""
from setuptools import setup

setup()
