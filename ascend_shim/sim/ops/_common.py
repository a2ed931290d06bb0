"""Shared plumbing of the emulated fused ops: errors, device/dtype checks, host int lists, host reads.

Every public op is ``record_op`` + ``check_npu`` (device) + a device-agnostic implementation that validates
everything else and does the math with ordinary torch ops on whatever device the tensors live on. Tests can call
the implementations with CPU tensors; users only ever reach them through the npu-checking public functions.
"""
from __future__ import annotations

import contextlib
import numbers
from typing import Any, NoReturn
from collections.abc import Iterable

import torch

from .. import counters, cpu_alias, is_installed
from ..errors import NotEmulatedError as NotEmulatedError  # the op modules import it from here

INT32_MAX = 2147483647
FLT_MAX = 3.4028234663852886e38  # the kernels fill masked scores with -FLT_MAX ("负的极小值")

_FLOAT_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


def fail(op: str, msg: str, exc: type[Exception] = RuntimeError) -> NoReturn:
    raise exc(f"{op}: {msg}")


def check(cond: bool, op: str, msg: str, exc: type[Exception] = RuntimeError) -> None:
    if not cond:
        raise exc(f"{op}: {msg}")


def record(op: str) -> None:
    counters.record_op(op)


def dtype_name(dt: torch.dtype) -> str:
    return _FLOAT_NAMES.get(dt, str(dt).replace("torch.", ""))


# ------------------------------------------------------------------------------------------------------- devices

def check_npu(op: str, **tensors: Any) -> None:
    """Reject host tensors the way a real NPU-only op does.

    All defined tensor arguments on cpu (or another non-npu device): the dispatcher has no kernel for that
    backend -> ``NotImplementedError`` ("Could not run 'npu::<op>' with arguments from the 'CPU' backend").
    Some on npu, some not: op-plugin's ``format_trans`` raises ``RuntimeError`` ("Expected all tensors to be on
    the same device ..."). Two different npu indices: ``RuntimeError`` as well.
    """
    defined = {k: v for k, v in tensors.items() if isinstance(v, torch.Tensor)}
    for k, v in tensors.items():  # lists of tensors (IFA key/value may be lists)
        if isinstance(v, (list, tuple)):
            for i, t in enumerate(v):
                if isinstance(t, torch.Tensor):
                    defined[f"{k}[{i}]"] = t
    if not defined:
        return
    npu = {k: t for k, t in defined.items() if t.device.type == "npu"}
    if not npu:
        first = next(iter(defined.values()))
        backend = first.device.type.upper() if first.device.type != "cpu" else "CPU"
        raise NotImplementedError(
            f"Could not run 'npu::{op}' with arguments from the '{backend}' backend. 'npu::{op}' is only available "
            f"for the NPU (PrivateUse1) backend; move the inputs to the npu first (tensor.npu() / .to('npu')). "
            f"[ascend_shim sim: '{next(iter(defined))}' is on {first.device}]")
    others = [k for k, t in defined.items() if t.device.type != "npu"]
    if others:
        k = others[0]
        raise RuntimeError(
            f"{op}: Expected all tensors to be on the same device. Expected NPU tensor, please check whether the "
            f"input tensor device is correct. ('{k}' is on {defined[k].device})")
    idx = {t.device.index if t.device.index is not None else _current_npu_index() for t in npu.values()}
    if len(idx) > 1:
        a, b = sorted(idx)[:2]
        raise RuntimeError(f"{op}: Expected all tensors to be on the same device, but found at least two devices, "
                           f"npu:{a} and npu:{b}!")


def _current_npu_index() -> int:
    mod = getattr(torch, "npu", None)
    try:
        return int(mod.current_device()) if mod is not None else 0
    except Exception:  # noqa: BLE001 - a half-initialised device module must not break validation
        return 0


def check_float_dtypes(op: str, allowed: Iterable[torch.dtype], **tensors: Any) -> torch.dtype:
    """All given (non-None) tensors share one dtype from ``allowed``; returns it."""
    allowed = tuple(allowed)
    names = ", ".join(dtype_name(d) for d in allowed)
    items = [(k, t) for k, t in tensors.items() if t is not None]
    for k, t in items:
        check(t.dtype in allowed, op, f"{k} dtype must be one of [{names}], but got {dtype_name(t.dtype)}")
    dts = {t.dtype for _, t in items}
    if len(dts) > 1:
        desc = ", ".join(f"{k}={dtype_name(t.dtype)}" for k, t in items)
        fail(op, f"the dtypes of {', '.join(k for k, _ in items)} must be the same, but got {desc}")
    return items[0][1].dtype


# ------------------------------------------------------------------------------------------- host integer lists

def int_list(op: str, name: str, value: Any, allow_none: bool = True) -> list[int] | None:
    """Parse an ``int[]?`` schema argument like torch's python arg parser: list/tuple of ints, nothing else.

    A Tensor (even a cpu one) is rejected with ``TypeError`` as the real binding does
    (``argument 'actual_seq_qlen' must be tuple of ints, not Tensor``): the op wants host ints, and converting a
    device tensor would be a hidden device->host sync.
    """
    if value is None:
        if allow_none:
            return None
        raise TypeError(f"{op}(): argument '{name}' must be tuple of ints, not NoneType")
    if isinstance(value, torch.Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be tuple of ints, not Tensor "
                        f"(pass a host list, e.g. tuple(cu_seqlens[1:].cpu().tolist()))")
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return [int(value)]
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{op}(): argument '{name}' must be tuple of ints, not {type(value).__name__}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{op}(): argument '{name}' must be tuple of ints, but found element of type "
                            f"{type(v).__name__} at pos {i}")
        out.append(int(v))
    return out


# ------------------------------------------------------------------------------------------------ host reads

def host(t: torch.Tensor) -> torch.Tensor:
    """A cpu copy of ``t`` for the emulator's *own* validation reads (never for user-visible results).

    Goes through the device backend's uncounted path when it offers one, so validation does not show up as a
    user device->host sync in ``counters.d2h_syncs``.
    """
    if t.device.type == "cpu":
        return t
    if t.device.type == "npu" and is_installed():  # the emulator: a zero-copy host alias, not a counted d2h copy
        return cpu_alias(t.detach())  # read-only use by the caller
    return t.detach().to("cpu")


_TRIU_CACHE_ATTR = "_ascend_sim_triu2048_ok"


def is_compressed_causal_mask(mask: torch.Tensor) -> bool:
    """True iff the last two dims of ``mask`` are exactly ``triu(ones(2048, 2048), 1)`` (1/True = masked).

    Checked once per tensor version (cached on the tensor), so a mask reused every layer is read only once.
    Inference tensors (``torch.inference_mode``) have no version counter: they are checked on every call.
    """
    inference = mask.is_inference()
    key = None if inference else (mask._version, mask.data_ptr(), tuple(mask.shape), tuple(mask.stride()))
    cached = getattr(mask, _TRIU_CACHE_ATTR, None)
    if cached is not None and not inference and cached[0] == key:
        return cached[1]
    m = host(mask)
    m2 = m.reshape(-1, 2048, 2048) != 0
    ref = torch.ones(2048, 2048, dtype=torch.bool).triu_(1)
    ok = bool(torch.equal(m2, ref.expand_as(m2)))
    if inference:
        return ok
    with contextlib.suppress(Exception):  # tensors that refuse attributes are just re-checked
        setattr(mask, _TRIU_CACHE_ATTR, (key, ok))
    return ok
