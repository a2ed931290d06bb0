"""CUDA features with no NPU path: torch.compile's backend, Triton kernels, fp8 GEMMs, cuDNN/TF32 flags.

Nothing is silently ignored: each is translated to its NPU counterpart, given an exact fallback that the
report records, or stopped with an error that names the feature, the patch and what to do.
"""
from __future__ import annotations

import functools
import sys

from ascend_shim.registry import PatchSet

REMOVE = "never while CUDA-targeted code must run unmodified on Ascend"
features = PatchSet(
    id="torch_features", title="torch.compile backend, Triton, fp8, cuDNN/TF32 flags on the NPU",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim backend",
)


@features.patch("torch:compile", fidelity="fallback", covers=("torch.compile",),
                why="inductor's default GPU code generation needs CUDA (or triton-ascend, with mixed results); "
                    "torch.compile(model) would fail at the first call.",
                what="a request for inductor compiles with ASCEND_SHIM_COMPILE_BACKEND (default 'eager': dynamo "
                     "capture, eager kernels) or, with 'none', returns the function uncompiled; inductor-only "
                     "mode/options are reported as not applicable. Other backends are left alone.",
                remove_when="inductor generates NPU code reliably (triton-ascend)")
def compile_(ctx):
    orig, report = ctx.original, ctx.report
    backend_choice = ctx.config.compile_backend

    @functools.wraps(orig)
    def compile(model=None, *args, **kwargs):
        backend = kwargs.get("backend", "inductor")
        if backend != "inductor" or backend_choice == "inductor":
            return orig(model, *args, **kwargs)
        dropped = {k: kwargs.pop(k) for k in ("mode", "options") if kwargs.get(k) is not None}
        detail = f"backend inductor -> {backend_choice}"
        if dropped:
            detail += f" ({', '.join(f'{k}={v!r}' for k, v in dropped.items())} apply to inductor only)"
        report.fallback("torch.compile", detail)
        if backend_choice == "none":
            if model is None:
                return lambda fn: fn
            return model
        kwargs["backend"] = backend_choice
        return orig(model, *args, **kwargs)

    return compile


#: the first torch_npu release that registers torch._scaled_mm (and _scaled_mm_v2) for the NPU
SCALED_MM_SINCE = "2.13"


@features.patch("torch:_scaled_mm", kind="replace", fidelity="unsupported", covers=("fp8", "torch._scaled_mm"),
                why="fp8 GEMMs (torch._scaled_mm) have no NPU kernel before torch_npu 2.13; the call would fail "
                    "deep in the dispatcher.",
                what=f"with torch_npu < {SCALED_MM_SINCE}: raises UnsupportedOnNPUError naming fp8, unless a project "
                     "patch set turns the feature off first (e.g. nanochat --fp8). From torch_npu "
                     f"{SCALED_MM_SINCE} on (which registers it for the NPU) the patch is not needed and torch's own "
                     "function runs.",
                remove_when=f"the supported torch_npu range starts at {SCALED_MM_SINCE}")
def scaled_mm(ctx):
    from ascend_shim.errors import NotNeeded, UnsupportedOnNPUError
    from ascend_shim.versions import installed_version, satisfies

    version = installed_version("torch_npu")
    if version and satisfies(version, f">={SCALED_MM_SINCE}"):
        raise NotNeeded(f"torch_npu {version} registers torch._scaled_mm for the NPU")
    report, pid = ctx.report, ctx.patch.id

    def _scaled_mm(*args, **kwargs):
        report.unsupported("torch._scaled_mm", "fp8 matmul")
        raise UnsupportedOnNPUError("fp8 matmul (torch._scaled_mm)", pid,
                                    f"torch_npu {version or '?'} has no NPU kernel for it (torch_npu "
                                    f"{SCALED_MM_SINCE}+ has). Run in bf16 (turn the fp8 option of your code off).")

    return _scaled_mm


@features.patch("triton.runtime.jit:JITFunction.run", fidelity="unsupported", covers=("triton.jit",),
                why="a user @triton.jit kernel is compiled for CUDA GPUs; on an NPU it needs triton-ascend and "
                    "usually a rewrite.",
                what="launching a Triton kernel raises UnsupportedOnNPUError naming the kernel, instead of a "
                     "driver error.",
                remove_when="triton-ascend runs unmodified CUDA Triton kernels")
