"""Choosing and bringing up the device backend: the real ``torch_npu`` or the emulated NPU (``sim``).

``torch_npu`` is imported only when the ``npu`` backend is selected (it needs Huawei's CANN libraries), and
only once torch itself is imported, so that activating the shim costs nothing in a process that never
imports torch.
"""
from __future__ import annotations

import importlib
import importlib.machinery

from .errors import ConfigError


def resolve(backend: str) -> str:
    """``auto`` -> ``npu`` when torch_npu is importable; otherwise a clear error, never a CPU fallback."""
    if backend != "auto":
        return backend
    # look on sys.path only: the emulator's ``torch_npu`` alias (if the sim was brought up) does not count
    if importlib.machinery.PathFinder.find_spec("torch_npu") is not None:
        return "npu"
    raise ConfigError(
        "ASCEND_SHIM_BACKEND=auto: torch_npu is not installed, so there is no NPU to run on. Install the "
        "torch-npu build matching your torch (pip install 'ascend-shim[npu]', with CANN sourced), or run on "
        "the simulated NPU with `--simulate` / ASCEND_SHIM_BACKEND=sim.")


def bring_up(backend: str) -> None:
    """Make ``torch.npu`` exist: import the real torch_npu, or install the emulator."""
    if backend == "npu":
        importlib.import_module("torch_npu")
    elif backend == "sim":
        from . import sim

        sim.install()
    else:  # resolve() has already turned "auto" into a concrete backend
        raise ConfigError(f"unknown backend {backend!r}")
