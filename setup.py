"""Packaging glue: the top-level ``patches/`` folder is installed as ``ascend_shim.patches``; the optional C speedups."""
from setuptools import Extension, find_packages, setup

core = find_packages(include=["ascend_shim", "ascend_shim.*"])
patch_packages = ["ascend_shim.patches"] + [f"ascend_shim.patches.{p}" for p in find_packages("patches")]
# optional: without a C compiler the install goes on and the pure-Python wrappers are used
speedups = Extension("ascend_shim._speedups", ["ascend_shim/_speedups.c"], optional=True)
setup(packages=core + patch_packages, package_dir={"ascend_shim.patches": "patches"}, ext_modules=[speedups])
