"""Build and load the emulator's C++ extension (``csrc/*.cpp``).

The first use compiles the sources with ``torch.utils.cpp_extension.load`` into a cache directory keyed by the
torch version, the Python ABI and a hash of the sources and flags. Later processes (every rank under torchrun)
import the cached ``.so`` directly, with no ninja run. Concurrent first builds serialize on a file lock.

Environment:
    ASCEND_SHIM_SIM_BUILD_DIR      root of the build cache (default ``~/.cache/ascend_shim/sim``)
    ASCEND_SHIM_SIM_BUILD_VERBOSE  set to 1 to see the compiler output
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import sys
import sysconfig
import threading
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

from ..config import setting as _setting

MODULE_NAME = "_ascend_shim_sim"
SOURCES = ("device.cpp", "kernels.cpp", "nn.cpp", "autocast.cpp", "module.cpp")
HEADERS = ("sim.h",)
CFLAGS = ("-O2",)
_BUILD_RECIPE = "1"  # bump when the build logic changes in a way the sources do not show

_lock = threading.Lock()
_module: ModuleType | None = None


def _csrc() -> Path:
    return Path(__file__).with_name("csrc")


def cache_key() -> str:
    """Identifies one build: torch version, Python ABI, recipe, flags and source contents."""
    digest = hashlib.sha256()
    for part in (torch.__version__, sysconfig.get_config_var("EXT_SUFFIX") or sys.version, _BUILD_RECIPE,
                 " ".join(CFLAGS)):
        digest.update(part.encode() + b"\0")
    for name in sorted(SOURCES + HEADERS):
        digest.update(name.encode() + b"\0" + (_csrc() / name).read_bytes() + b"\0")
    torch_tag = torch.__version__.replace("+", "_")
    return f"torch{torch_tag}-{digest.hexdigest()[:16]}"


def cache_root() -> Path:
    root = _setting("sim_build_dir")
    return Path(root) if root else Path.home() / ".cache" / "ascend_shim" / "sim"


def build_dir() -> Path:
    return cache_root() / cache_key()


def _import_built(so_path: Path, name: str = MODULE_NAME) -> ModuleType:
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
                return build(directory)
    return _import_built(so_path, name)


def _build(directory: Path) -> ModuleType:
    from torch.utils import cpp_extension

    # torch's own baton file is left behind if a build is killed; our flock is held, so it is stale.
    (directory / "lock").unlink(missing_ok=True)
    return cpp_extension.load(
        name=MODULE_NAME,
        sources=[str(_csrc() / name) for name in SOURCES],
        extra_cflags=list(CFLAGS),
        build_directory=str(directory),
        verbose=_setting("sim_build_verbose"),
    )


def load() -> ModuleType:
    """The native module, built on first use and cached on disk."""
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            _module = load_or_build(MODULE_NAME, build_dir(), lambda directory: _build(directory))
        return _module
