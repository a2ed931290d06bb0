"""The Hugging Face ``kernels`` hub on the NPU: FlashAttention-3 repositories answered locally by the NPU FA3
provider; other repositories through kernels' own NPU path, or one line where a repository has no NPU build.

``get_kernel("<repo>")`` of an FA3 repository returns :mod:`ascend_shim.targets.flash_attn.fa3` (the FA3
``flash_attn_interface`` API on NPU fused attention) without any download; ``has_kernel`` answers whether that
provider imports. Other repositories go to the real ``kernels`` functions, which pick a build variant for the
machine themselves: on the NPU its CANN builds (``torch-npu``, ``torch<XY>-cxx11-cann<XY>-...``, from torch_npu's
CANN version). Where a repository has none, kernels raises a FileNotFoundError with a page listing every variant it
rejected; on the NPU that becomes one line naming the repository, the builds it has and what to do (still a
FileNotFoundError: callers that fall back when kernels finds no build, as transformers does, still fall back).
"""
from __future__ import annotations

import functools
import importlib
import re
import types
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

from ascend_shim.errors import UnsupportedOnNPUError
from ascend_shim.targets.hf_kernels import FA3_REPOS

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext


#: the module that implements the FA3 functions on the NPU (the flash_attn provider)
FA3_PROVIDER = "ascend_shim.targets.flash_attn.fa3"


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


#: how kernels (0.17) says that a repository has no build variant for this machine (other messages pass through)
NO_VARIANT = "Cannot find a build variant for this system"


#: the builds a repository has, named in the one line (the rest counted)
SHOWN_BUILDS = 6


class NoNPUBuild(UnsupportedOnNPUError, FileNotFoundError):
    """A kernels-hub repository without a build for the NPU. Still the FileNotFoundError kernels raises there:
    code that falls back when kernels finds no build (transformers' lazy kernel loading) still falls back."""


def no_npu_build(repo_id: str, message: str) -> tuple[str, str] | None:
    """(feature, advice) when kernels' ``message`` says it found no build variant of ``repo_id`` for the NPU; None
    for other file errors (an offline cache miss, a missing variant directory)."""
    if not message.startswith(NO_VARIANT):
        return None
    trace = message.partition("\n\n")[2].splitlines()
    builds = [line.split(":", 1)[0].split(" ", 1)[0] for line in trace if line.strip()]
    if len(builds) > SHOWN_BUILDS:
        builds[SHOWN_BUILDS - 1:] = [f"{len(builds) - SHOWN_BUILDS + 1} more"]
    wanted = re.search(r"selected backend \((cann\d+)\)", message)
    backend = f"CANN builds ({wanted.group(1)} or torch-npu)" if wanted else "CANN builds (torch-npu)"
    feature = f"kernels hub kernel {repo_id!r}"
    advice = (f"kernels found no build of it for the NPU: it has {', '.join(builds) or 'no builds'}, and no {backend}. "
              "Run the model's PyTorch path (transformers: leave use_kernels off), or use a kernel repository with a "
              f"CANN build (or LOCAL_KERNELS={repo_id}=<path to one>).")
    return feature, advice


def get_kernel(ctx: PatchContext) -> Callable:
    """``kernels.get_kernel`` answering the FA3 repositories with the NPU FA3 provider (reported); other
    repositories through kernels itself, with one line on the NPU where a repository has no NPU build."""
    orig, report, pid = ctx.original, ctx.report, ctx.patch.id

    @functools.wraps(orig)
    def get_kernel(repo_id, *args, **kwargs):
        if not is_fa3(repo_id):
            try:
                return orig(repo_id, *args, **kwargs)
            except FileNotFoundError as exc:
                from ascend_shim.targets._shared.npu_checks import on_npu

                found = no_npu_build(str(repo_id), str(exc)) if kwargs.get("backend") in (None, "cann") else None
                if found is None or not on_npu():
                    raise
                report.unsupported(*found)
                raise NoNPUBuild(found[0], pid, found[1]) from None
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
