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


def _set_matmul_hf32(report, api: str, value: bool) -> None:
    """What TF32 means on CUDA is HF32 on the NPU: one switch, reported at the caller's site."""
    import torch

    torch.npu.matmul.allow_hf32 = value
    report.event("translated", api, f"torch.npu.matmul.allow_hf32 = {value}", frame=sys._getframe(2))


class _MatmulFlags:
    """``torch.backends.cuda.matmul`` whose TF32 switches also drive the NPU's HF32 switch."""

    def __init__(self, real, report):
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_report", report)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __setattr__(self, name, value):
        setattr(self._real, name, value)
        if name == "allow_tf32":
            _set_matmul_hf32(self._report, "torch.backends.cuda.matmul.allow_tf32", bool(value))
        elif name == "fp32_precision" and value in ("tf32", "ieee"):
            _set_matmul_hf32(self._report, "torch.backends.cuda.matmul.fp32_precision", value == "tf32")


@features.patch("torch.backends.cuda:matmul", kind="replace", covers=("torch.backends.cuda.matmul.allow_tf32",),
                why="allow_tf32 trades matmul precision for speed on CUDA; the NPU's switch is HF32.",
                what="setting allow_tf32 (or fp32_precision 'tf32'/'ieee') also sets torch.npu.matmul.allow_hf32 "
                     "(reported); other attributes pass through.",
                remove_when=REMOVE)
def matmul_flags(ctx):
    return _MatmulFlags(ctx.original, ctx.report)


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
            _set_matmul_hf32(report, f"torch.set_float32_matmul_precision({precision!r})", precision != "highest")

    return set_float32_matmul_precision


@features.patch("torch.backends.cudnn:allow_tf32", kind="call", covers=("torch.backends.cudnn",),
                why="cuDNN flags (allow_tf32, benchmark, deterministic) have no cuDNN to act on on the NPU.",
                what="allow_tf32 drives torch.npu.conv.allow_hf32; benchmark and deterministic are recorded as "
                     "having no NPU effect (deterministic: use torch.use_deterministic_algorithms).",
                remove_when=REMOVE)
def cudnn_flags(ctx):
    import sys

    import torch

    module = sys.modules["torch.backends.cudnn"]
    cls = type(module)
    report = ctx.report
    originals = {}
    for name in ("allow_tf32", "benchmark", "deterministic"):
        prop = cls.__dict__.get(name)
        if not isinstance(prop, property) or prop.fset is None:
            continue
        originals[name] = prop

        def setter(self, value, _name=name, _prop=prop):
            _prop.fset(self, value)
            if _name == "allow_tf32":
                torch.npu.conv.allow_hf32 = bool(value)
                report.translated("torch.backends.cudnn.allow_tf32", f"torch.npu.conv.allow_hf32 = {bool(value)}")
            else:
                report.fallback(f"torch.backends.cudnn.{_name}", f"= {value!r}: no cuDNN on the NPU, no effect")

        setattr(cls, name, property(prop.fget, setter, prop.fdel, prop.__doc__))

    def undo():
        for name, prop in originals.items():
            setattr(cls, name, prop)

    return undo


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