def triton_run(ctx):
    from ascend_shim.errors import UnsupportedOnNPUError

    report, pid = ctx.report, ctx.patch.id

    def run(self, *args, **kwargs):
        name = getattr(getattr(self, "fn", None), "__qualname__", repr(self))
        report.unsupported("triton kernel launch", name)
        raise UnsupportedOnNPUError(f"Triton kernel {name}", pid,
                                    "Use a PyTorch implementation of this kernel, or port it to triton-ascend.")

    return run


def _set_matmul_hf32(report, api: str, value: bool, frame) -> None:
    """What TF32 means on CUDA is HF32 on the NPU: one switch, reported at the caller's site (``frame``)."""
    import torch

    torch.npu.matmul.allow_hf32 = value
    report.event("translated", api, f"torch.npu.matmul.allow_hf32 = {value}", frame=frame)


class _FlagNamespace:
    """A torch flag namespace (``torch.backends.cuda.matmul``, ``torch.backends.cudnn.conv``) whose settings, after
    torch's own, are passed to ``after(name, value, frame)``; reading is unchanged."""

    def __init__(self, real, after):
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_after", after)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __setattr__(self, name, value):
        setattr(self._real, name, value)
        self._after(name, value, sys._getframe(1))


@features.patch("torch.backends.cuda:matmul", kind="replace", covers=("torch.backends.cuda.matmul.allow_tf32",),
                why="allow_tf32 trades matmul precision for speed on CUDA; the NPU's switch is HF32.",
                what="setting allow_tf32 (or fp32_precision 'tf32'/'ieee') also sets torch.npu.matmul.allow_hf32 "
                     "(reported); other attributes pass through.",
                remove_when=REMOVE)
def matmul_flags(ctx):
    report = ctx.report

    def after(name, value, frame):
        if name == "allow_tf32":
            _set_matmul_hf32(report, "torch.backends.cuda.matmul.allow_tf32", bool(value), frame)
        elif name == "fp32_precision" and value in ("tf32", "ieee"):
            _set_matmul_hf32(report, "torch.backends.cuda.matmul.fp32_precision", value == "tf32", frame)

    return _FlagNamespace(ctx.original, after)


@features.patch("torch:set_float32_matmul_precision",
                why="set_float32_matmul_precision('high'/'medium') is the modern way to turn TF32 matmuls on on "
                    "CUDA; torch_npu does not map it, so the NPU kept full fp32 matmuls without a word.",
                what="'high' and 'medium' also set torch.npu.matmul.allow_hf32 = True, 'highest' sets it False "
                     "(reported); torch's own setting is made as well.",
                remove_when="torch_npu maps the float32 matmul precision to HF32 itself")
def float32_matmul_precision(ctx):
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def set_float32_matmul_precision(precision):
        orig(precision)
        if precision in ("highest", "high", "medium"):
            _set_matmul_hf32(report, f"torch.set_float32_matmul_precision({precision!r})", precision != "highest",
                             sys._getframe(1))

    return set_float32_matmul_precision


@features.patch("torch.backends.cuda:is_built", covers=("torch.backends.cuda.is_built",),
                why="code that gates its GPU path on `torch.backends.cuda.is_built() and torch.cuda.is_available()` "
                    "took the CPU while CUDA was reported available: torch_npu builds of torch have no CUDA.",
                what="caller-aware, like torch.cuda.is_available: code that is told CUDA is available is also told "
                     "torch was built with it (True); torch and NPU-native libraries get the real answer.",
                remove_when=REMOVE)
def cuda_is_built(ctx):
    from ascend_shim.callers import caller_is_native

    real = ctx.original

    @functools.wraps(real)
    def is_built():
        return real() if caller_is_native(2) else True

    return is_built


def _conv_uses_tf32() -> bool:
    """Whether CUDA convolutions would run in TF32 now: torch's own resolution of the conv precision (the conv
    setting, else cuDNN's, else the generic one), which the legacy ``allow_tf32`` switch also sets."""
    import torch

    return torch._C._get_fp32_precision_getter("cuda", "conv") == "tf32"


