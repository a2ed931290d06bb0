"""Build and load the emulator's C++ extensions (sources under ``csrc/``).

Two extensions: :data:`SIM`, the PrivateUse1 device (``csrc/*.cpp``), and :data:`HCCL`, the ``hccl``
process-group backend (``csrc/hccl/``). The first use compiles an extension with
``torch.utils.cpp_extension.load`` (which needs ``ninja``) into a cache directory keyed by the torch version,
the Python ABI and a hash of the sources and flags. Later processes (every rank under torchrun) import the cached
``.so`` directly, with no ninja run. What may be loaded from the cache, and how a build gets there, is
:mod:`ascend_shim.build_cache`'s rule.

Environment:
    ASCEND_SHIM_SIM_BUILD_DIR      root of the build cache (default ``~/.cache/ascend_shim/sim``)
    ASCEND_SHIM_SIM_BUILD_VERBOSE  set to 1 to see the compiler output
    ASCEND_SHIM_SIM_BUILD_TIMEOUT  seconds to wait for another process's build (default 1200)
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import sys
import sysconfig
import threading
from pathlib import Path
from types import ModuleType
from collections.abc import Mapping

import torch

from ..config import setting as _setting
from ..build_cache import _import_built, cache_root, load_or_build  # noqa: F401  (entry points of the cache)

_BUILD_RECIPE = "1"  # bump when the build logic changes in a way the sources do not show


@dataclasses.dataclass(frozen=True)
class Extension:
    """One C++ extension: its module name, its sources and headers (relative to ``csrc/``) and compiler flags."""

    name: str
    sources: tuple[str, ...]
    headers: tuple[str, ...] = ()
    cflags: tuple[str, ...] = ("-O2",)
    key_prefix: str = ""  # tells the cache directories of different extensions apart


SIM = Extension("_ascend_shim_sim", ("device.cpp", "kernels.cpp", "nn.cpp", "autocast.cpp", "op_coverage.cpp",
                                    "ipc.cpp", "module.cpp"), headers=("sim.h",))
HCCL = Extension("_ascend_shim_sim_hccl", ("hccl/process_group_hccl.cpp",), cflags=("-O1",), key_prefix="hccl-")

_modules: dict[str, ModuleType] = {}
_locks = {ext.name: threading.Lock() for ext in (SIM, HCCL)}  # one each: a long hccl build must not block SIM


def _csrc() -> Path:
    return Path(__file__).with_name("csrc")


def cache_key(ext: Extension = SIM) -> str:
    """Identifies one build: torch version, Python ABI, recipe, flags and source contents."""
    digest = hashlib.sha256()
    for part in (torch.__version__, sysconfig.get_config_var("EXT_SUFFIX") or sys.version, _BUILD_RECIPE,
                 " ".join(ext.cflags)):
        digest.update(part.encode() + b"\0")
    for name in sorted(ext.sources + ext.headers):
        digest.update(name.encode() + b"\0" + (_csrc() / name).read_bytes() + b"\0")
    torch_tag = torch.__version__.replace("+", "_")
    return f"{ext.key_prefix}torch{torch_tag}-{digest.hexdigest()[:16]}"


def build_dir(ext: Extension = SIM, environ: Mapping[str, str] | None = None) -> Path:
    return cache_root(environ) / cache_key(ext)


def _ninja_dir() -> str | None:
    """Where ``ninja`` is, if not on PATH: the ``ninja`` wheel (the ``sim`` extra) puts it in the environment's
    ``bin`` directory, which is not on PATH when that environment's python runs without being activated."""
    if shutil.which("ninja"):
        return None
    try:
        import ninja

        bin_dir = getattr(ninja, "BIN_DIR", None)
    except ImportError:
        bin_dir = None
    if not bin_dir or not shutil.which("ninja", path=bin_dir):
        from ..errors import ShimError

        raise ShimError("the simulated NPU is compiled on first use, which needs ninja and a C++ compiler; ninja "
                        "is not installed. Install it with: pip install 'ascend-shim[sim]' (or: pip install ninja)")
    return bin_dir


def _build(ext: Extension, directory: Path, verbose: bool) -> ModuleType:
    from torch.utils import cpp_extension

    ninja_dir, path = _ninja_dir(), os.environ.get("PATH")
    if ninja_dir:  # torch runs `ninja` from PATH
        os.environ["PATH"] = ninja_dir + os.pathsep + (path or "")
    try:
        return cpp_extension.load(
            name=ext.name,
            sources=[str(_csrc() / name) for name in ext.sources],
            extra_cflags=list(ext.cflags),
            build_directory=str(directory),
            verbose=verbose,
        )
    finally:
        if ninja_dir:
            if path is None:
                os.environ.pop("PATH", None)
            else:
                os.environ["PATH"] = path


def load(ext: Extension = SIM, verbose: bool = False) -> ModuleType:
    """The native module of ``ext``, built on first use and cached on disk."""
    try:  # the hit path: the emulator's Python ops call this per tensor
        return _modules[ext.name]
    except KeyError:
        pass
    with _locks[ext.name]:
        if ext.name not in _modules:
            verbose = verbose or _setting("sim_build_verbose")
            _modules[ext.name] = load_or_build(ext.name, build_dir(ext),
                                               lambda directory: _build(ext, directory, verbose))
        return _modules[ext.name]
