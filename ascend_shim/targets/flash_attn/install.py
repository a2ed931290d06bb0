"""Which flash_attn modules the shim provides: ``flash_attn`` (:mod:`.fa2`) and ``flash_attn_interface``
(:mod:`.fa3`), each with the distribution metadata of the real wheel, unless that wheel is installed; an installed
``flash-attn-npu`` (a third-party Ascend build of the FA2 API) is preferred to the shim's FA2."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext

FA2_VERSION = "2.8.4"  # flash-attention @ 0251105, flash_attn/__init__.py
FA3_VERSION = "3.0.0"  # hopper/__init__.py; the wheel is named flash_attn_3, its module flash_attn_interface
PROVIDER = "ascend_shim.targets.flash_attn"


def _npu_build_module(dist: Any) -> str | None:
    """The top-level module of an installed flash-attn-npu distribution (None if it cannot be told)."""
    text = dist.read_text("top_level.txt") or ""
    names = [n.strip() for n in text.splitlines() if n.strip()]
    if not names:
        names = sorted({str(f).split("/")[0] for f in (dist.files or ())
                        if str(f).endswith(".py") and "/" in str(f) and ".dist-info" not in str(f)})
    return names[0] if names else None


def provide_modules(ctx: PatchContext) -> None:
    """Provide the modules the environment lacks (import aliases and metadata, undone on deactivation)."""
    from ascend_shim.errors import NotNeeded
    from ascend_shim.virtual import real_distribution

    report = ctx.report
    provided = []
    npu_build = real_distribution("flash-attn-npu") or real_distribution("flash_attn_npu")
    if npu_build is not None:
        module = _npu_build_module(npu_build)
        report.note(f"flash_attn: flash-attn-npu {npu_build.version} is installed and preferred over the shim's "
                    f"provider (module {module or '?'})")
        if module and module != "flash_attn" and real_distribution("flash_attn") is None:
            ctx.provide_module("flash_attn", module)
            provided.append(f"flash_attn -> {module} (flash-attn-npu)")
    elif real_distribution("flash_attn") is None:
        ctx.provide_module("flash_attn", f"{PROVIDER}.fa2", distribution="flash_attn", version=FA2_VERSION,
                           summary="flash_attn FA2 API on Ascend NPU, provided by ascend_shim")
        provided.append(f"flash_attn {FA2_VERSION}")
    if real_distribution("flash_attn_3") is None:
        ctx.provide_module("flash_attn_interface", f"{PROVIDER}.fa3", distribution="flash_attn_3",
                           version=FA3_VERSION, summary="flash_attn_interface FA3 API on Ascend NPU, provided by "
                                                        "ascend_shim")
        provided.append(f"flash_attn_interface (flash_attn_3 {FA3_VERSION})")
    if not provided:
        raise NotNeeded("flash_attn and flash_attn_3 are really installed")
    return None
