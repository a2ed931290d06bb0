"""AReaL: the ``device`` setting of NPU ports of AReaL's vLLM config, checked, recorded and kept from vLLM.

A vLLM server's device follows AReaL's NPU platform (ASCEND_RT_VISIBLE_DEVICES, vLLM-Ascend), so the value only
has to name an accelerator; it never reaches the server's command line.
"""
from __future__ import annotations

import functools
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from ascend_shim.context import PatchContext
    from ascend_shim.report import Report


#: what ``vllm.device`` may say, and what it means under the shim
VLLM_DEVICES = {"npu": "npu", "cuda": "npu", "auto": "npu", "gpu": "npu"}


def check_vllm_device(value: Any, report: Report, where: str) -> str:
    """The device ``value`` set at ``where`` stands for (recorded); a clear ValueError for anything else."""
    name = str(value).strip().lower().partition(":")[0]
    if name not in VLLM_DEVICES:
        raise ValueError(f"{where}={value!r}: under ascend_shim a vLLM server runs on the NPU platform "
                         f"(accepted: {', '.join(sorted(VLLM_DEVICES))}); patch areal.vllm_config_device")
    report.translated(where, f"{value!r}: the vLLM server device follows AReaL's NPU platform "
                             "(ASCEND_RT_VISIBLE_DEVICES, vLLM-Ascend); not passed to vLLM")
    return VLLM_DEVICES[name]


def pop_vllm_device(cfg: Any, config_cls: Any, report: Report) -> None:
    """Remove ``device`` from a vLLMConfig node (the node itself, or ``vllm`` / ``*.vllm`` children)."""
    try:
        from omegaconf import DictConfig, OmegaConf, open_dict
    except ImportError:
        return
    if not isinstance(cfg, DictConfig):
        return
    nodes = []
    if getattr(config_cls, "__name__", "") == "vLLMConfig":
        nodes.append(("vllm", cfg))
    for key in list(cfg.keys()):
        child = cfg.get(key) if OmegaConf.is_dict(cfg) else None
        if not isinstance(child, DictConfig):
            continue
        if key in ("vllm", "vllm_config"):
            nodes.append((str(key), child))
        inner = child.get("vllm_config") if "vllm_config" in child else None
        if isinstance(inner, DictConfig):
            nodes.append((f"{key!s}.vllm_config", inner))
    for where, node in nodes:
        if "device" in node:
            with open_dict(node):
                value = node.pop("device")
            check_vllm_device(value, report, f"{where}.device")


def vllm_config_init(ctx: PatchContext) -> Callable[..., Any]:
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def __init__(self, *args, device=None, **kwargs):
        orig(self, *args, **kwargs)
        if device is not None:
            object.__setattr__(self, "device", check_vllm_device(device, report, "vLLMConfig.device"))

    return __init__


def to_structured_cfg(ctx: PatchContext) -> Callable[..., Any]:
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def to_structured_cfg(cfg, config_cls, *args, **kwargs):
        pop_vllm_device(cfg, config_cls, report)
        return orig(cfg, config_cls, *args, **kwargs)

    return to_structured_cfg
