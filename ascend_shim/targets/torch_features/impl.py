"""CUDA features with an NPU counterpart or a fallback: torch.compile's backend, the TF32 switches (HF32 on the NPU,
for matmuls and convolutions), cuDNN's flags."""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

from ascend_shim.frames import caller
from ascend_shim.targets.torch_features import CUDNN_VERSION, SCALED_MM_SINCE

if TYPE_CHECKING:
    from types import FrameType

    from ascend_shim.context import PatchContext
    from ascend_shim.report import Report


def compile_with_npu_backend(ctx: PatchContext) -> Callable:
    """torch.compile where a request for inductor compiles with the configured NPU-capable backend (reported)."""
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


def set_matmul_hf32(report: Report, api: str, value: bool, frame: FrameType | None) -> None:
    """What TF32 means on CUDA is HF32 on the NPU: one switch, reported at the caller's site (``frame``)."""
    import torch

    torch.npu.matmul.allow_hf32 = value
    report.event("translated", api, f"torch.npu.matmul.allow_hf32 = {value}", frame=frame)


class FlagNamespace:
    """A torch flag namespace (``torch.backends.cuda.matmul``, ``torch.backends.cudnn.conv``) whose settings, after
    torch's own, are passed to ``after(name, value, frame)``; reading is unchanged."""

    def __init__(self, real: Any, after: Callable[[str, Any, FrameType | None], None]):
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_after", after)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __setattr__(self, name, value):
        setattr(self._real, name, value)
        self._after(name, value, caller())


def matmul_flags(ctx: PatchContext) -> FlagNamespace:
    """torch.backends.cuda.matmul whose TF32 settings also set the NPU's HF32 matmul switch."""
    report = ctx.report

    def after(name, value, frame):
        if name == "allow_tf32":
            set_matmul_hf32(report, "torch.backends.cuda.matmul.allow_tf32", bool(value), frame)
        elif name == "fp32_precision" and value in ("tf32", "ieee"):
            set_matmul_hf32(report, "torch.backends.cuda.matmul.fp32_precision", value == "tf32", frame)

    return FlagNamespace(ctx.original, after)


def _conv_uses_tf32() -> bool:
    """Whether CUDA convolutions would run in TF32 now: torch's own resolution of the conv precision (the conv
    setting, else cuDNN's, else the generic one), which the legacy ``allow_tf32`` switch also sets."""
    import torch

    return torch._C._get_fp32_precision_getter("cuda", "conv") == "tf32"


def sync_conv_hf32(report: Report, api: str, frame: FrameType | None) -> None:
    """What TF32 convolutions mean on CUDA is HF32 convolutions on the NPU: one switch, reported at the caller."""
    import torch

    value = _conv_uses_tf32()
    torch.npu.conv.allow_hf32 = value
    report.event("translated", api, f"torch.npu.conv.allow_hf32 = {value}", frame=frame)


class _FlagSetter:
    """A cuDNN flag attribute (a ``property``, or torch's ``ContextProp`` descriptor) whose setting, after torch's
    own, is followed by ``after(value, frame)``; reading is unchanged."""

    def __init__(self, original: Any, after: Callable[[Any, FrameType | None], None]):
        self._original, self._after = original, after
        self.__doc__ = getattr(original, "__doc__", None)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return self._original.__get__(obj, objtype)

    def __set__(self, obj, value):
        self._original.__set__(obj, value)
        self._after(value, caller())


#: cuDNN flags with no NPU counterpart: setting one is reported as having no effect (and why)
CUDNN_NO_EFFECT = {"benchmark": "no cuDNN autotuner on the NPU",
                   "deterministic": "no cuDNN on the NPU; use torch.use_deterministic_algorithms(True)"}
#: cuDNN flags that decide whether convolutions run in TF32
CUDNN_PRECISION = ("allow_tf32", "fp32_precision")


def cudnn_flags(ctx: PatchContext) -> Callable[[], None]:
    """cuDNN's flag attributes followed on the NPU (HF32 convolutions, or reported as having no effect)."""
    from ascend_shim.errors import TargetMissing

    module = sys.modules["torch.backends.cudnn"]
    cls = type(module)
    report = ctx.report
    originals = {}

    def precision(_name):
        return lambda value, frame: sync_conv_hf32(report, f"torch.backends.cudnn.{_name}", frame)

    def no_effect(_name):
        return lambda value, frame: report.event("fallback", f"torch.backends.cudnn.{_name}",
                                                 f"= {value!r}: {CUDNN_NO_EFFECT[_name]}, no effect", frame=frame)

    for name in (*CUDNN_PRECISION, *CUDNN_NO_EFFECT):
        descriptor = vars(cls).get(name)
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


