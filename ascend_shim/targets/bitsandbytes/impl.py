"""bitsandbytes on the NPU: which of its kernels run there, and the one-line error where none does.

bitsandbytes (>= 0.48) registers its ops with ``torch.library`` per device type, plus a ``default`` kernel in plain
torch ops that runs on any device (4-bit NF4/FP4, LLM.int8, blockwise quantization, 32-bit optimizer updates);
ops with only a CPU kernel (the 8-bit blockwise optimizer update in 0.50) run there through torch_npu's CPU
fallback. Both compute what bitsandbytes computes on the CPU, exactly; they are slower than a device kernel, which
the report says. An op with neither has no NPU path: the user gets one line instead of a dispatcher error.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ascend_shim.targets._shared.npu_checks import on_npu, unsupported
from ascend_shim.targets.bitsandbytes import NPU_PATH_SINCE

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext


PORTABLE = "bitsandbytes' portable kernels (plain torch ops, or its CPU kernel through torch_npu's CPU fallback): " \
           "exact, slower than a device kernel"


def installed_version() -> str | None:
    from ascend_shim.versions import installed_version

    return installed_version("bitsandbytes")


def has_npu_path(version: str | None = None) -> bool:
    """Does the installed bitsandbytes (or ``version``) have kernels that run on the NPU?"""
    from ascend_shim.versions import satisfies

    version = version or installed_version()
    return version is not None and satisfies(version, f">={NPU_PATH_SINCE}")


def runs_on_npu(op: str) -> bool:
    """Can ``bitsandbytes::<op>`` run on an NPU tensor: a kernel for any device, for the NPU, or for the CPU
    (which torch_npu's CPU fallback reaches)?"""
    import torch

    name = f"bitsandbytes::{op}"
    if not torch._C._dispatch_has_kernel(name):
        return False
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
               for key in ("CompositeExplicitAutograd", "CompositeImplicitAutograd", "PrivateUse1", "CPU"))


def _on_npu_device(tensor) -> bool:
    device = getattr(tensor, "device", None)
    return device is not None and device.type == "npu"


def optimizer_update_step(ctx: PatchContext) -> Callable:
    """Optimizer1State/2State.update_step: the kernel it is about to call exists for the NPU, else one clear line."""
    orig, report, pid = ctx.original, ctx.report, ctx.patch.id
    checked: set[str] = set()

    @functools.wraps(orig)
    def update_step(self, group, p, gindex, pindex):
        if _on_npu_device(p):
            import torch

            wide = self.state[p]["state1"].dtype == torch.float32
            op = "optimizer_update_32bit" if wide else "optimizer_update_8bit_blockwise"
            if op not in checked:
                name = type(self).__name__
                if not runs_on_npu(op):
                    raise unsupported(report, pid, f"bitsandbytes {installed_version()}: {name} ({op})",
                                      "this version has no NPU or CPU kernel for it; upgrade bitsandbytes "
                                      "(0.50 runs it) or use torch.optim.AdamW.")
                report.fallback(f"bitsandbytes {name}", PORTABLE)
                checked.add(op)
        return orig(self, group, p, gindex, pindex)

    return update_step


def state_buffer(ctx: PatchContext) -> Callable:
    """Optimizer8bit.get_state_buffer: a paged buffer (CUDA unified memory) is a plain device buffer on the NPU."""
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def get_state_buffer(self, p, dtype=None):
        import torch

        if getattr(self, "is_paged", False) and _on_npu_device(p):
            report.fallback(f"bitsandbytes {type(self).__name__} (paged)",
                            "optimizer state kept on the NPU, not paged (same values; no paging to host memory)")
            return torch.zeros_like(p, dtype=dtype or torch.float32, device=p.device)
        return orig(self, p) if dtype is None else orig(self, p, dtype=dtype)

    return get_state_buffer


def layer_forward(ctx: PatchContext) -> Callable:
    """Linear4bit / Linear8bitLt forward on the NPU: reported once as running the portable kernels."""
    orig, report = ctx.original, ctx.report
    seen: list[bool] = []

    @functools.wraps(orig)
    def forward(self, x, *args, **kwargs):
        if not seen and _on_npu_device(x) and on_npu():
            seen.append(True)
            report.fallback(f"bitsandbytes {type(self).__name__}", PORTABLE)
        return orig(self, x, *args, **kwargs)

    return forward
