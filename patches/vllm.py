"""vLLM on the NPU (evaluation steps, AReaL / TRL rollout servers): vllm-ascend as the platform,
CUDA-only engine arguments translated, eager mode by default, version pairing checked.

vLLM runs on Ascend through the vllm-ascend platform plugin (entry point ``vllm.platform_plugins`` name
``ascend``). Every way a CUDA script starts vLLM builds an ``EngineArgs``: ``vllm.LLM(...)`` constructs one,
``AsyncEngineArgs(...)`` / ``EngineArgs(...)`` are built by hand for ``AsyncLLMEngine.from_engine_args``, and
``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server`` / ``trl vllm-serve`` (which execs
``python -m vllm.entrypoints.cli.main serve``) parse the command line and call ``from_cli_args``, i.e.
``cls(**namespace)``. So the set wraps the dataclass ``__init__`` of ``EngineArgs`` and ``AsyncEngineArgs``
(keyword arguments are translated *before* vLLM's own ``__post_init__`` converts them) and the CLI parser's
``--enforce-eager`` default. Server children get the shim through the bootstrap ``sitecustomize``
(``ASCEND_SHIM=1`` survives ``os.environ.copy()``).

What vllm-ascend already does (read in its ``platform.py``; NOT duplicated here): compilation / cudagraph
mode mapping to ACL graph (``_update_compilation_modes``), resetting NVIDIA-only knobs (cascade attention,
NVTX, flashinfer/cudnn/trtllm attention flags, ...), ignoring ``VLLM_ATTENTION_BACKEND``, quantization
auto-detection, ``ASCEND_RT_VISIBLE_DEVICES`` as the device-control variable, and ``PYTORCH_NPU_ALLOC_CONF``.
What it does not do, and this set does: ``kv_cache_dtype="fp8*"`` (its attention backends ignore the KV dtype:
fp8 caches would reach the NPU kernels) -> ``"auto"``, reported; quantization methods outside
``NPUPlatform.supported_quantization`` (``awq_marlin``, ``gptq_marlin``, ``bitsandbytes``, ...) -> a clear
error naming the option (vLLM's own message only says "not supported in npu"); ``weight_transfer_config``
``nccl``/``ipc`` -> vllm-ascend's ``hccl``/``npu_ipc`` engines (registered since vllm-ascend 0.23; trl
vllm-serve passes ``{"backend": "nccl"}``); ``device="cuda"`` (vLLM <= 0.10 had a ``device`` field) ->
``"auto"``; ``enforce_eager=True`` unless the caller chose (ACL graph capture is the most fragile part of
vllm-ascend; ``--no-enforce-eager`` / ``enforce_eager=False`` keeps graphs); ``VLLM_PLUGINS`` without
``ascend`` gets it appended. ``distributed_executor_backend`` needs nothing: vLLM's values (mp, ray, uni,
external_launcher) all exist on vllm-ascend.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import os

from ascend_shim.registry import PatchSet

vllm = PatchSet(
    native=("vllm", "vllm_ascend"),
    id="vllm", title="vLLM: vllm-ascend platform, CUDA-only engine args, enforce_eager default, version pairing",
    requires={"vllm": ">=0.9,<0.34"},
    checked_against="vllm 0.33.0 (PyPI wheel, installed --no-deps: EngineArgs / AsyncEngineArgs / serve parser "
                    "exercised on CPU with a stand-in NPU platform); vllm-ascend source main @ 182b75e "
                    "(2026-08) and tags v0.9.1..v0.23.0 (read, not installed)",
)

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


def _release(version: str | None) -> tuple[int, ...] | None:
    from ascend_shim.versions import release

    return release(version)


# -- version pairing ----------------------------------------------------------------------------------------
def check_pairing(found: dict, requires=()) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` for installed versions ``{dist: version or None}`` (the rules of
    :mod:`ascend_shim.versions`, as ``doctor`` applies them).

    ``requires``: vllm-ascend's own ``Requires-Dist`` lines (its pins on torch / torch-npu / numpy).
    Errors stop vLLM for sure (no platform, ABI mismatch); warnings are combinations users report working.
    """
    from ascend_shim import versions

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


def pairing_problems(found: dict, requires=()) -> list[str]:
    """Every pairing problem (errors then warnings); [] when the pairing is sound."""
    errors, warnings = check_pairing(found, requires)
    return errors + warnings


def _requires_of(dist: str) -> list[str]:
    from ascend_shim.versions import requirements_of

    return requirements_of(dist) or []


def _ascend_plugin_registered() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == "ascend" for ep in entry_points(group="vllm.platform_plugins"))


