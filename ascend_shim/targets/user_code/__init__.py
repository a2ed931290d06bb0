"""CUDA code -- the user's, and every library that is not NPU-native -- sees CUDA devices as CUDA.

``x.device.type == "cuda"``, ``str(dev).startswith("cuda")``, ``"cuda" in str(device)``,
``backend == "nccl"`` ... are False on an NPU (tensors report ``npu``, the backend is ``hccl``) and make
unmodified code silently take its CPU branch, or reject the device it was handed (Lightning: "Device should be
GPU, got npu:0 instead"). The rule of :mod:`ascend_shim.callers` says who believes in CUDA: the user's code and
every library that is not NPU-native (not torch, torch_npu, nor a library a patch set declares native), with
``ASCEND_SHIM_USER_PACKAGES`` / ``ASCEND_SHIM_NATIVE_PACKAGES`` overriding it both ways. The same rule decides
who is told CUDA is available and who reads ``x.type()`` as ``torch.cuda.*``. Comparisons in such modules are
rewritten at load time (``ASCEND_SHIM_USER_ROOTS`` narrows which of the files outside the environment are the
user's); each rewritten site is reported. In a process activated at start-up (a launcher's worker, a
``subprocess`` python) the main script is run the way ``ascend-shim run`` runs it, so it is rewritten too.
``ASCEND_SHIM_REWRITE=0`` turns the rewrite off.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


user_code = PatchSet(id="user_code", title="CUDA code (the user's, non-native libraries') sees the NPU as CUDA",
                     implementation=f"{__name__}.impl")


user_code.patch("process:cuda-code-rule", kind="call",
                why="the answer to 'is this CUDA code?' must be the same for is_available(), device comparisons "
                    "and x.type(), and the user must be able to correct it for a library.",
                what="ASCEND_SHIM_USER_PACKAGES makes packages CUDA code even where a patch set declares them "
                     "NPU-native, ASCEND_SHIM_NATIVE_PACKAGES makes packages NPU-native (most specific name wins); "
                     "every caller-aware answer and the rewrite follow.",
                remove_when="never: CUDA code compares devices and backends with cuda and nccl, which the NPU's "
                            "never equal", factory="cuda_code_rule")


user_code.patch("process:user-code-comparisons", kind="call",
                covers=("device-compare:cuda", "device-compare:nccl"),
                why="`x.device.type == 'cuda'`-style checks are the main reason unmodified code silently takes a "
                    "CPU branch on an NPU, and why CUDA-first libraries (Lightning, megatron-core) reject the "
                    "npu device they were handed.",
                what="an import hook rewrites such comparisons in the user's modules and main script and in every "
                     "library that is not NPU-native (in every process of a job, launcher workers included) into "
                     "value comparisons that also accept the NPU counterpart (npu, npu:N, hccl); line numbers are "
                     "kept, sites and libraries are reported; rewritten bytecode is cached per user.",
                remove_when="never: CUDA code compares devices and backends with cuda and nccl, which the NPU's "
                            "never equal", factory="rewrite_user_code")


user_code.patch("warnings:_showwarnmsg", kind="replace",
                why="a warning torch raises from C inside a translated call (sparse invariant checks, "
                    "deprecations) would name the shim's wrapper instead of the user's line.",
                what="a warning located in the shim is shown (and recorded by catch_warnings) at the first line "
                     "outside it, the code that made the call; every other warning is shown as it is.",
                remove_when="never: warnings from C name the innermost Python frame, which is the wrapper",
                factory="warnings_at_callers_line")


PATCH_SETS = [user_code]
