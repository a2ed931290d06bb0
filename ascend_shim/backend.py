"""Choosing and bringing up the device backend: the real ``torch_npu`` or the emulated NPU (``sim``).

``torch_npu`` is imported only when the ``npu`` backend is selected (it needs Huawei's CANN libraries), and
only once torch itself is imported, so that activating the shim costs nothing in a process that never
imports torch.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

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


class _TorchFirst(importlib.abc.MetaPathFinder):
    """Under ``sim``, ``import torch_npu`` before ``import torch`` (Ray workers, vllm-style plugins) imports torch
    first: that brings the emulator up, which registers the ``torch_npu`` alias that then answers the import."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch_npu" or "torch" in sys.modules:
            return None
        from . import activation

        if activation.current_backend() != "sim":
            return None
        importlib.import_module("torch")
        from . import virtual

        return virtual._finder.find_spec(fullname, path, target)


_torch_first = _TorchFirst()


def prepare(backend: str) -> None:
    """At activation, before torch is imported: under ``sim``, let ``import torch_npu`` come first."""
    if backend == "sim" and _torch_first not in sys.meta_path:
        sys.meta_path.append(_torch_first)


def unprepare() -> None:
    if _torch_first in sys.meta_path:
        sys.meta_path.remove(_torch_first)