def _sync_conv_hf32(report, api: str, frame) -> None:
    """What TF32 convolutions mean on CUDA is HF32 convolutions on the NPU: one switch, reported at the caller."""
    import torch

    value = _conv_uses_tf32()
    torch.npu.conv.allow_hf32 = value
    report.event("translated", api, f"torch.npu.conv.allow_hf32 = {value}", frame=frame)


class _FlagSetter:
    """A cuDNN flag attribute (a ``property``, or torch's ``ContextProp`` descriptor) whose setting, after torch's
    own, is followed by ``after(value, frame)``; reading is unchanged."""

    def __init__(self, original, after):
        self._original, self._after = original, after
        self.__doc__ = getattr(original, "__doc__", None)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return self._original.__get__(obj, objtype)

    def __set__(self, obj, value):
        self._original.__set__(obj, value)
        self._after(value, sys._getframe(1))


#: cuDNN flags with no NPU counterpart: setting one is reported as having no effect (and why)
CUDNN_NO_EFFECT = {"benchmark": "no cuDNN autotuner on the NPU",
                   "deterministic": "no cuDNN on the NPU; use torch.use_deterministic_algorithms(True)"}
#: cuDNN flags that decide whether convolutions run in TF32
CUDNN_PRECISION = ("allow_tf32", "fp32_precision")


@features.patch("torch.backends.cudnn:allow_tf32", kind="call", covers=("torch.backends.cudnn",),
                why="cuDNN's TF32 switches decide whether CUDA convolutions run in reduced precision; the NPU's "
                    "switch is torch.npu.conv.allow_hf32 (on by default, like cuDNN's). cudnn.benchmark and "
                    "deterministic have no cuDNN to act on.",
                what="setting torch.backends.cudnn.allow_tf32 or fp32_precision sets torch.npu.conv.allow_hf32 to "
                     "whether torch would now run CUDA convolutions in TF32 (reported); benchmark and "
                     "deterministic are reported as having no NPU effect. Works with torch's flag descriptors "
                     "(ContextProp) as with properties.",
                remove_when=REMOVE)
def cudnn_flags(ctx):
    from ascend_shim.errors import TargetMissing

    module = sys.modules["torch.backends.cudnn"]
    cls = type(module)
    report = ctx.report
    originals = {}

    def precision(_name):
        return lambda value, frame: _sync_conv_hf32(report, f"torch.backends.cudnn.{_name}", frame)

    def no_effect(_name):
        return lambda value, frame: report.event("fallback", f"torch.backends.cudnn.{_name}",
                                                 f"= {value!r}: {CUDNN_NO_EFFECT[_name]}, no effect", frame=frame)

    for name in (*CUDNN_PRECISION, *CUDNN_NO_EFFECT):
        descriptor = cls.__dict__.get(name)
        if not hasattr(type(descriptor), "__set__"):
            continue
        originals[name] = descriptor
        setattr(cls, name, _FlagSetter(descriptor, precision(name) if name in CUDNN_PRECISION else no_effect(name)))
    if "allow_tf32" not in originals:
        raise TargetMissing(f"{cls.__qualname__}.allow_tf32 is not a settable attribute")

    def undo():
        for name, descriptor in originals.items():
            setattr(cls, name, descriptor)

    return undo


@features.patch("torch.backends.cudnn:conv", kind="call", covers=("torch.backends.cudnn.conv.fp32_precision",),
                why="torch.backends.cudnn.conv.fp32_precision = 'tf32'/'ieee' is torch's newer switch for TF32 "
                    "convolutions; the NPU's is torch.npu.conv.allow_hf32.",
                what="setting it also sets torch.npu.conv.allow_hf32 to whether torch would now run CUDA "
                     "convolutions in TF32 (reported); reading passes through.",
                remove_when=REMOVE)
def cudnn_conv_precision(ctx):
    from ascend_shim.errors import TargetMissing

    cls = type(sys.modules["torch.backends.cudnn"])  # `conv` is an attribute of torch's module class
    original = cls.__dict__.get("conv")
    if original is None:
        raise TargetMissing(f"{cls.__qualname__} has no conv attribute")
    report = ctx.report

    def after(name, value, frame):
        if name == "fp32_precision":
            _sync_conv_hf32(report, "torch.backends.cudnn.conv.fp32_precision", frame)

    setattr(cls, "conv", _FlagNamespace(original, after))
    return lambda: setattr(cls, "conv", original)


