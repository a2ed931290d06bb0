"""Memory statistics of torch.npu, from the emulator's own accounting of live npu storage per device.

The emulator has no caching allocator: every npu storage is one host allocation, freed when the storage dies.
So reserved == allocated, a "segment" is an allocation, and empty_cache() has nothing to release. All numbers
are real measurements of the emulated device, never placeholders.
"""
from __future__ import annotations

import collections
from typing import Any

from ._unemulated import SUBMODULE_NAMES, module_getattr
from ._utils import _checked_index, _native

__all__ = [
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_cached",
    "max_memory_cached", "reset_peak_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
    "reset_accumulated_memory_stats", "empty_cache", "memory_stats", "memory_stats_as_nested_dict",
    "memory_summary", "mem_get_info", "set_per_process_memory_fraction", "get_per_process_memory_fraction",
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
    """Equal to memory_allocated(): without a caching allocator nothing is held in reserve."""
    return memory_allocated(device)


def max_memory_reserved(device=None) -> int:
    return max_memory_allocated(device)


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
    """Nothing is cached: freed npu storage returns to the host at once."""


def memory_stats_as_nested_dict(device=None) -> dict[str, Any]:
    raw = _raw(device)
    blocks = {"current": raw["live_blocks"], "peak": raw["peak_blocks"], "allocated": raw["allocated_blocks"],
              "freed": raw["freed_blocks"]}
    nbytes = {"current": raw["live_bytes"], "peak": raw["peak_bytes"], "allocated": raw["allocated_bytes"],
              "freed": raw["freed_bytes"]}
    stats: dict[str, Any] = {
        "num_alloc_retries": 0,
        "num_ooms": raw["ooms"],
        "num_sync_all_streams": 0,
        "num_device_alloc": raw["allocated_blocks"],
        "num_device_free": raw["freed_blocks"],
    }
    for name in ("allocation", "segment", "active"):
        stats[name] = {"all": dict(blocks)}
    for name in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
        stats[name] = {"all": dict(nbytes)}
    return stats


def memory_stats(device=None) -> "collections.OrderedDict[str, int]":
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
    index = _checked_index(device)
    raw = _native().memory_stats(index)

    def size(n):
        for unit in ("B", "KiB", "MiB", "GiB"):
            if abs(n) < 1024 or unit == "GiB":
                return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
            n /= 1024

    rows = [
        ("Allocated memory", size(raw["live_bytes"]), size(raw["peak_bytes"]), size(raw["allocated_bytes"]),
         size(raw["freed_bytes"])),
        ("Allocations", raw["live_blocks"], raw["peak_blocks"], raw["allocated_blocks"], raw["freed_blocks"]),
    ]
    lines = [f"|  Emulated NPU memory summary, device ID {index} (ascend_shim sim; reserved == allocated)",
             f"|  OOMs: {raw['ooms']}",
             "| {:<20} | {:>12} | {:>12} | {:>12} | {:>12} |".format("Metric", "Cur Usage", "Peak Usage",
                                                                    "Tot Alloc", "Tot Freed")]
    lines += ["| {:<20} | {:>12} | {:>12} | {:>12} | {:>12} |".format(*map(str, row)) for row in rows]
    return "\n".join(lines) + "\n"


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the emulated device: total is its nominal HBM size, free what is not live."""
    total = _native().total_memory()
    return total - memory_allocated(device), total


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Cap this process's npu memory; allocations past the cap raise torch.OutOfMemoryError."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    _native().set_memory_fraction(fraction, _checked_index(device))


def get_per_process_memory_fraction(device=None) -> float:
    return _native().memory_fraction(_checked_index(device))


__getattr__ = module_getattr("torch.npu.memory", SUBMODULE_NAMES["memory"])
