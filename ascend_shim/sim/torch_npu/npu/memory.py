"""Memory statistics of torch.npu, from the emulated device's caching allocator (:mod:`ascend_shim.sim.memory_stats`,
shared with the real layer's native stand-in): a freed block stays reserved until empty_cache(), so reserved >=
allocated as on torch_npu. All numbers are real measurements of the emulated device, never placeholders.
"""
from __future__ import annotations

import collections
import pickle
import threading
import warnings
from typing import Any

import torch

from ... import memory_stats as _memory
from ._unemulated import module_getattr, placeholder_class, placeholder_function
from ._utils import _checked_index, _native

__all__ = [
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_cached",
    "max_memory_cached", "reset_peak_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
    "reset_accumulated_memory_stats", "empty_cache", "memory_stats", "memory_stats_as_nested_dict",
    "memory_summary", "mem_get_info", "set_per_process_memory_fraction", "get_per_process_memory_fraction",
    "memory_snapshot", "caching_allocator_alloc", "caching_allocator_delete", "get_allocator_backend",
    "empty_virt_addr_cache", "host_empty_cache", "MemPool", "use_mem_pool", "NPUPluggableAllocator",
    "change_current_allocator", "host_memory_stats", "host_memory_stats_as_nested_dict",
    "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats",
]


def _raw(device) -> dict:
    return _native().memory_stats(_checked_index(device))


def memory_allocated(device=None) -> int:
    """Bytes of live npu storage on the device."""
    return _raw(device)["live_bytes"]


def max_memory_allocated(device=None) -> int:
    """Peak of memory_allocated since start or the last reset_peak_memory_stats()."""
    return _raw(device)["peak_bytes"]


def memory_reserved(device=None) -> int:
    """Bytes the caching allocator holds for the device: blocks in use and blocks cached for reuse."""
    return _raw(device)["reserved_bytes"]


def max_memory_reserved(device=None) -> int:
    return _raw(device)["peak_reserved_bytes"]


def memory_cached(device=None) -> int:
    """Deprecated alias of memory_reserved (kept by torch_npu)."""
    return memory_reserved(device)


def max_memory_cached(device=None) -> int:
    """Deprecated alias of max_memory_reserved (kept by torch_npu)."""
    return max_memory_reserved(device)


def reset_peak_memory_stats(device=None) -> None:
    _native().reset_peak(_checked_index(device))


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device=None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    _native().reset_accumulated(_checked_index(device))


def empty_cache() -> None:
    """Return the cached (free but reserved) blocks of every device to the host."""
    _memory.empty_cache()


def memory_stats_as_nested_dict(device=None) -> dict[str, Any]:
    return _memory.nested(_checked_index(device))


def memory_stats(device=None) -> collections.OrderedDict[str, int]:
    """Flat CUDA-style keys, e.g. ``allocated_bytes.all.peak`` (only the "all" pool: there are no pools)."""
    flat = []

    def walk(prefix, value):
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(f"{prefix}.{key}" if prefix else key, sub)
        else:
            flat.append((prefix, value))

    walk("", memory_stats_as_nested_dict(device))
    return collections.OrderedDict(sorted(flat))


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """torch_npu's table of the allocator's statistics for the device (per pool unless ``abbreviated``)."""
    return _memory.summary(_checked_index(device), abbreviated)


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the emulated device: total is its nominal HBM size, free what is not reserved."""
    total = _native().total_memory()
    return total - memory_reserved(device), total


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Cap this process's npu memory; allocations past the cap raise torch.OutOfMemoryError."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _native().set_memory_fraction(fraction, _checked_index(device))


def get_per_process_memory_fraction(device=None) -> float:
    return _native().memory_fraction(_checked_index(device))


# ---- raw allocations --------------------------------------------------------------------------------------

_raw_blocks: dict[int, torch.Tensor] = {}
_raw_lock = threading.Lock()


def caching_allocator_alloc(size, device=None, stream=None) -> int:
    """Allocate ``size`` bytes on the device and return the address (freed by caching_allocator_delete)."""
    from .streams import Stream

    index = _checked_index(device)
    if stream is not None and not isinstance(stream, (Stream, int)):
        raise TypeError("Invalid type for stream argument, must be `torch_npu.npu.Stream` or `int` representing a "
                        "pointer to a existing stream")
    block = torch.empty(int(size), dtype=torch.uint8, device=torch.device("npu", index))
    with _raw_lock:
        _raw_blocks[block.data_ptr()] = block
    return block.data_ptr()


def caching_allocator_delete(mem_ptr) -> None:
    with _raw_lock:
        if _raw_blocks.pop(int(mem_ptr), None) is None:
            raise RuntimeError(f"caching_allocator_delete: {mem_ptr:#x} was not allocated by caching_allocator_alloc")


def get_allocator_backend() -> str:
    """"native": the emulator's own caching allocator."""
    return "native"


