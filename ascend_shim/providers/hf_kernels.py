"""The Hugging Face ``kernels`` hub's FlashAttention-3 repositories, answered locally by the NPU FA3 provider.

``get_kernel("<repo>")`` of an FA3 repository returns :mod:`ascend_shim.providers.flash_attn.fa3` (the FA3
``flash_attn_interface`` API on NPU fused attention) without any download; ``has_kernel`` answers whether that
provider imports. Other repositories go to the real ``kernels`` functions untouched.
"""
from __future__ import annotations

import functools
import importlib
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext

#: hub repositories whose kernel is the FA3 ``flash_attn_interface`` API (what nanochat and others load)
FA3_REPOS = ("varunneal/flash-attention-3", "kernels-community/flash-attn3")
#: the module that implements the FA3 functions on the NPU (the flash_attn provider)
FA3_PROVIDER = "ascend_shim.providers.flash_attn.fa3"


def load_fa3() -> types.ModuleType:
    """The NPU FA3 module (``flash_attn_func``, ``flash_attn_with_kvcache``, ...); ImportError when absent."""
    return importlib.import_module(FA3_PROVIDER)


def fa3_kernel(repo_id: str) -> types.ModuleType:
    """What ``get_kernel(repo_id)`` returns for an FA3 repository: a module exposing the FA3 functions at top
    level (as ``kernels-community/flash-attn3`` does) and as ``.flash_attn_interface`` (as both repos do)."""
    fa3 = load_fa3()
    kernel = types.ModuleType(f"ascend_shim_kernels.{repo_id.replace('/', '__').replace('-', '_')}",
                              f"{repo_id} answered by {FA3_PROVIDER} (NPU fused attention; no download)")
    for name in dir(fa3):
        if not name.startswith("_"):
            setattr(kernel, name, getattr(fa3, name))
    vars(kernel).update(flash_attn_interface=fa3, __ascend_shim_repo__=repo_id)
    return kernel


def is_fa3(repo_id: Any) -> bool:
    return isinstance(repo_id, str) and repo_id.strip().rstrip("/") in FA3_REPOS


def get_kernel(ctx: PatchContext) -> Callable:
    """``kernels.get_kernel`` answering the FA3 repositories with the NPU FA3 provider (reported)."""
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def get_kernel(repo_id, *args, **kwargs):
        if not is_fa3(repo_id):
            return orig(repo_id, *args, **kwargs)
        try:
            kernel = fa3_kernel(repo_id)
        except ImportError as exc:
            report.unsupported("kernels.get_kernel", f"{repo_id}: NPU FA3 provider unavailable ({exc})")
            raise ImportError(f"{repo_id}: ascend_shim answers this FA3 kernel locally, but its NPU provider "
                              f"{FA3_PROVIDER} cannot be imported ({exc}); nothing was downloaded") from exc
        report.translated("kernels.get_kernel", f"{repo_id} -> {FA3_PROVIDER} (no download)")
        return kernel

    return get_kernel


def has_kernel(ctx: PatchContext) -> Callable:
    """``kernels.has_kernel`` answering the FA3 repositories by whether the NPU FA3 provider imports."""
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def has_kernel(repo_id, *args, **kwargs):
        if not is_fa3(repo_id):
            return orig(repo_id, *args, **kwargs)
        try:
            load_fa3()
        except ImportError:
            report.fallback("kernels.has_kernel", f"{repo_id}: NPU FA3 provider unavailable -> False")
            return False
        report.translated("kernels.has_kernel", f"{repo_id} -> True ({FA3_PROVIDER}, no hub query)")
        return True

    return has_kernel
