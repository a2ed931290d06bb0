"""Packaging glue: the top-level ``patches/`` folder is installed as ``ascend_shim.patches``."""
from setuptools import find_packages, setup

core = find_packages(include=["ascend_shim", "ascend_shim.*"])
patch_packages = ["ascend_shim.patches"] + [f"ascend_shim.patches.{p}" for p in find_packages("patches")]
setup(packages=core + patch_packages, package_dir={"ascend_shim.patches": "patches"})
