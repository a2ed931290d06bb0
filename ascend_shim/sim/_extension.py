"""Build and load the emulator's C++ extensions (sources under ``csrc/``).

Two extensions: :data:`SIM`, the PrivateUse1 device (``csrc/*.cpp``), and :data:`HCCL`, the ``hccl``
process-group backend (``csrc/hccl/``). The first use compiles an extension with
``torch.utils.cpp_extension.load`` (which needs ``ninja``) into a cache directory keyed by the torch version,
the Python ABI and a hash of the sources and flags. Later processes (every rank under torchrun) import the cached
``.so`` directly, with no ninja run. Concurrent first builds serialize on a file lock.

Environment:
    ASCEND_SHIM_SIM_BUILD_DIR      root of the build cache (default ``~/.cache/ascend_shim/sim``)
    ASCEND_SHIM_SIM_BUILD_VERBOSE  set to 1 to see the compiler output
"""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import threading
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

from ..config import setting as _setting

_BUILD_RECIPE = "1"  # bump when the build logic changes in a way the sources do not show


@dataclasses.dataclass(frozen=True)
class Extension:
    """One C++ extension: its module name, its sources and headers (relative to ``csrc/``) and compiler flags."""

    name: str
    sources: tuple[str, ...]
    headers: tuple[str, ...] = ()
    cflags: tuple[str, ...] = ("-O2",)
    key_prefix: str = ""  # tells the cache directories of different extensions apart


SIM = Extension("_ascend_shim_sim", ("device.cpp", "kernels.cpp", "nn.cpp", "autocast.cpp", "op_coverage.cpp", "ipc.cpp", "module.cpp"),
                headers=("sim.h",))
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


def cache_root() -> Path:
    root = _setting("sim_build_dir")
    return Path(root) if root else Path.home() / ".cache" / "ascend_shim" / "sim"


def build_dir(ext: Extension = SIM) -> Path:
    return cache_root() / cache_key(ext)


def _import_built(so_path: Path, name: str = SIM.name) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, so_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def load_or_build(name: str, directory: Path, build: Callable[[Path], ModuleType]) -> ModuleType:
    """The extension ``name``: imported from ``directory`` when built there already, else built by
    ``build(directory)``. Concurrent first builds (every rank under torchrun) serialize on a file lock."""
    if name in sys.modules:  # loaded already under another import path
        return sys.modules[name]
    so_path = directory / f"{name}.so"
    if not so_path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory.parent / f"{directory.name}.lock", "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)  # released by the OS even if this process dies
            if not so_path.exists():
                module = build(directory)
                sys.modules[name] = module  # torch's loader does not register it; the op modules look it up
                return module
    return _import_built(so_path, name)


def _ninja_dir() -> str | None:
    """Where ``ninja`` is, if not on PATH: the ``ninja`` wheel (the ``sim`` extra) puts it in the environment's
    ``bin`` directory, which is not on PATH when that environment's python runs without being activated."""
    if shutil.which("ninja"):
        return None
    try:
        import ninja
    except ImportError:
        ninja = None
    bin_dir = getattr(ninja, "BIN_DIR", None)
    if not bin_dir or not shutil.which("ninja", path=bin_dir):
        from ..errors import ShimError

        raise ShimError("the simulated NPU is compiled on first use, which needs ninja and a C++ compiler; ninja "
                        "is not installed. Install it with: pip install 'ascend-shim[sim]' (or: pip install ninja)")
    return bin_dir


def _build(ext: Extension, directory: Path, verbose: bool) -> ModuleType:
    from torch.utils import cpp_extension

    # torch's own baton file is left behind if a build is killed; our flock is held, so it is stale.
    (directory / "lock").unlink(missing_ok=True)
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
