"""Device integer tensors (``cu_seqlens``, ``cache_seqlens``) as the host lists the NPU ops want.

flash-attn takes ``cu_seqlens`` as device tensors; ``npu_fusion_attention`` (TND) and the inference ops take host
``int[]``. Reading a device tensor is a device-to-host sync, so every distinct tensor is read once and the list is
reused by every layer that passes the same tensor in the same step (a model passes one ``cu_seqlens`` to all its
layers). Two tensors read together (``cu_seqlens_q`` and ``cu_seqlens_k``) cost one sync, not two.

Invalidation: an entry is keyed on the tensor object (a weak reference: the entry dies with the tensor) and
validated on every hit against its :func:`state` (storage, version counter, shape, stride, dtype, device); an
in-place update (``cache_seqlens += 1``) bumps ``_version``, a ``set_`` changes ``data_ptr``/shape, so a stale list
is never served. Host (cpu) tensors are read directly and not cached (no sync to save). Inference tensors (made
under ``torch.inference_mode``, as generation loops do) have no version counter, so an in-place update could not be
detected: they are read on every call (still one transfer per call), never cached.
"""
from __future__ import annotations

import threading
import weakref

import torch

_lock = threading.Lock()
_cache: dict[int, tuple] = {}  # id(tensor) -> (weakref, key, list)


def state(t: torch.Tensor) -> tuple:
    """What changes when a tensor's contents may have: in-place writes (version counter), ``set_`` (storage,
    shape, stride), a dtype or device swap. Not for inference tensors (no version counter)."""
    return (t.data_ptr(), t._version, tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device))


def _lookup(t: torch.Tensor):
    entry = _cache.get(id(t))
    if entry is not None and entry[0]() is t and entry[1] == state(t):
        return entry[2]
    return None


def _store(t: torch.Tensor, values: list[int]) -> None:
    tid = id(t)

    def forget(_ref, tid=tid):
        with _lock:
            entry = _cache.get(tid)
            if entry is not None and entry[0] is _ref:
                del _cache[tid]

    with _lock:
        _cache[tid] = (weakref.ref(t, forget), state(t), values)


def host_lists(*tensors: torch.Tensor) -> list[list[int]]:
    """Each 1-D integer tensor as a Python list; at most one device-to-host transfer for all uncached ones."""
    out: list = [None] * len(tensors)
    todo: list[int] = []
    for i, t in enumerate(tensors):
        if t.device.type == "cpu":
            out[i] = t.tolist()
            continue
        hit = None if t.is_inference() else _lookup(t)
        if hit is not None:
            out[i] = hit
        elif not any(tensors[j] is t for j in todo):
            todo.append(i)
    if todo:
        parts = [tensors[i].reshape(-1).to(torch.int64) for i in todo]
        flat = (torch.cat(parts) if len(parts) > 1 else parts[0]).tolist()  # the one sync
        pos = 0
        for i, part in zip(todo, parts, strict=True):
            values = flat[pos:pos + part.numel()]
            pos += part.numel()
            if not tensors[i].is_inference():
                _store(tensors[i], values)
            out[i] = values
    for i, t in enumerate(tensors):
        if out[i] is None:  # a duplicate of a tensor read above
            out[i] = out[next(j for j in todo if tensors[j] is t)]
    return out


def clear() -> None:
    with _lock:
        _cache.clear()
