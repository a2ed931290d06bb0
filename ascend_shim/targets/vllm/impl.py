"""vLLM on the NPU: vllm-ascend as the platform (installed, registered, allowed, paired with vllm / torch / torch_npu /
numpy), and the CUDA-only engine arguments translated before vLLM reads them (fp8 KV caches, Marlin and other
quantizations vllm-ascend lacks, the NCCL weight-transfer engine, device='cuda', enforce_eager)."""
from __future__ import annotations

import copy
import dataclasses
import functools
import os
from collections.abc import Callable, Collection, Iterable
from typing import Any, TYPE_CHECKING

from ascend_shim import versions

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext
    from ascend_shim.report import Report


#: KV-cache dtypes the Ascend attention backends store as given; anything else (fp8*, nvfp4, turboquant) -> auto
NPU_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "half", "float")
#: vllm-ascend's NPUPlatform.supported_quantization by release (used when vllm_ascend cannot be imported)
_QUANT_BY_RELEASE = (
    ((0, 23), ("ascend", "compressed-tensors", "fp8", "deepseek_v4_fp8")),
    ((0, 13), ("ascend", "compressed-tensors")),
    ((0, 0), ("ascend",)),
)
#: weight-transfer backends vllm-ascend registers (vllm_ascend/distributed/weight_transfer, since 0.23)
WEIGHT_TRANSFER = {"nccl": "hccl", "ipc": "npu_ipc"}
_VERSIONED = ("vllm", "vllm-ascend", "torch", "torch-npu", "numpy")


