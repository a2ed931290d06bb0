"""The shim listening to the emulated NPU (:mod:`ascend_shim.sim.events`): the operators that fall back to the CPU go
into the migration report at their call sites, and libraries' cached answers to "is torch_npu importable?" are
forgotten whenever the builtin torch_npu layer comes or goes.

The emulator knows nothing of the shim; :mod:`.backend` subscribes when it brings the emulated NPU up.
"""
from __future__ import annotations

import sys
from typing import Any

from .report import REPORT

#: library probes that cache whether ``torch_npu`` is importable (module, function)
_CACHED_NPU_PROBES = (("transformers.utils.import_utils", "is_torch_npu_available"),
                      ("accelerate.utils.imports", "is_npu_available"))


def listen() -> None:
    """Subscribe to the emulated NPU's events (idempotent; for the rest of the process, as they are facts about the
    run whether or not the shim is still active)."""
    from .sim import events

    events.subscribe(_on_event)


def _on_event(kind: str, fields: dict[str, Any]) -> None:
    if kind == "cpu_fallback":
        _record_fallback(**fields)
    elif kind == "no_kernel_list":
        REPORT.note(f"the emulated NPU knows no NPU kernel list for torch_npu {fields['release']}: operators that "
                    f"would fall back to the CPU on the NPU are not reported")
    elif kind == "layer":
        _forget_npu_probes()


def _record_fallback(op: str, via: str, refused: bool, frame: Any, site: tuple | None) -> None:
    through = f" (reached through {via})" if via != op else ""
    if refused:
        category = "unsupported"
        detail = f"no NPU kernel; TORCH_NPU_FALLBACK_CPU_DISABLE=1 forbids torch_npu's CPU fallback: raises{through}"
    else:
        category, detail = "fallback", f"no NPU kernel: torch_npu runs it on the CPU{through}"
    REPORT.event(category, op, detail, frame=frame, site=site)


def _forget_npu_probes() -> None:
    for module_name, function in _CACHED_NPU_PROBES:
        cache_clear = getattr(getattr(sys.modules.get(module_name), function, None), "cache_clear", None)
        if cache_clear is not None:
            cache_clear()
