"""The emulated fused ops as ``torch.ops.npu`` operators, registered as torch_npu's native library registers them.

On an NPU, torch_npu's C++ defines the ``npu::`` operators from its build-time schemas, puts each op's kernel at
PrivateUse1 and its derivative at AutogradPrivateUse1, and its Python adds Meta kernels (it refuses
CompositeImplicitAutograd ones); ``torch_npu.npu_rms_norm is torch.ops.npu.npu_rms_norm``. Both layers of the
emulated NPU register the emulator's ops the same way, through :func:`register_kernels`:

* PrivateUse1: the emulated op (device and argument checks as the NPU's, then the math); it never records
  autograd;
* AutogradPrivateUse1: the op's derivative (:mod:`._derivatives`): the op runs below autograd and its backward
  calls the op's grad op, so FakeTensor and torch.compile see single nodes with Meta shapes and read no device data;
* Meta (``meta=True``, the builtin layer; the real layer keeps torch_npu's own).

The ops and their kernels are read from their declarations (:mod:`._registry`). The builtin layer defines the
schemas itself, from the schema strings of each release line's wheel shipped in ``npu_schemas.json``
(:func:`release_schemas`); the real layer defines them from the prepared wheel.
"""
from __future__ import annotations

import functools
import json
import re
import threading
from pathlib import Path
from collections.abc import Iterable

import torch

from . import _derivatives, _registry, _release

__all__ = ["FUSED_OPS", "BACKWARD_OPS", "OPS", "PUBLIC_OPS", "release_schemas", "define_schemas", "register_kernels",
           "install"]

#: the fused ops of torch_npu the emulator implements
FUSED_OPS = tuple(spec.name for spec in _registry.specs() if not spec.internal)
#: the backward ops torch_npu keeps for its derivatives
BACKWARD_OPS = tuple(spec.name for spec in _registry.specs() if spec.internal)
#: every op :func:`register_kernels` has kernels for
OPS = FUSED_OPS + BACKWARD_OPS
#: the ops torch_npu lists in its ``__all__`` (its public-function list, the same in every release line)
PUBLIC_OPS = tuple(spec.name for spec in _registry.specs() if spec.public)

SCHEMA_FILE = Path(__file__).with_name("npu_schemas.json")
NAMESPACE = "npu"

_lock = threading.Lock()
_builtin: list = []  # the builtin layer's libraries, kept alive: a Library's registrations go with it


def _line(text: str) -> tuple[int, int]:
    major, minor = (int(x) for x in re.findall(r"\d+", text)[:2])
    return major, minor


@functools.cache
def _shipped() -> dict:
    return json.loads(SCHEMA_FILE.read_text())["lines"]


def release_schemas(line: tuple[int, int] | None = None) -> list[str]:
    """The schema strings of :data:`OPS` in torch_npu's release line ``line`` (default: the emulated one).

    A line newer than the shipped data takes the newest shipped line, an older one the oldest.
    """
    shipped = _shipped()
    wanted = _release.EMULATED_LINE if line is None else tuple(line)
    lines = sorted(shipped, key=_line)
    older = [key for key in lines if _line(key) <= wanted]
    return list(shipped[older[-1] if older else lines[0]]["schemas"])


def _defined(qualname: str, overload: str = "") -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(qualname, overload)
    except RuntimeError:
        return False
    return True


def define_schemas(lib_def: torch.library.Library, schemas: Iterable[str]) -> list[str]:
    """Define each schema string (``"name(Tensor self, ...) -> Tensor"``, overload names allowed) in ``lib_def``'s
    namespace; a name the namespace already defines is left as it is. Returns the names defined."""
    defined = []
    for schema in schemas:
        name, _, overload = schema.split("(", 1)[0].partition(".")
        if _defined(f"{lib_def.ns}::{name}", overload):
            continue
        lib_def.define(schema)
        defined.append(f"{name}.{overload}" if overload else name)
    return defined


def _device_kernel(fn):
    """The PrivateUse1 kernel: the emulated op, recording no autograd (its derivative is the autograd kernel's)."""
    @functools.wraps(fn)
    def kernel(*args, **kwargs):
        with torch.no_grad():
            return fn(*args, **kwargs)

    return kernel


def register_kernels(lib: torch.library.Library, *, meta: bool = False) -> list[str]:
    """Register the emulator's kernels in ``lib`` (a ``Library("npu", "IMPL")``, kept alive by the caller) for
    every op of :data:`OPS` whose schema its namespace already defines: PrivateUse1 and AutogradPrivateUse1, and
    Meta with ``meta=True`` (for a layer that has no Meta kernels of its own). Returns the ops registered."""
    registered = []
    for spec in _registry.specs():
        if not _defined(f"{lib.ns}::{spec.name}"):
            continue
        op = getattr(getattr(torch.ops, lib.ns), spec.name).default
        lib.impl(spec.name, _device_kernel(spec.kernel), "PrivateUse1")
        lib.impl(spec.name, _derivatives.autograd_kernel(op, spec.derivative, spec.grad_op), "AutogradPrivateUse1",
                 with_keyset=True)
        if meta:
            lib.impl(spec.name, spec.meta, "Meta")
        registered.append(spec.name)
    return registered


def install() -> list[str]:
    """The builtin layer's ``torch.ops.npu``: the emulated release's schemas of :data:`OPS` and the emulator's
    kernels, Meta included (idempotent). Returns the op names."""
    with _lock:
        if not _builtin:
            definitions = torch.library.Library(NAMESPACE, "FRAGMENT")
            define_schemas(definitions, release_schemas())
            kernels = torch.library.Library(NAMESPACE, "IMPL")
            register_kernels(kernels, meta=True)
            _builtin.extend([definitions, kernels])
    return [name for name in OPS if _defined(f"{NAMESPACE}::{name}")]
