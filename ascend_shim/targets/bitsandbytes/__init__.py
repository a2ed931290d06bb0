"""bitsandbytes on the NPU: it picks its kernels from each tensor's device, so it sees the real device.

bitsandbytes registers its ops per device type with ``torch.library`` and, since 0.48, a ``default`` kernel in
plain torch ops that runs on any device. Told that CUDA is available (as CUDA code is), it imports its CUDA
backend, which fails without CUDA (``torch._C._cuda_getCurrentRawStream``) and takes ``import peft`` and
``from transformers import Trainer`` down with it. Seeing the NPU, 4-bit (NF4/FP4) and LLM.int8 layers and the
8-bit optimizers run its portable kernels: exact (what bitsandbytes computes on the CPU for the same algorithm),
slower than a device kernel. Where a version has no kernel for the NPU, the user gets one line.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


#: first version whose 4-bit and int8 ops have a ``default`` (any-device) kernel: checked in the 0.46.0 and
#: 0.48.2 wheels (0.46.0: 4-bit kernels for CPU and CUDA only)
NPU_PATH_SINCE = "0.48"
REMOVE = ("https://github.com/bitsandbytes-foundation/bitsandbytes/pull/1695: bitsandbytes has no Ascend NPU "
          "backend of its own; on the NPU it runs its portable kernels")

bitsandbytes = PatchSet(
    native=("bitsandbytes",),
    native_why="bitsandbytes chooses kernels from each tensor's device; told that CUDA is available it imports its "
               "CUDA backend at import time, which fails without CUDA (and breaks importing peft and transformers' "
               "Trainer).",
    id="bitsandbytes", title="bitsandbytes: its portable kernels on the NPU (4-bit, LLM.int8, 8-bit optimizers)",
    requires={"bitsandbytes": f">={NPU_PATH_SINCE}"},
    checked_against="bitsandbytes 0.50.2 (torch 2.13.0 CPU + sim backend, both layers); 0.46.0 and 0.48.2 "
                    "wheels read for their kernels", implementation=f"{__name__}.impl"
)

for _cls in ("Optimizer1State", "Optimizer2State"):
    bitsandbytes.patch(
        f"bitsandbytes.optim.optimizer:{_cls}.update_step", covers=("bitsandbytes.optim",),
        why="an optimizer update whose op has no kernel for the NPU (no default or CPU kernel in that version) "
            "fails in the dispatcher with a message about dispatch keys.",
        what="on NPU parameters checks once per op that bitsandbytes has a kernel the NPU can run (its default "
             "kernel, or its CPU kernel through torch_npu's CPU fallback); reports the portable-kernel fallback, "
             "or raises UnsupportedOnNPUError naming the optimizer and what to do.",
        remove_when=REMOVE, factory="optimizer_update_step")


bitsandbytes.patch(
    "bitsandbytes.optim.optimizer:Optimizer8bit.get_state_buffer", covers=("bitsandbytes.optim",),
    why="paged optimizers (PagedAdamW, paged_adamw_8bit) keep large states in CUDA unified memory "
        "(cget_managed_ptr), which the NPU build of bitsandbytes does not have.",
    what="on NPU parameters a paged optimizer keeps its state in plain NPU tensors, as bitsandbytes does itself "
         "on the CPU: same values, no paging to host memory (reported as a fallback).",
    remove_when=REMOVE, factory="state_buffer")


for _cls in ("Linear4bit", "Linear8bitLt"):
    bitsandbytes.patch(
        f"bitsandbytes.nn.modules:{_cls}.forward", covers=("bitsandbytes.nn",),
        why="on the NPU bitsandbytes' quantized layers run its portable kernels, which are slower than a device "
            "kernel; the report should say so.",
        what="unchanged computation; the first forward on an NPU tensor is reported as a fallback to bitsandbytes' "
             "portable kernels (exact).",
        remove_when=REMOVE, factory="layer_forward")


PATCH_SETS = [bitsandbytes]
