"""Twinkle: ``device_type='cuda'`` of its device meshes read as npu, and ``importlib.util.find_spec`` as Twinkle's
``framework`` module sees it (None for a module whose parent package is not installed)."""
from __future__ import annotations

import functools
import importlib
import importlib.util
import types
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

from ascend_shim.targets._shared.npu_checks import npu_available

if TYPE_CHECKING:
    from types import ModuleType

    from ascend_shim.context import PatchContext
    from ascend_shim.report import Report


def translate_mesh_type(value: Any) -> Any:
    """'npu' for a 'cuda' / 'cuda:N' device type; any other value unchanged."""
    if isinstance(value, str) and value.partition(":")[0].strip().lower() == "cuda":
        return "npu"
    return value


def find_spec_absent_parent(report: Report) -> Callable:
    """``importlib.util.find_spec`` that answers None for ``a.b`` when package ``a`` is not installed (as it does
    for an absent top-level module); Python raises ModuleNotFoundError for the missing parent instead."""

    def find_spec(name, package=None):
        try:
            return importlib.util.find_spec(name, package)
        except ModuleNotFoundError as exc:
            parent = importlib.util.resolve_name(name, package).rpartition(".")[0]
            if not exc.name or not parent or not (parent == exc.name or parent.startswith(exc.name + ".")):
                raise
            report.fallback("twinkle importlib.util.find_spec", f"{name!r} -> None ({exc.name} is not installed)")
            return None

    return find_spec


class _ImportlibView(types.ModuleType):
    """``importlib`` as one module sees it: ``importlib.util.find_spec`` replaced, everything else the real one."""

    def __init__(self, find_spec: Callable):
        super().__init__("importlib", importlib.__doc__)
        util: Any = types.ModuleType("importlib.util", importlib.util.__doc__)
        util.find_spec = find_spec
        util.__getattr__ = lambda name: getattr(importlib.util, name)
        self.util = util

    def __getattr__(self, name):
        return getattr(importlib, name)


def importlib_without_absent_parents(report: Report) -> types.ModuleType:
    """``importlib`` for one module: its ``util.find_spec`` answers None where the parent package is absent."""
    return _ImportlibView(find_spec_absent_parent(report))


def get_platform(ctx: PatchContext) -> staticmethod:
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def get_platform(platform=None):
        if (platform is None or str(platform).upper() in ("GPU", "CUDA")) and npu_available():
            if platform is not None:
                report.translated("twinkle Platform.get_platform", f"{platform!r} -> 'NPU'")
            return orig("NPU")
        return orig(platform)

    return staticmethod(get_platform)


def device_mesh_post_init(ctx: PatchContext) -> Callable[..., Any]:
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def __post_init__(self, *args, **kwargs):
        new = translate_mesh_type(self.device_type)
        if new != self.device_type:
            report.translated("twinkle DeviceMesh", f"device_type={self.device_type!r} -> {new!r}")
            self.device_type = new
        return orig(self, *args, **kwargs)

    return __post_init__


def device_group_init(ctx: PatchContext) -> Callable[..., Any]:
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        value = getattr(self, "device_type", None)
        if isinstance(value, str) and value.strip().upper() in ("GPU", "CUDA") and npu_available():
            report.translated("twinkle DeviceGroup", f"device_type={value!r} -> 'NPU'")
            self.device_type = "NPU"

    return __init__


def find_spec_megatron(ctx: PatchContext) -> ModuleType:
    return importlib_without_absent_parents(ctx.report)
