"""The emulated fused ops as ``torch.ops.npu`` operators, registered as torch_npu's native library registers them.

On an NPU, torch_npu's C++ defines the ``npu::`` operators from its build-time schemas, puts each op's kernel at
PrivateUse1 and its derivative at AutogradPrivateUse1, and its Python adds Meta kernels (it refuses
CompositeImplicitAutograd ones); ``torch_npu.npu_rms_norm is torch.ops.npu.npu_rms_norm``. Both layers of the
emulated NPU register the emulator's ops the same way, through :func:`register_kernels`:

* PrivateUse1: the emulated op (device and argument checks as the NPU's, then the math); it never records
  autograd;
* AutogradPrivateUse1: the derivative (:mod:`._derivatives`): the op runs below autograd and its backward calls
  the backward op (``npu_rms_norm_backward``, ``npu_fusion_attention_grad`` ...), so FakeTensor and
  torch.compile see single nodes with Meta shapes and read no device data;
* Meta (``meta=True``, the builtin layer; the real layer keeps torch_npu's own): :mod:`._meta`.

The builtin layer defines the schemas itself, from the schema strings of each release line's wheel shipped in
``npu_schemas.json`` (:func:`release_schemas`); the real layer defines them from the prepared wheel.
"""
from __future__ import annotations

import functools
import json
import re
import threading
from pathlib import Path
from collections.abc import Iterable

import torch

from . import _release

__all__ = ["FUSED_OPS", "BACKWARD_OPS", "OPS", "release_schemas", "define_schemas", "register_kernels", "install"]

#: the fused ops of torch_npu the emulator implements
FUSED_OPS = ("npu_fusion_attention", "npu_fusion_attention_grad", "npu_prompt_flash_attention",
             "npu_incre_flash_attention", "npu_fused_infer_attention_score", "npu_rotary_mul", "npu_rms_norm",
             "npu_swiglu", "npu_geglu")
#: the backward ops their derivatives call
BACKWARD_OPS = ("npu_rms_norm_backward", "npu_rotary_mul_backward", "npu_swiglu_backward", "npu_geglu_grad")
#: every op :func:`register_kernels` has kernels for
OPS = FUSED_OPS + BACKWARD_OPS

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


def _compute_kernels() -> dict:
    from . import fusion_attention, infer_attention, norm_act, rotary

    return {
        "npu_fusion_attention": fusion_attention.npu_fusion_attention,
        "npu_fusion_attention_grad": fusion_attention.npu_fusion_attention_grad,
        "npu_prompt_flash_attention": infer_attention.npu_prompt_flash_attention,
        "npu_incre_flash_attention": infer_attention.npu_incre_flash_attention,
        "npu_fused_infer_attention_score": infer_attention.npu_fused_infer_attention_score,
        "npu_rotary_mul": rotary.npu_rotary_mul,
        "npu_rotary_mul_backward": rotary.npu_rotary_mul_backward,
        "npu_rms_norm": norm_act.npu_rms_norm,
        "npu_rms_norm_backward": norm_act.npu_rms_norm_backward,
        "npu_swiglu": norm_act.npu_swiglu,
        "npu_swiglu_backward": norm_act.npu_swiglu_backward,
        "npu_geglu": norm_act.npu_geglu,
        "npu_geglu_grad": norm_act.npu_geglu_grad,
    }


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
    from . import _derivatives, _meta

    compute = _compute_kernels()
    registered = []
    for name in OPS:
        if not _defined(f"{lib.ns}::{name}"):
            continue
        op = getattr(getattr(torch.ops, lib.ns), name).default
        lib.impl(name, _device_kernel(compute[name]), "PrivateUse1")
        lib.impl(name, _derivatives.autograd_kernel(op), "AutogradPrivateUse1", with_keyset=True)
        if meta:
            lib.impl(name, _meta.KERNELS[name], "Meta")
        registered.append(name)
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
