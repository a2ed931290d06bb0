"""The NPU's operator coverage on the emulated device: which operators would leave the NPU.

torch_npu has NPU kernels for the aten operators its build-time yaml lists (``npu_native_functions*.yaml`` in the
wheel, about 620 operators in 2.13) and registers a fallback for every other operator reaching the NPU: the
operator runs on the CPU, and its first call prints, once per operator, through c10's logger on stderr::

    CAUTION: The operator 'aten::cholesky' is not currently supported on the NPU backend and will fall back to run
    on the CPU. This may have performance implications.

(only on rank 0 or without ``RANK``; ``TORCH_NPU_WARNING_DISABLE=1`` silences it). With
``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` every such call raises a ``RuntimeError`` instead. Composite operators that
torch decomposes before they reach the device (``torch.unique`` into ``_unique2``, ``fmax`` into ``fmax.out``)
are judged by what reaches it.

The emulated device does the same on either ``torch_npu`` layer, and tells each operator that falls back, at the
call site of its first use, to whoever listens (:mod:`.events`, kind ``cpu_fallback``; the shim lists it in the
migration report): a dry run under ``--simulate`` tells which operators will leave the NPU. The check runs in the
emulator's C++ fallback (``csrc/op_coverage.cpp``); an operator with an NPU kernel costs a lookup in a lock-free
table, and Python is asked once per operator without one.

The builtin layer reads the kernel list shipped for torch's release line (``data/npu_kernels_<line>.txt``,
generated from the paired wheel by ``tools/npu_op_coverage.py``); the real layer passes the list read from the
prepared wheel to :func:`install_op_coverage`. Without a list for the running torch, nothing is checked.
"""
from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path
from collections.abc import Iterable

from . import _extension, events

__all__ = ["install_op_coverage", "install_builtin", "uninstall", "fallbacks", "shipped", "data_file", "reported_name"]

_DATA = Path(__file__).with_name("data")
_installed_from: str | None = None
_kernels: frozenset[str] = frozenset()  # qualified names ("aten::add.Tensor") of the installed list


def data_file(line: str) -> Path:
    """The kernel list shipped for torch_npu release line ``line`` ("2.13")."""
    return _DATA / f"npu_kernels_{line}.txt"


def shipped(line: str) -> tuple[list[str], list[str]] | None:
    """(NPU kernels, NPU kernels the emulator runs as a decomposition that reaches operators without one) of the
    list shipped for ``line``, or None when none is shipped."""
    try:
        text = data_file(line).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in text.splitlines():
        line_ = raw.split("#", 1)[0].strip()
        if not line_:
            continue
        if line_.startswith("[") and line_.endswith("]"):
            current = sections.setdefault(line_[1:-1], [])
        elif current is not None:
            current.append(line_)
    return sections.get("kernels", []), sections.get("decomposed", [])


def install_op_coverage(kernel_names: Iterable[str], *, decomposed: Iterable[str] | None = None,
                        release: str | None = None) -> list[str]:
    """Make the emulated NPU treat ``kernel_names`` (aten operator names with their overload, "add.Tensor", as in
    torch_npu's yaml) as the operators with NPU kernels, and every other operator reaching it as torch_npu's CPU
    fallback does. Forgets earlier warnings.

    ``decomposed``: the NPU kernels the emulator runs as torch's decomposition whose sub-operators must stay
    silent (default: the list shipped for ``release``, the torch_npu release line, default torch's). Returns the
    operators that got such a scope.
    """
    global _installed_from, _kernels
    from . import install_device

    install_device()
    kernels = sorted({_qualified(str(name)) for name in kernel_names})
    _kernels = frozenset(kernels)
    if decomposed is None:
        data = shipped(release or _torch_line())
        decomposed = data[1] if data else []
    scoped = sorted({_qualified(name) for name in decomposed} & _kernels)
    registered = _extension.load().op_coverage_install(kernels, scoped, _resolve)
    _installed_from = "explicit"
    return registered


def install_builtin() -> bool:
    """The builtin layer's coverage: the list shipped for torch's release line (idempotent). False when none is
    shipped (nothing is checked then)."""
    global _installed_from
    line = _torch_line()
    if _installed_from == line:
        return True
    data = shipped(line)
    if data is None:
        events.emit("no_kernel_list", release=line)
        return False
    install_op_coverage(data[0], decomposed=data[1], release=line)
    _installed_from = line
    return True


def uninstall() -> None:
    """Stop checking (the device keeps running every operator)."""
    global _installed_from
    _extension.load().op_coverage_uninstall()
    _installed_from = None


def fallbacks() -> list[str]:
    """The operators that fell back to the CPU so far, in order of first use (as the NPU names them)."""
    return list(_extension.load().op_coverage_fallbacks())


def _qualified(name: str) -> str:
    return name if "::" in name else f"aten::{name}"


def _torch_line() -> str:
    from . import torch_base_version

    return ".".join(torch_base_version().split(".")[:2])


@functools.lru_cache(maxsize=1)
def _structured_delegates() -> dict[str, str]:
    """torch's structured operators: functional or in-place overload -> the ``.out`` overload that computes it
    (``fmax`` -> ``fmax.out``), from the operator declarations torch ships (torchgen)."""
    try:
        import torchgen
    except ImportError:
        return {}
    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return {}
    delegates, current = {}, None
    for m in re.finditer(r"^- func: ([\w.]+)\(|^  structured_delegate: ([\w.]+)", text, re.M):
        if m.group(1):
            current = m.group(1)
        elif current:
            delegates[current] = m.group(2)
    return delegates


def reported_name(op: str, composite: bool) -> str:
    """The name the NPU reports for operator ``op`` ("aten::fmax") reaching the emulator without an NPU kernel;
    "" when it does not fall back there.

    ``composite``: the emulator runs torch's CPU kernel where the NPU runs the operator's composite kernel. For a
    structured operator that kernel calls the ``.out`` overload (what reaches the NPU's fallback, unless it has an
    NPU kernel: the caller checks); other composites decompose into common operators (counted as NPU kernels)."""
    if not composite:
        return op
    namespace, _, name = op.rpartition("::")
    delegate = _structured_delegates().get(name) if namespace == "aten" else None
    return f"aten::{delegate}" if delegate else ""


def _resolve(op: str, composite: bool, refused: bool) -> str:
    """Called by the C++ check the first time ``op`` reaches the emulated NPU without an NPU kernel: the name the
    NPU reports ("" when that one has an NPU kernel), told to the listeners with the call site."""
    reported = reported_name(op, composite)
    if not reported or reported in _kernels or reported.startswith("npu::"):
        return ""
    if not events.listening():
        return reported
    frame, site = None, None
    try:
        frame = sys._getframe(1)  # the Python code that called the operator
    except ValueError:  # an autograd engine thread runs no Python code
        import torch

        site = ("<backward>" if torch._C._current_graph_task_id() != -1 else "<native thread>", 0)
    events.emit("cpu_fallback", op=reported, via=op, refused=refused, frame=frame, site=site)
    return reported