# -- version pairing ----------------------------------------------------------------------------------------
def check_pairing(found: dict, requires: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` for installed versions ``{dist: version or None}`` (the rules of
    :mod:`ascend_shim.versions`, as ``doctor`` applies them).

    ``requires``: vllm-ascend's own ``Requires-Dist`` lines (its pins on torch / torch-npu / numpy).
    Errors stop vLLM for sure (no platform, ABI mismatch); warnings are combinations users report working.
    """
    errors, warnings = [], []
    vl, va = found.get("vllm"), found.get("vllm-ascend") or found.get("vllm_ascend")
    pairing = versions.vllm_pairing(vl, va)
    if pairing.ok is False:
        errors.append(f"{pairing.message} ({pairing.fix})")
    t, tn = found.get("torch"), found.get("torch-npu") or found.get("torch_npu")
    if t is not None and tn is not None:
        pairing = versions.torch_npu_pairing(t, tn)
        if pairing.ok is False:
            errors.append(f"{pairing.message} (binary mismatch; {pairing.fix})")
        elif pairing.ok is None:
            warnings.append(pairing.message)
    if va is not None:
        np_ = found.get("numpy")
        np_spec, _ = versions.numpy_requirement(va, requires)
        if np_ is not None and not versions.satisfies(np_, np_spec):
            warnings.append(f"numpy {np_}: vllm-ascend {va} needs numpy{np_spec}")
        pins = versions.pins_of(requires)
        for dist, have in (("torch", t), ("torch-npu", tn)):
            spec = pins.get(dist)
            if have is not None and spec and not versions.satisfies(have, spec):
                warnings.append(f"{dist} {have}: vllm-ascend {va} is built and tested against {dist}{spec}")
    return errors, warnings


def pairing_problems(found: dict, requires: Iterable[str] = ()) -> list[str]:
    """Every pairing problem (errors then warnings); [] when the pairing is sound."""
    errors, warnings = check_pairing(found, requires)
    return errors + warnings


def _ascend_plugin_registered() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == "ascend" for ep in entry_points(group="vllm.platform_plugins"))


def platform_problems() -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` about vllm-ascend being the platform in this process."""
    found = {d: versions.installed_version(d) for d in _VERSIONED}
    requires = (versions.requirements_of("vllm-ascend") or []) if found["vllm-ascend"] else ()
    errors, warnings = check_pairing(found, requires)
    if found["vllm-ascend"] is not None and not _ascend_plugin_registered():
        errors.append("vllm-ascend is installed but registers no 'ascend' entry point in vllm.platform_plugins "
                      "(broken install: reinstall vllm-ascend)")
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and "ascend" not in [p.strip() for p in allowed.split(",")]:
        errors.append(f"VLLM_PLUGINS={allowed!r} does not allow the 'ascend' platform plugin")
    if os.environ.get("VLLM_TARGET_DEVICE", "").strip().lower() == "cpu":
        warnings.append("VLLM_TARGET_DEVICE=cpu selects vLLM's CPU platform, not the NPU")
    return errors, warnings


def _check_platform(report: Report) -> None:
    from ascend_shim.errors import ShimError

    errors, warnings = platform_problems()
    for w in warnings:
        report.note(f"vllm: {w}")
    if errors:
        raise ShimError("vLLM cannot run on the NPU with this installation (ascend_shim patch set vllm): "
                        + "; ".join(errors + warnings))


# -- engine-argument translation ----------------------------------------------------------------------------
def supported_quantization() -> tuple[str, ...] | None:
    """vllm-ascend's ``NPUPlatform.supported_quantization`` (from the class when importable, else by release)."""
    try:
        import importlib

        return tuple(importlib.import_module("vllm_ascend.platform").NPUPlatform.supported_quantization)
    except Exception:
        pass
    va = versions.installed_version("vllm-ascend")
    if va is None:
        return None
    rel = versions.release(va)[:2]  # type: ignore[index]  # an installed distribution's version is valid
    return next(q for since, q in _QUANT_BY_RELEASE if rel >= since)


def _weight_transfer_engines() -> bool:
    va = versions.installed_version("vllm-ascend")
    return va is not None and versions.release(va)[:2] >= (0, 23)  # type: ignore[index]  # as above


def translate_engine_args(kwargs: dict, *, fields: Collection[str], explicit_eager: bool | None = None,
                          quantization_methods: Collection[str] | None = None,
                          hccl_weight_transfer: bool = True) -> list[tuple]:
    """Translate CUDA-only engine arguments in ``kwargs`` (EngineArgs keyword names) in place.

    Returns ``(category, api, detail)`` events; raises UnsupportedOnNPUError for a quantization method the
    NPU platform lacks. ``fields``: the names the EngineArgs class accepts. ``explicit_eager``: whether the
    caller chose ``enforce_eager`` (default: it is in ``kwargs``).
    """
    events = []
    dev = kwargs.get("device")
    if "device" in fields and isinstance(dev, str) and dev.split(":")[0] == "cuda":
        kwargs["device"] = "auto"
        events.append(("translated", f"vllm device={dev!r}", "device='auto' (the NPU platform decides)"))
    kv = kwargs.get("kv_cache_dtype")
    if isinstance(kv, str) and kv not in NPU_KV_CACHE_DTYPES:
        kwargs["kv_cache_dtype"] = "auto"
        events.append(("fallback", f"vllm kv_cache_dtype={kv!r}",
                       "kv_cache_dtype='auto' (the model dtype): vllm-ascend's attention kernels do not read "
                       "fp8/fp4 KV caches; the cache holds fewer tokens in the same memory"))
    quant = kwargs.get("quantization")
    if quant is not None and quantization_methods is not None and quant not in quantization_methods:
        kernel = " (Marlin kernels are CUDA-only)" if "marlin" in str(quant) else ""
        from ascend_shim.errors import UnsupportedOnNPUError

        raise UnsupportedOnNPUError(f"vllm quantization={quant!r}", "vllm.engine_args",
                                    f"the vllm-ascend platform has no {quant!r} quantization{kernel}; it supports "
                                    f"{', '.join(quantization_methods)}: use an unquantized checkpoint or one "
                                    "quantized for Ascend (msModelSlim -> quantization='ascend', or "
                                    "compressed-tensors W8A8)")
    wt: Any = kwargs.get("weight_transfer_config")
    backend = wt.get("backend") if isinstance(wt, dict) else getattr(wt, "backend", None)
    if backend in WEIGHT_TRANSFER:
        new = WEIGHT_TRANSFER[backend]
        if hccl_weight_transfer:
            if isinstance(wt, dict):
                wt = dict(wt, backend=new)
            else:
                wt = copy.copy(wt)
                wt.backend = new
            kwargs["weight_transfer_config"] = wt
            events.append(("translated", f"vllm weight_transfer_config backend={backend!r}",
                           f"backend={new!r} (vllm-ascend's weight-transfer engine)"))
        else:
            events.append(("unsupported", f"vllm weight_transfer_config backend={backend!r}",
                           "kept: vllm-ascend < 0.23 has no HCCL weight-transfer engine; weight updates will fail"))
    if explicit_eager is None:
        explicit_eager = "enforce_eager" in kwargs
    if not explicit_eager and "enforce_eager" in fields:
        kwargs["enforce_eager"] = True
        events.append(("translated", "vllm enforce_eager",
                       "enforce_eager=True (NPU default; pass enforce_eager=False / --no-enforce-eager for ACL "
                       "graphs)"))
    return events


def _apply_events(report: Report, events: list[tuple]) -> None:
    for category, api, detail in events:
        getattr(report, category)(api, detail)


def engine_args_init(ctx: PatchContext) -> Callable:
    """An EngineArgs dataclass __init__ that checks the platform and translates the CUDA-only arguments first."""
    from ascend_shim.errors import UnsupportedOnNPUError

    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        names = [f.name for f in dataclasses.fields(type(self)) if f.init]
        for name, value in zip(names, args, strict=False):  # EngineArgs("model") -> model="model"
            if name in kwargs:
                raise TypeError(f"{type(self).__name__}.__init__() got multiple values for argument {name!r}")
            kwargs[name] = value
        _check_platform(report)
        try:
            events = translate_engine_args(kwargs, fields=set(names), quantization_methods=supported_quantization(),
                                           hccl_weight_transfer=_weight_transfer_engines())
        except UnsupportedOnNPUError as exc:
            report.unsupported(exc.feature, exc.advice)
            raise
        _apply_events(report, events)
        return orig(self, **kwargs)

    return __init__


def add_cli_args(ctx: PatchContext) -> staticmethod:
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def wrapper(parser, *args, **kwargs):
        parser = orig(parser, *args, **kwargs)
        if any(getattr(a, "dest", None) == "enforce_eager" for a in getattr(parser, "_actions", ())):
            parser.set_defaults(enforce_eager=True)
            report.translated("vllm CLI --enforce-eager", "default True on the NPU (--no-enforce-eager for graphs)")
        return parser

    return staticmethod(wrapper)


def llm_init(ctx: PatchContext) -> Callable[..., Any]:
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        if "enforce_eager" not in kwargs:
            kwargs["enforce_eager"] = True
            report.translated("vllm.LLM", "enforce_eager=True (NPU default; pass enforce_eager=False for graphs)")
        return orig(self, *args, **kwargs)

    return __init__


def vllm_plugins(ctx: PatchContext) -> None:
    current = os.environ.get("VLLM_PLUGINS")
    if current is None or "ascend" in [p.strip() for p in current.split(",")]:
        return None
    value = ",".join(p for p in (current.strip(), "ascend") if p)
    ctx.set_env("VLLM_PLUGINS", value, f"{current!r} -> {value!r} (vllm-ascend's platform plugin allowed)")
    return None
