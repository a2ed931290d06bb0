"""Triton-based libraries on the NPU: liger-kernel's Ascend kernels need triton-ascend, the Triton for Ascend NPUs.

liger-kernel (>= 0.6.5) picks its kernels from the device: on an NPU it imports its Ascend path (``from
triton.language.math import tanh``, kernels tuned for the NPU), which only triton-ascend provides. With the CUDA/ROCm
Triton from PyPI, which ``pip install liger-kernel`` brings, that import ends in ``ImportError: cannot import name
'tanh' from 'triton.language.math'``. Where triton-ascend is missing, the user gets one line instead: liger-kernel,
the Triton it found, and the two ways on (install triton-ascend, or run without Liger). Nothing is computed
differently: with triton-ascend, liger-kernel runs its own NPU path untouched.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ascend_shim.errors import UnsupportedOnNPUError
from ascend_shim.targets.triton import TRITON_ASCEND

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext


WITHOUT_LIGER = ("or run without Liger: use_liger_kernel=False in transformers' TrainingArguments and TRL's configs, "
                 "no apply_liger_kernel_to_*() / AutoLigerKernelForCausalLM (the model's own PyTorch modules run on "
                 "the NPU; ASCEND_SHIM_ENABLE=fast_ops swaps in NPU fused RMSNorm/rotary/SwiGLU).")


class LigerNeedsTritonAscend(UnsupportedOnNPUError, ImportError):
    """liger-kernel on the NPU without triton-ascend. Still an ImportError, raised where liger-kernel's own import
    would fail: code that imports Liger optionally (``try: import liger_kernel... except ImportError``) goes on
    without it, as it would without liger-kernel installed."""


def triton_ascend_version() -> str | None:
    from ascend_shim.versions import installed_version

    return installed_version(TRITON_ASCEND)


def liger_advice() -> tuple[str, str]:
    """(feature, advice) of the one line: liger-kernel's version and the Triton installed, then what to do."""
    from ascend_shim.versions import installed_version

    liger, triton = installed_version("liger-kernel"), installed_version("triton")
    found = f"with triton {triton} (the CUDA/ROCm Triton)" if triton else "without Triton"
    feature = f"liger-kernel {liger or '?'} {found}"
    advice = ("Liger's NPU kernels are written for triton-ascend: install it (pip uninstall -y triton && pip install "
              f"triton-ascend), {WITHOUT_LIGER}")
    return feature, advice


def liger_is_npu_available(ctx: PatchContext) -> Callable:
    """``liger_kernel.utils.is_npu_available``: where it answers True (liger-kernel is about to take its NPU path)
    and triton-ascend is not installed, the one line (reported) instead of liger-kernel's ImportError."""
    orig, report, pid = ctx.original, ctx.report, ctx.patch.id

    @functools.wraps(orig)
    def is_npu_available(*args, **kwargs):
        answer = orig(*args, **kwargs)
        if answer and triton_ascend_version() is None:
            feature, advice = liger_advice()
            report.unsupported(feature, advice)
            raise LigerNeedsTritonAscend(feature, pid, advice)
        return answer

    return is_npu_available
