"""Choosing and bringing up the device backend: the real ``torch_npu`` or the emulated NPU (``sim``).

``torch_npu`` is imported only when the ``npu`` backend is selected (it needs Huawei's CANN libraries), and
only once torch itself is imported, so that activating the shim costs nothing in a process that never
imports torch.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from typing import TYPE_CHECKING

from . import import_system
from .errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path


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


def resolve_layer(backend: str, layer: str) -> str:
    """The ``torch_npu`` Python over the emulated NPU (``sim`` only): ``real`` (Huawei's package, prepared by
    ``fetch-torch-npu``) or ``builtin``; ``auto`` takes ``real`` when it is prepared for the installed torch."""
    return choose_layer(backend, layer)[0]


def choose_layer(backend: str, layer: str) -> tuple[str, tuple[Path, str, str] | None]:
    """:func:`resolve_layer`'s answer with what the one lookup of the prepared package found (``(where, kind,
    why)`` as ``prepared_state`` gives it; None where no lookup was needed), for :func:`prepare` and the report."""
    if backend != "sim" or layer == "builtin":
        return ("builtin" if backend == "sim" else ""), None
    from .sim.real_layer import prepared_state

    state = prepared_state()
    _, kind, why = state
    if not kind:
        return "real", state
    if layer == "real":
        raise ConfigError(f"ASCEND_SHIM_SIM_LAYER=real: {why}; run `python -m ascend_shim fetch-torch-npu` (or "
                          f"`--wheel PATH` on an offline machine)")
    return "builtin", state


def patch_backend(backend: str, layer: str) -> str:
    """The backend the patch sets see: on the real layer the shim runs its ``npu`` code, as on hardware."""
    return "npu" if layer == "real" else backend


def bring_up(backend: str, layer: str = "") -> None:
    """Make ``torch.npu`` exist: import the real torch_npu (on an NPU, or over the emulated device), or install
    the emulator's own layer. On the emulated NPU the shim listens to the device's events first."""
    if backend == "npu" or layer == "real":
        if layer == "real":  # checked once torch_npu has finished importing (a program may import it first)
            from . import emulator_listener, hooks, sim

            emulator_listener.listen()
            hooks.when_imported("torch_npu", lambda module: sim.check_autograd_engine(module.npu))
        importlib.import_module("torch_npu")
    elif backend == "sim":
        from . import emulator_listener, sim

        emulator_listener.listen()
        sim.install()
    else:  # resolve() has already turned "auto" into a concrete backend
        raise ConfigError(f"unknown backend {backend!r}")


class _TorchFirst(importlib.abc.MetaPathFinder):
    """Under ``sim``, ``import torch_npu`` before ``import torch`` (Ray workers, vllm-style plugins) imports torch
    first: that brings the emulator up, whose package then answers the import.

    Nothing is imported in ``find_spec``: the import system calls finders holding its global lock, so importing
    there could deadlock against other importing threads. The loader imports, under ``torch_npu``'s own lock."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch_npu" or "torch" in sys.modules:
            return None
        from . import activation

        if activation.current_backend() != "sim":
            return None
        spec = importlib.machinery.ModuleSpec(fullname, _TorchThenEmulator(), is_package=True)
        spec.submodule_search_locations = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "sim",
                                                        "torch_npu")]
        return spec


class _TorchThenEmulator(importlib.abc.Loader):
    def create_module(self, spec):
        importlib.import_module("torch")  # activation brings the emulator up once torch is imported
        return importlib.import_module(f"{__package__}.sim.torch_npu")

    def exec_module(self, module):  # already executed under its real name
        pass


_torch_first = _TorchFirst()


def prepare(backend: str, layer: str = "", prepared: Path | None = None) -> None:
    """At activation, before torch is imported: on the real layer, put Huawei's prepared package (``prepared``, as
    :func:`choose_layer` found it) in front of the emulated device; on the builtin layer, let ``import torch_npu``
    come first."""
    if backend == "sim":  # a build cache the emulator can never use stops the run here, in one line
        from .build_cache import check_location

        check_location()
    if layer == "real":
        from .sim import real_layer

        prepared = prepared or real_layer.find_prepared()
        if prepared is None:  # it was when the layer was chosen; removed since
            raise ConfigError("ASCEND_SHIM_SIM_LAYER=real: Huawei's torch_npu is no longer prepared; run "
                              "`python -m ascend_shim fetch-torch-npu`")
        real_layer.enable(prepared)
    elif backend == "sim":
        import_system.install("torch_first", _torch_first)


def unprepare() -> None:
    """At deactivation: no finder of the shim's is left, and the emulator's own torch_npu layer goes (the device
    stays registered, as torch requires)."""
    import_system.uninstall("torch_first")
    if "ascend_shim.sim" in sys.modules:
        sys.modules["ascend_shim.sim"].uninstall()
    if "ascend_shim.sim.real_layer" in sys.modules:
        sys.modules["ascend_shim.sim.real_layer"].disable()