def cudnn_conv_precision(ctx: PatchContext) -> Callable[[], None]:
    """torch.backends.cudnn.conv whose fp32_precision setting also sets the NPU's HF32 convolution switch."""
    from ascend_shim.errors import TargetMissing

    cls = type(sys.modules["torch.backends.cudnn"])  # `conv` is an attribute of torch's module class
    original = vars(cls).get("conv")
    if original is None:
        raise TargetMissing(f"{cls.__qualname__} has no conv attribute")
    report = ctx.report

    def after(name, value, frame):
        if name == "fp32_precision":
            sync_conv_hf32(report, "torch.backends.cudnn.conv.fp32_precision", frame)

    cls.conv = FlagNamespace(original, after)  # type: ignore[attr-defined]  # torch's module class has it
    return lambda: setattr(cls, "conv", original)


def contiguous_without_channels_last(ctx: PatchContext) -> Callable[..., Any]:
    """``Tensor.contiguous``: a channels-last request on an npu tensor gets the contiguous format instead."""
    import torch

    original, report = ctx.original, ctx.report
    channels_last = (torch.channels_last, torch.channels_last_3d)

    def contiguous(self, *args, **kwargs):
        if args or not kwargs:
            return original(self, *args, **kwargs)
        fmt = kwargs.get("memory_format")
        if (fmt in channels_last and len(kwargs) == 1 and self.device.type == "npu"
                and not self.is_contiguous(memory_format=fmt)):
            report.fallback("Tensor.contiguous", f"memory_format={fmt} -> torch.contiguous_format (the NPU's layout)")
            return original(self)
        return original(self, *args, **kwargs)

    return contiguous


def scaled_mm(ctx: PatchContext) -> Callable[..., Any]:
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


def triton_run(ctx: PatchContext) -> Callable[..., Any]:
    from ascend_shim.errors import UnsupportedOnNPUError

    report, pid = ctx.report, ctx.patch.id

    def run(self, *args, **kwargs):
        name = getattr(getattr(self, "fn", None), "__qualname__", repr(self))
        report.unsupported("triton kernel launch", name)
        raise UnsupportedOnNPUError(f"Triton kernel {name}", pid,
                                    "Use a PyTorch implementation of this kernel, or port it to triton-ascend.")

    return run


def float32_matmul_precision(ctx: PatchContext) -> Callable[..., Any]:
    from ascend_shim.frames import caller

    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def set_float32_matmul_precision(precision):
        orig(precision)
        if precision in ("highest", "high", "medium"):
            set_matmul_hf32(report, f"torch.set_float32_matmul_precision({precision!r})", precision != "highest",
                             caller())

    return set_float32_matmul_precision


def cuda_is_built(ctx: PatchContext) -> Callable[..., Any]:
    from ascend_shim.callers import caller_is_native

    real = ctx.original

    @functools.wraps(real)
    def is_built():
        return real() if caller_is_native(2) else True

    return is_built


def cudnn_is_available(ctx: PatchContext) -> Callable[..., Any]:
    from ascend_shim.callers import caller_is_native

    real = ctx.original

    @functools.wraps(real)
    def is_available():
        return real() if caller_is_native(2) else True

    return is_available


def cudnn_version(ctx: PatchContext) -> Callable[..., Any]:
    from ascend_shim.callers import caller_is_native

    real, report = ctx.original, ctx.report

    @functools.wraps(real)
    def version():
        if caller_is_native(2):
            return real()
        report.fallback("torch.backends.cudnn.version", f"{CUDNN_VERSION}: the NPU's own kernels stand in")
        return CUDNN_VERSION

    return version


def cudnn_set_flags(ctx: PatchContext) -> Callable[..., Any]:
    from ascend_shim.frames import caller

    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def set_flags(*args, **kwargs):
        flags = orig(*args, **kwargs)
        sync_conv_hf32(report, "torch.backends.cudnn.flags", caller())
        return flags

    return set_flags


def dynamo_emulated_npu(ctx: PatchContext) -> Callable[[], object]:
    from torch._dynamo import trace_rules

    from ascend_shim.errors import NotNeeded

    if not ctx.emulator_loaded:
        raise NotNeeded("no emulated NPU in this process")
    return ctx.keep_dynamo_out_of_emulator(trace_rules)


def jit_find_builtin(ctx: PatchContext) -> Callable[..., Any]:
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