def platform_problems() -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` about vllm-ascend being the platform in this process."""
    from ascend_shim import versions

    found = {d: versions.installed_version(d) for d in _VERSIONED}
    errors, warnings = check_pairing(found, _requires_of("vllm-ascend") if found["vllm-ascend"] else ())
    if found["vllm-ascend"] is not None and not _ascend_plugin_registered():
        errors.append("vllm-ascend is installed but registers no 'ascend' entry point in vllm.platform_plugins "
                      "(broken install: reinstall vllm-ascend)")
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and "ascend" not in [p.strip() for p in allowed.split(",")]:
        errors.append(f"VLLM_PLUGINS={allowed!r} does not allow the 'ascend' platform plugin")
    if os.environ.get("VLLM_TARGET_DEVICE", "").strip().lower() == "cpu":
        warnings.append("VLLM_TARGET_DEVICE=cpu selects vLLM's CPU platform, not the NPU")
    return errors, warnings


def _check_platform(report) -> None:
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
    from ascend_shim import versions

    try:
        import importlib

        return tuple(importlib.import_module("vllm_ascend.platform").NPUPlatform.supported_quantization)
    except Exception:
        pass
    va = versions.installed_version("vllm-ascend")
    if va is None:
        return None
    rel = _release(va)[:2]
    return next(q for since, q in _QUANT_BY_RELEASE if rel >= since)


def _weight_transfer_engines() -> bool:
    from ascend_shim import versions

    va = versions.installed_version("vllm-ascend")
    return va is not None and _release(va)[:2] >= (0, 23)


def translate_engine_args(kwargs: dict, *, fields, explicit_eager: bool | None = None,
                          quantization_methods=None, hccl_weight_transfer: bool = True) -> list[tuple]:
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
    wt = kwargs.get("weight_transfer_config")
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


def _apply_events(report, events) -> None:
    for category, api, detail in events:
        getattr(report, category)(api, detail)


def _init_wrapper(ctx):
    from ascend_shim.errors import UnsupportedOnNPUError

    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        names = [f.name for f in dataclasses.fields(type(self)) if f.init]
        for name, value in zip(names, args):  # EngineArgs("model") -> model="model"
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


_WHY_ARGS = ("every way of starting vLLM (vllm.LLM, AsyncLLMEngine.from_engine_args, vllm serve, trl "
             "vllm-serve, AReaL's server) builds an EngineArgs; CUDA-only values in it (fp8 KV cache, Marlin "
             "quantization, the NCCL weight-transfer engine, device='cuda') fail deep inside vllm-ascend.")
_WHAT_ARGS = ("before vLLM's own __post_init__: checks vllm-ascend is installed, registered and allowed by "
              "VLLM_PLUGINS, and the vllm / vllm-ascend / torch / torch_npu / numpy pairing (ShimError listing "
              "every problem); kv_cache_dtype fp8*/fp4 -> 'auto' (reported fallback); an unsupported "
              "quantization -> UnsupportedOnNPUError naming it; weight_transfer_config nccl/ipc -> hccl/npu_ipc; "
              "device='cuda' -> 'auto'; enforce_eager=True when the caller did not choose.")


@vllm.patch("vllm.engine.arg_utils:EngineArgs.__init__",
            why=_WHY_ARGS, what=_WHAT_ARGS, remove_when="vllm-ascend translates these itself")
def engine_args_init(ctx):
    return _init_wrapper(ctx)


@vllm.patch("vllm.engine.arg_utils:AsyncEngineArgs.__init__",
            why="AsyncEngineArgs (AsyncLLMEngine, the OpenAI server) is a dataclass with its own generated "
                "__init__; " + _WHY_ARGS, what=_WHAT_ARGS, remove_when="vllm-ascend translates these itself")
def async_engine_args_init(ctx):
    return _init_wrapper(ctx)


@vllm.patch("vllm.engine.arg_utils:EngineArgs.add_cli_args",
            why="vllm serve / the OpenAI api_server / trl vllm-serve build EngineArgs from every parsed option, "
                "so 'not given' and '--no-enforce-eager' look the same by then; the NPU default must be the "
                "parser's.",
            what="after vLLM adds its options, the parser default of --enforce-eager is True on the NPU "
                 "(--no-enforce-eager keeps ACL graphs), reported when a parser is built.",
            remove_when="vllm-ascend's graph mode is the reliable default")
def add_cli_args(ctx):
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def wrapper(parser, *args, **kwargs):
        parser = orig(parser, *args, **kwargs)
        if any(getattr(a, "dest", None) == "enforce_eager" for a in getattr(parser, "_actions", ())):
            parser.set_defaults(enforce_eager=True)
            report.translated("vllm CLI --enforce-eager", "default True on the NPU (--no-enforce-eager for graphs)")
        return parser

    return staticmethod(wrapper)


@vllm.patch("vllm.entrypoints.llm:LLM.__init__",
            why="vllm.LLM(...) passes its own enforce_eager=False default on to EngineArgs explicitly, so only "
                "here can 'not given' be told apart from a user's choice.",
            what="defaults enforce_eager=True (reported) when the caller did not pass it; the EngineArgs patch "
                 "does the platform check and the argument translation.",
            remove_when="vllm-ascend's graph mode is the reliable default")
def llm_init(ctx):
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        if "enforce_eager" not in kwargs:
            kwargs["enforce_eager"] = True
            report.translated("vllm.LLM", "enforce_eager=True (NPU default; pass enforce_eager=False for graphs)")
        return orig(self, *args, **kwargs)

    return __init__


@vllm.patch("env:VLLM_PLUGINS", kind="env",
            why="VLLM_PLUGINS is an allow-list of vLLM plugins; a CUDA setup that sets it (to trim general "
                "plugins) would keep vllm-ascend's platform plugin from loading.",
            what="when VLLM_PLUGINS is set and lacks 'ascend', ',ascend' is appended (children inherit it).",
            remove_when="never: the allow-list is the user's, the platform is the NPU's")
def vllm_plugins(ctx):
    current = os.environ.get("VLLM_PLUGINS")
    if current is None or "ascend" in [p.strip() for p in current.split(",")]:
        return None
    value = ",".join(p for p in (current.strip(), "ascend") if p)
    ctx.set_env("VLLM_PLUGINS", value, f"{current!r} -> {value!r} (vllm-ascend's platform plugin allowed)")
    return None


PATCH_SETS = [vllm]