def empty_virt_addr_cache() -> None:
    """Nothing is cached (no virtual-address reservations)."""


def host_empty_cache() -> None:
    """Return the pinned host blocks the caching host allocator holds for reuse to the host."""
    _native().host_empty_cache()


# ---- snapshots ---------------------------------------------------------------------------------------------

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


def memory_snapshot(mempool_id=None) -> list[dict]:
    """The allocator's segments on every device: each block it holds, in use or cached (blocks are not split)."""
    if mempool_id is not None:
        raise ValueError(f"no memory pool {tuple(mempool_id)!r}: the emulated allocator has only the default pool")
    return _memory.segments()


def _record_memory_history(enabled="all", *args, **kwargs) -> None:
    """Accepted; the snapshot lists the blocks, but alloc/free traces and stack frames are not recorded by
    the emulated allocator (warned once when enabled). Takes torch_npu's arguments (``context``, ``stacks``,
    ``max_entries``, ``device``) after ``enabled``."""
    _memory.record_history(enabled, *args, **kwargs)
    if enabled:
        _warn_once("history", "torch.npu.memory._record_memory_history: the emulated NPU's snapshots list the "
                              "allocator's blocks but no allocation stack frames or alloc/free trace")


def _snapshot(device=None, augment_with_fx_traces=False) -> dict:
    """``{"segments", "device_traces", "allocator_settings"}`` like torch_npu; the traces are empty."""
    return _memory.snapshot()


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False) -> None:
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(augment_with_fx_traces=augment_with_fx_traces), f)


# ---- not emulated ------------------------------------------------------------------------------------------

_NO_POOLS = "the emulated allocator has a single pool per device (no private pools)"
_NO_PLUGGABLE = "the emulated allocator cannot be replaced"
_NO_HOST_STATS = "pinned host memory is not accounted by the emulated allocator"

MemPool = placeholder_class("torch.npu.MemPool", _NO_POOLS, params="allocator=None, use_on_oom=False, no_split=False")
use_mem_pool = placeholder_function("torch.npu.use_mem_pool", _NO_POOLS, params="pool, device=None")
NPUPluggableAllocator = placeholder_class("torch.npu.NPUPluggableAllocator", _NO_PLUGGABLE,
                                          params="path_to_so_file, alloc_fn_name, free_fn_name")
change_current_allocator = placeholder_function("torch.npu.change_current_allocator", _NO_PLUGGABLE,
                                                params="allocator")
host_memory_stats = placeholder_function("torch.npu.host_memory_stats", _NO_HOST_STATS, params="")
host_memory_stats_as_nested_dict = placeholder_function("torch.npu.host_memory_stats_as_nested_dict",
                                                        _NO_HOST_STATS, params="")
reset_accumulated_host_memory_stats = placeholder_function("torch.npu.reset_accumulated_host_memory_stats",
                                                           _NO_HOST_STATS, params="")
reset_peak_host_memory_stats = placeholder_function("torch.npu.reset_peak_host_memory_stats", _NO_HOST_STATS,
                                                    params="")

__getattr__ = module_getattr("torch.npu.memory")
