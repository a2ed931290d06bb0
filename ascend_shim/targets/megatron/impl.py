"""megatron's fused-kernel build, which needs nvcc, answered on the NPU."""
from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ascend_shim.context import PatchContext


def fused_kernels_load(ctx: PatchContext) -> Callable[..., Any]:
    orig, report = ctx.original, ctx.report
    module = ctx.owner

    @functools.wraps(orig)
    def load(args):
        from torch.utils import cpp_extension

        home = cpp_extension.CUDA_HOME
        if home is not None and os.path.exists(os.path.join(home, "bin", "nvcc")):
            return orig(args)
        module._create_build_dir(os.path.join(os.path.dirname(os.path.abspath(module.__file__)), "build"))
        report.translated("megatron.legacy.fused_kernels.load", "no CUDA toolkit: nvcc version query skipped "
                                                                "(nothing is compiled in this Megatron)")
        return None

    return load
