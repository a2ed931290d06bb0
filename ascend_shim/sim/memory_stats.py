"""The emulated NPU's caching allocator as torch_npu reports it: statistics and snapshots in its layout.

Both torch_npu layers read the device's memory through here (the builtin ``torch.npu.memory`` and the stand-in
``torch_npu._C._npu_memoryStats`` / ``_npu_memorySnapshot``), so the two answer alike. The allocator itself is
the extension's (``device.cpp``): a freed block stays reserved for the next allocation that fits until
``empty_cache()``, so ``memory_reserved() >= memory_allocated()`` as on the hardware; blocks of at most 1 MiB
count to the small pool, larger ones to the large pool; a block is never split.
"""
from __future__ import annotations

import sys
from typing import Any

from . import _extension

_POOLS = ("all", "small_pool", "large_pool")
#: torch_npu's keys, each from one counter of the allocator
_BYTES = {"allocated_bytes": "bytes", "active_bytes": "bytes", "requested_bytes": "bytes",
          "reserved_bytes": "reserved"}
_COUNTS = {"allocation": "blocks", "active": "blocks", "segment": "segments"}


def nested(index: int) -> dict[str, Any]:
    """``torch_npu._C._npu_memoryStats(device)``: each statistic per pool, as current/peak/allocated/freed."""
    native = _extension.load()
    pools = native.pool_stats(index)
    raw = native.memory_stats(index)
    zero = {"current": 0, "peak": 0, "allocated": 0, "freed": 0}
    stats: dict[str, Any] = {}
    for key, counter in {**_BYTES, **_COUNTS}.items():
        stats[key] = {pool: dict(pools[pool][counter]) for pool in _POOLS}
    for key in ("inactive_split", "inactive_split_bytes"):  # blocks are never split
        stats[key] = {pool: dict(zero) for pool in _POOLS}
    stats.update({"oversize_allocations": dict(zero), "oversize_segments": dict(zero), "num_alloc_retries": 0,
                  "num_ooms": raw["ooms"], "num_sync_all_streams": 0,
                  "num_device_alloc": raw["segments_allocated"], "num_device_free": raw["segments_freed"],
                  "max_split_size": -1})
    return stats


def segments(index: int | None = None) -> list[dict]:
    """``memory_snapshot()``'s segments: every block the allocator holds, in use or cached, one block each."""
    native = _extension.load()
    devices = range(native.device_count()) if index is None else (index,)
    out = []
    for device in devices:
        for address, capacity, allocated in native.segments(device):
            state = "active_allocated" if allocated else "inactive"
            block = {"address": address, "size": capacity, "requested_size": allocated, "state": state,
                     "frames": []}
            out.append({"device": device, "address": address, "total_size": capacity, "allocated_size":
                        capacity if allocated else 0, "active_size": capacity if allocated else 0,
                        "requested_size": allocated, "stream": 0,
                        "segment_type": "small" if capacity <= (1 << 20) else "large", "segment_pool_id": (0, 0),
                        "is_expandable": False, "frames": [], "blocks": [block]})
    return sorted(out, key=lambda s: (s["device"], s["address"]))


def snapshot() -> dict[str, Any]:
    """``torch_npu._C._npu_memorySnapshot(None)``: segments, no alloc/free trace (see ``record_history``)."""
    native = _extension.load()
    return {"segments": segments(), "device_traces": [[] for _ in range(native.device_count())],
            "allocator_settings": {"expandable_segments": False}}


def empty_cache() -> None:
    """Return every cached block of every device to the host."""
    native = _extension.load()
    for index in range(native.device_count()):
        native.empty_cache(index)


_history: dict[str, Any] = {"enabled": None}


def record_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None) -> None:
    """``_record_memory_history``: accepted (and validated); the emulated allocator records no alloc/free trace
    and no stack frames, so snapshots list the blocks only."""
    if enabled not in (None, "state", "all", True, False):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    _history["enabled"] = enabled or None


def history_enabled() -> bool:
    return bool(_history["enabled"])


#: the rows of torch_npu's memory summary: (statistic, label, kind)
_SUMMARY_ROWS = (("allocated_bytes", "Allocated memory", "size"), ("active_bytes", "Active memory", "size"),
                 ("reserved_bytes", "NPU reserved memory", "size"),
                 ("inactive_split_bytes", "Non-releasable memory", "size"), ("allocation", "Allocations", "count"),
                 ("active", "Active allocs", "count"), ("segment", "NPU reserved segments", "count"),
                 ("inactive_split", "Non-releasable allocs", "count"))
_RULE, _DOUBLE = "-" * 75, "=" * 75


def _scaled(value: int, reference: float, units: tuple[str, ...], base: int, threshold: int) -> tuple[int, str]:
    """``value`` in the unit that suits ``reference`` (the row's first value, so a row shares one unit)."""
    unit = units[0]
    for bigger in units[1:]:
        if reference < threshold:
            break
        unit, value, reference = bigger, value // base, reference / base
    return value, unit


def _size(value: int, reference: float) -> str:
    value, unit = _scaled(value, reference, ("B ", "KB", "MB", "GB", "TB", "PB"), 1024, 768 * 1024)
    return f"{value:7d} {unit}"


def _count(value: int, reference: float) -> str:
    value, unit = _scaled(value, reference, (" ", "K", "M"), 1000, 750 * 1000)
    return f"{value:7d} {unit} "


def summary(index: int, abbreviated: bool = False) -> str:
    """``torch.npu.memory_summary``: torch_npu's table of the allocator's statistics (75 columns)."""
    stats = nested(index)
    lines = [_DOUBLE, f" {'':16} PyTorch NPU memory summary, device ID {index:<18d} ", _RULE,
             f"  {'':9} NPU OOMs: {stats['num_ooms']:<13d} | {'':6} npuMalloc retries: "
             f"{stats['num_alloc_retries']:<9d}  ", _DOUBLE,
             "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]

    def row(label: str, values: dict, reference: dict, fmt) -> str:
        cells = " | ".join(fmt(values[key], reference[key]) for key in ("current", "peak", "allocated", "freed"))
        return f" {label:<21} | {cells} "

    for key, label, kind in _SUMMARY_ROWS:
        fmt = _size if kind == "size" else _count
        lines.append(_RULE)
        pools = [("all", label)] if abbreviated else [("all", label), ("large_pool", "      from large pool"),
                                                      ("small_pool", "      from small pool")]
        for pool, name in pools:
            lines.append(row(name, stats[key][pool], stats[key]["all"], fmt))
    for key, label in (("oversize_allocations", "Oversize allocations"),
                       ("oversize_segments", "Oversize NPU segments")):
        lines += [_RULE, row(label, stats[key], stats[key], _count)]
    lines.append(_DOUBLE)
    return "|" + "|\n|".join(lines) + "|\n"
