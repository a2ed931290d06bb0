"""The Hugging Face ``kernels`` hub: FA3 repositories are answered locally by the NPU FA3 provider.

``kernels.get_kernel("<repo>")`` downloads a compiled CUDA extension from the hub and imports it. On an NPU
machine that is a network round trip for a binary that cannot load. The FlashAttention-3 repositories that
CUDA projects load this way (nanochat: ``get_kernel("varunneal/flash-attention-3").flash_attn_interface``,
``has_kernel("kernels-community/flash-attn3")``) are answered here, without any download, by
``ascend_shim.providers.flash_attn.fa3``: the FA3 ``flash_attn_interface`` API on NPU fused attention.
Other repositories go to the real ``kernels`` functions untouched.
"""
from __future__ import annotations

import functools
import importlib
import types

from ascend_shim.registry import PatchSet

#: hub repositories whose kernel is the FA3 ``flash_attn_interface`` API (what nanochat and others load)
FA3_REPOS = ("varunneal/flash-attention-3", "kernels-community/flash-attn3")
#: the module that implements the FA3 functions on the NPU (the flash_attn provider)
FA3_PROVIDER = "ascend_shim.providers.flash_attn.fa3"

hf_kernels = PatchSet(
    id="hf_kernels", title="kernels hub: FlashAttention-3 repositories answered by the NPU FA3 provider",
    requires={"kernels": ">=0.4"},
    checked_against="kernels 0.17.2 (get_kernel / has_kernel signatures); nanochat @ 92d63d4 as the caller",
)


def load_fa3():
    """The NPU FA3 module (``flash_attn_func``, ``flash_attn_with_kvcache``, ...); ImportError when absent."""
    return importlib.import_module(FA3_PROVIDER)


def fa3_kernel(repo_id: str):
    """What ``get_kernel(repo_id)`` returns for an FA3 repository: a module exposing the FA3 functions at top
    level (as ``kernels-community/flash-attn3`` does) and as ``.flash_attn_interface`` (as both repos do)."""
    fa3 = load_fa3()
    kernel = types.ModuleType(f"ascend_shim_kernels.{repo_id.replace('/', '__').replace('-', '_')}",
                              f"{repo_id} answered by {FA3_PROVIDER} (NPU fused attention; no download)")
    for name in dir(fa3):
        if not name.startswith("_"):
            setattr(kernel, name, getattr(fa3, name))
    kernel.flash_attn_interface = fa3
    kernel.__ascend_shim_repo__ = repo_id
    return kernel


def _is_fa3(repo_id) -> bool:
    return isinstance(repo_id, str) and repo_id.strip().rstrip("/") in FA3_REPOS


@hf_kernels.patch("kernels:get_kernel", covers=("kernels.get_kernel",),
                  why="get_kernel downloads a CUDA build of the kernel from the hub; on an NPU machine it cannot "
                      "load (and offline machines fail at the download).",
                  what="for the FlashAttention-3 repositories (" + ", ".join(FA3_REPOS) + ") returns the NPU FA3 "
                       "provider (bare-tensor returns, window_size=(left, right), in-place kvcache) without "
                       "touching the network; ImportError if the provider is absent. Other repositories: unchanged.",
                  remove_when="the kernels hub publishes NPU builds of FlashAttention-3")
def get_kernel(ctx):
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def get_kernel(repo_id, *args, **kwargs):
        if not _is_fa3(repo_id):
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


@hf_kernels.patch("kernels:has_kernel", covers=("kernels.has_kernel",),
                  why="has_kernel asks the hub whether a build for this machine exists (network; a CUDA answer).",
                  what="for the FlashAttention-3 repositories answers whether the NPU FA3 provider is importable, "
                       "without touching the network. Other repositories: unchanged.",
                  remove_when="the kernels hub publishes NPU builds of FlashAttention-3")
def has_kernel(ctx):
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def has_kernel(repo_id, *args, **kwargs):
        if not _is_fa3(repo_id):
            return orig(repo_id, *args, **kwargs)
        try:
            load_fa3()
        except ImportError:
            report.fallback("kernels.has_kernel", f"{repo_id}: NPU FA3 provider unavailable -> False")
            return False
        report.translated("kernels.has_kernel", f"{repo_id} -> True ({FA3_PROVIDER}, no hub query)")
        return True

    return has_kernel


PATCH_SETS = [hf_kernels]