@features.patch("torch.backends.cudnn:m.set_flags", covers=("torch.backends.cudnn.flags",),
                why="`with torch.backends.cudnn.flags(...)` sets cuDNN's TF32 switch for a block (and back after "
                    "it) through set_flags, not through the module attributes.",
                what="after set_flags (so inside and after each flags() block) torch.npu.conv.allow_hf32 follows "
                     "whether torch would run CUDA convolutions in TF32 (reported).",
                remove_when=REMOVE)
def cudnn_set_flags(ctx):
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def set_flags(*args, **kwargs):
        flags = orig(*args, **kwargs)
        _sync_conv_hf32(report, "torch.backends.cudnn.flags", sys._getframe(1))
        return flags

    return set_flags


@features.patch("torch._dynamo.trace_rules:_allowed_callable_ids", kind="call",
                id="torch_features.dynamo_calls_compiled_gates",
                why="with the compiled fast path (ASCEND_SHIM_SPEEDUPS), torch.zeros, torch.empty ... are C "
                    "callables dynamo does not know: torch.compile would break its graph at each of them.",
                what="dynamo puts a call of each compiled factory wrapper in the graph, as it does for torch's own "
                     "factories; the graph runs it, so a device argument is translated there as in eager code.",
                remove_when="never while the compiled fast path exists")
def dynamo_calls_compiled_gates(ctx):
    from torch._dynamo import trace_rules

    from ._wrappers import GATE_LISTENERS, GATES

    # dynamo's ids of the callables it writes into the graph as they are (torch.compiler.allow_in_graph)
    known = getattr(trace_rules, "_allowed_callable_ids", None)
    if not all(hasattr(known, m) for m in ("add", "remove", "__contains__")):
        from ascend_shim.errors import TargetMissing

        raise TargetMissing(f"torch._dynamo.trace_rules._allowed_callable_ids is a {type(known).__name__}, "
                            "not a set of ids")
    added = set()

    def register(gate):
        if id(gate) not in known:
            known.add(id(gate))
            added.add(id(gate))

    for gate in GATES.values():
        register(gate)
    GATE_LISTENERS.append(register)

    def undo():
        GATE_LISTENERS.remove(register)
        for gate_id in added:
            known.remove(gate_id)

    return undo


@features.patch("torch._dynamo.trace_rules:SKIP_DIRS", kind="call", id="torch_features.dynamo_emulated_npu",
                why="the emulated NPU is Python over a native extension; dynamo traced into it and stopped at an "
                    "extension function with a warning naming the emulator's internals (torch.cuda.manual_seed() "
                    "or memory_allocated() in a compiled function).",
                what="dynamo does not trace into the emulator: such a call breaks the graph silently, as a call into "
                     "torch_npu's C extension breaks it on the NPU.",
                remove_when="never while the emulator exists")
def dynamo_emulated_npu(ctx):
    from torch._dynamo import trace_rules

    from ascend_shim.errors import NotNeeded

    if "ascend_shim.sim" not in sys.modules:
        raise NotNeeded("no emulated NPU in this process")
    from ascend_shim.sim import dynamo

    return dynamo.register(trace_rules)


@features.patch("torch.jit._builtins:_find_builtin",
                why="TorchScript compiles a call to torch.arange(...) etc. only if the callee is in its builtin "
                    "table, which torch builds at import, before the shim wraps the factories; @torch.jit.script "
                    "functions calling a wrapped factory then fail to compile (realhf's "
                    "compute_varlen_position_indices, at import).",
                what="a shim wrapper of a torch builtin is compiled as that builtin (its __wrapped__ original); "
                     "inside scripted code device arguments are therefore not translated (tensor.device is "
                     "already npu; a literal 'cuda' there is not).",
                remove_when=REMOVE)
def jit_find_builtin(ctx):
    orig = ctx.original

    @functools.wraps(orig)
    def _find_builtin(fn):
        op = orig(fn)
        if op is None and getattr(fn, "__ascend_shim_patch__", None):
            inner = getattr(fn, "__wrapped__", None)
            if inner is not None:
                op = orig(inner)
        return op

    return _find_builtin


PATCH_SETS = [features]
