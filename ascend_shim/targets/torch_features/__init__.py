"""CUDA features with no NPU path: torch.compile's backend, Triton kernels, fp8 GEMMs, cuDNN/TF32 flags.

Nothing is silently ignored: each is translated to its NPU counterpart, given an exact fallback that the
report records, or stopped with an error that names the feature, the patch and what to do.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


REMOVE = "never: CUDA code sets CUDA's switches and asks about CUDA's build; the NPU's switches are its own"
features = PatchSet(
    id="torch_features", title="torch.compile backend, Triton, fp8, cuDNN/TF32 flags on the NPU",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim backend",
    implementation=f"{__name__}.impl"
)


features.patch("torch:compile", fidelity="fallback", covers=("torch.compile",),
               why="inductor's default GPU code generation needs CUDA (or triton-ascend, with mixed results); "
                   "torch.compile(model) would fail at the first call.",
               what="a request for inductor compiles with ASCEND_SHIM_COMPILE_BACKEND (default 'eager': dynamo "
                    "capture, eager kernels) or, with 'none', returns the function uncompiled; inductor-only "
                    "mode/options are reported as not applicable. Other backends are left alone.",
               remove_when="https://github.com/Ascend/pytorch/tree/9e73e708ab9350d203475609f36f8a43f6a0c2ab/torch_npu/"
                           "_inductor: inductor's NPU code generation (triton-ascend) does not yet compile "
                           "CUDA-targeted models reliably",
               factory="compile_with_npu_backend")


#: the first torch_npu release that registers torch._scaled_mm (and _scaled_mm_v2) for the NPU
SCALED_MM_SINCE = "2.13"


features.patch("torch:_scaled_mm", kind="replace", fidelity="unsupported", covers=("fp8", "torch._scaled_mm"),
               why="fp8 GEMMs (torch._scaled_mm) have no NPU kernel before torch_npu 2.13; the call would fail "
                   "deep in the dispatcher.",
               what=f"with torch_npu < {SCALED_MM_SINCE}: raises UnsupportedOnNPUError naming fp8, unless a project "
                    "patch set turns the feature off first (e.g. nanochat --fp8). From torch_npu "
                    f"{SCALED_MM_SINCE} on (which registers it for the NPU) the patch is not needed and torch's own "
                    "function runs.",
               remove_when=f"torch_npu>={SCALED_MM_SINCE}: torch_npu {SCALED_MM_SINCE} registers torch._scaled_mm "
                           "for the NPU", factory="scaled_mm")


features.patch("triton.runtime.jit:JITFunction.run", fidelity="unsupported", covers=("triton.jit",),
               why="a user @triton.jit kernel is compiled for CUDA GPUs; on an NPU it needs triton-ascend and "
                   "usually a rewrite.",
               what="launching a Triton kernel raises UnsupportedOnNPUError naming the kernel, instead of a "
                    "driver error.",
               remove_when="https://github.com/triton-lang/triton-ascend: CUDA-targeted Triton kernels need "
                           "triton-ascend and usually a rewrite to run on the NPU", factory="triton_run")


features.patch("torch:Tensor.contiguous", kind="replace", fidelity="fallback",
               why="the NPU computes in the contiguous format: torch_npu's contiguous() refuses "
                   "memory_format=torch.channels_last / channels_last_3d (ERR01007) for a tensor not already in "
                   "it, which CUDA training scripts ask for to speed up convolutions (a --channels-last option).",
               what="such a call on an npu tensor returns the contiguous-format copy (the same values, in the "
                    "layout the NPU computes in), reported at the call site; every other call is torch's.",
               remove_when="never: torch_npu's contiguous() supports the contiguous memory format only",
               factory="contiguous_without_channels_last")


features.patch("torch.backends.cuda:matmul", kind="replace", covers=("torch.backends.cuda.matmul.allow_tf32",),
               why="allow_tf32 trades matmul precision for speed on CUDA; the NPU's switch is HF32.",
               what="setting allow_tf32 (or fp32_precision 'tf32'/'ieee') also sets torch.npu.matmul.allow_hf32 "
                    "(reported); other attributes pass through.",
               remove_when=REMOVE, factory="matmul_flags")


features.patch("torch:set_float32_matmul_precision",
               why="set_float32_matmul_precision('high'/'medium') is the modern way to turn TF32 matmuls on on "
                   "CUDA; torch_npu does not map it, so the NPU kept full fp32 matmuls without a word.",
               what="'high' and 'medium' also set torch.npu.matmul.allow_hf32 = True, 'highest' sets it False "
                    "(reported); torch's own setting is made as well.",
               remove_when="https://github.com/Ascend/pytorch/blob/9e73e708ab9350d203475609f36f8a43f6a0c2ab/torch_npu/"
                           "npu/npu_config.py: torch.npu.matmul.allow_hf32 does not follow "
                           "torch.set_float32_matmul_precision",
               factory="float32_matmul_precision")


features.patch("torch.backends.cuda:is_built", covers=("torch.backends.cuda.is_built",),
               why="code that gates its GPU path on `torch.backends.cuda.is_built() and torch.cuda.is_available()` "
                   "took the CPU while CUDA was reported available: torch_npu builds of torch have no CUDA.",
               what="caller-aware, like torch.cuda.is_available: code that is told CUDA is available is also told "
                    "torch was built with it (True); torch and NPU-native libraries get the real answer.",
               remove_when=REMOVE, factory="cuda_is_built")


#: what torch.backends.cudnn.version() answers to CUDA code: the cuDNN of torch 2.4's CUDA 12 wheels (9.1.0), the
#: oldest torch this shim supports, so version gates written for the supported torch range pass and nothing newer
#: is claimed
CUDNN_VERSION = 90100


features.patch("torch.backends.cudnn:m.is_available", kind="wrap", covers=("torch.backends.cudnn.is_available",),
               why="code turns on cudnn.benchmark/deterministic or picks its convolution path only if cuDNN is "
                   "available; on the NPU the convolution and normalization kernels are the NPU's own, and the "
                   "cuDNN switches are followed there (torch_features.cudnn_flags).",
               what="caller-aware, like torch.cuda.is_available: code that is told CUDA is available is told cuDNN "
                    "is too (True); torch and NPU-native libraries get the real answer.",
               remove_when=REMOVE, factory="cudnn_is_available")


features.patch("torch.backends.cudnn:m.version", kind="wrap", fidelity="neutral",
               covers=("torch.backends.cudnn.version",),
               why="code that found cuDNN available compares cudnn.version() with a release (None fails that "
                   "comparison); no cuDNN runs on the NPU.",
               what=f"caller-aware: CUDA code gets {CUDNN_VERSION} (cuDNN 9.1.0, that of torch 2.4's CUDA wheels, "
                    "the oldest torch supported), meaning the NPU's own kernels stand in: gates written for the "
                    "supported torch range pass, nothing newer is claimed (reported); torch and NPU-native "
                    "libraries get the real answer.",
               remove_when=REMOVE, factory="cudnn_version")


features.patch("torch.backends.cudnn:allow_tf32", kind="call", covers=("torch.backends.cudnn",),
               why="cuDNN's TF32 switches decide whether CUDA convolutions run in reduced precision; the NPU's "
                   "switch is torch.npu.conv.allow_hf32 (on by default, like cuDNN's). cudnn.benchmark and "
                   "deterministic have no cuDNN to act on.",
               what="setting torch.backends.cudnn.allow_tf32 or fp32_precision sets torch.npu.conv.allow_hf32 to "
                    "whether torch would now run CUDA convolutions in TF32 (reported); benchmark and "
                    "deterministic are reported as having no NPU effect. Works with torch's flag descriptors "
                    "(ContextProp) as with properties.",
               remove_when=REMOVE, factory="cudnn_flags")


features.patch("torch.backends.cudnn:conv", kind="call", covers=("torch.backends.cudnn.conv.fp32_precision",),
               why="torch.backends.cudnn.conv.fp32_precision = 'tf32'/'ieee' is torch's newer switch for TF32 "
                   "convolutions; the NPU's is torch.npu.conv.allow_hf32.",
               what="setting it also sets torch.npu.conv.allow_hf32 to whether torch would now run CUDA "
                    "convolutions in TF32 (reported); reading passes through.",
               remove_when=REMOVE, factory="cudnn_conv_precision")


features.patch("torch.backends.cudnn:m.set_flags", covers=("torch.backends.cudnn.flags",),
               why="`with torch.backends.cudnn.flags(...)` sets cuDNN's TF32 switch for a block (and back after "
                   "it) through set_flags, not through the module attributes.",
               what="after set_flags (so inside and after each flags() block) torch.npu.conv.allow_hf32 follows "
                    "whether torch would run CUDA convolutions in TF32 (reported).",
               remove_when=REMOVE, factory="cudnn_set_flags")


features.patch("torch._dynamo.trace_rules:SKIP_DIRS", kind="call", id="torch_features.dynamo_emulated_npu",
               why="the emulated NPU is Python over a native extension; dynamo traced into it and stopped at an "
                   "extension function with a warning naming the emulator's internals (torch.cuda.manual_seed() "
                   "or memory_allocated() in a compiled function).",
               what="dynamo does not trace into the emulator: such a call breaks the graph silently, as a call into "
                    "torch_npu's C extension breaks it on the NPU.",
               remove_when="never: the emulated NPU is Python that dynamo must not trace into",
               factory="dynamo_emulated_npu")


features.patch("torch.jit._builtins:_find_builtin",
               why="TorchScript compiles a call to torch.arange(...) etc. only if the callee is in its builtin "
                   "table, which torch builds at import, before the shim wraps the factories; @torch.jit.script "
                   "functions calling a wrapped factory then fail to compile (realhf's "
                   "compute_varlen_position_indices, at import).",
               what="a shim wrapper of a torch builtin is compiled as that builtin (its __wrapped__ original); "
                    "inside scripted code device arguments are therefore not translated (tensor.device is "
                    "already npu; a literal 'cuda' there is not).",
               remove_when=REMOVE, factory="jit_find_builtin")


PATCH_SETS = [features]
