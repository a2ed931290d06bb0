"""Triton-based libraries on the NPU: liger-kernel sees the real device and takes its own NPU path (triton-ascend).

liger-kernel picks its kernels from the device (``infer_device()``: CUDA first, then the NPU) and, on an NPU, imports
its Ascend kernels, written for triton-ascend (the Triton for Ascend NPUs, which installs the ``triton`` package).
Told that CUDA is available, as CUDA code is, it would run its CUDA kernels on the NPU; seeing the NPU with the
CUDA/ROCm Triton from PyPI (what ``pip install liger-kernel`` brings), its import ends in ``ImportError: cannot
import name 'tanh' from 'triton.language.math'``. There the user gets one line naming liger-kernel, the Triton found
and what to do. A user's own ``@triton.jit`` kernel launched on the NPU stops with one line too (the
torch_features set's ``triton.runtime.jit:JITFunction.run``).
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


#: the first liger-kernel release with an NPU path (``liger_kernel.utils.is_npu_available``, the
#: ``triton.language.math`` imports on the NPU): read in the 0.6.4 and 0.6.5 wheels
LIGER_NPU_SINCE = "0.6.5"
#: the distribution of the Triton for Ascend NPUs (it installs the ``triton`` package)
TRITON_ASCEND = "triton-ascend"
liger_kernel = PatchSet(
    native=("liger_kernel",),
    native_why="liger-kernel chooses its kernels from the device (infer_device(): cuda before npu); told that CUDA "
               "is available it would select its CUDA Triton kernels on the NPU instead of its Ascend ones.",
    id="liger_kernel", title="liger-kernel: its own NPU path (triton-ascend); one line where triton-ascend is missing",
    requires={"liger-kernel": f">={LIGER_NPU_SINCE}"},
    checked_against="liger-kernel 0.8.5 with triton 3.9.0 (torch 2.13.0 CPU + sim backend, both layers); the 0.6.4 "
                    "and 0.6.5 wheels read for their NPU path", implementation=f"{__name__}.impl"
)


liger_kernel.patch(
    "liger_kernel.utils:is_npu_available", id="liger_kernel.triton_ascend", fidelity="unsupported",
    covers=("liger_kernel",),
    why="on an NPU liger-kernel imports its Ascend kernels (triton.language.math.tanh/rsqrt), which only "
        f"{TRITON_ASCEND} has: with the CUDA/ROCm Triton its import ends in 'ImportError: cannot import name 'tanh' "
        "from 'triton.language.math'', which names neither the NPU nor triton-ascend.",
    what=f"where liger-kernel finds the NPU and {TRITON_ASCEND} is not installed, raises UnsupportedOnNPUError (an "
         "ImportError too, where liger-kernel's import would fail) naming liger-kernel, the Triton found and what to "
         f"do: install {TRITON_ASCEND}, or use_liger_kernel=False. With {TRITON_ASCEND}: unchanged.",
    remove_when="https://github.com/linkedin/Liger-Kernel/issues/969: liger-kernel's NPU kernels need triton-ascend, "
                "a separate install that pip install liger-kernel does not bring", factory="liger_is_npu_available")


PATCH_SETS = [liger_kernel]
