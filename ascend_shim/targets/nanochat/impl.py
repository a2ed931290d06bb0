"""nanochat's own leftovers on the NPU: Ascend peak flops for MFU, ``--device-type npu``, the NPU FA3 provider
plugged into ``nanochat.flash_attention``, and the KV cache's position kept on the host during decoding."""
from __future__ import annotations

import functools
import inspect
import logging
import re
import sys
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from ascend_shim.context import PatchContext

log = logging.getLogger("ascend_shim")


#: dense bf16/fp16 peak per device, matched on torch.npu.get_device_name() (lower case), most specific first.
#: Figures as in verl's and AReaL's flops tables (datasheet values, not measured here).
ASCEND_PEAK_FLOPS = (
    ("ascend910_93", 354e12),   # Atlas A3 (910C), per device as torch_npu lists it (Ascend910_9391/9392 ...)
    ("ascend910b", 354e12),     # Atlas A2 (Ascend910B1 ... Ascend910B4)
    ("ascend910", 256e12),      # Atlas 800 (Ascend910A / ProA / ProB / PremiumA)
)


def ascend_peak_flops(device_name: str) -> float | None:
    """The dense bf16 peak of an Ascend device name; None for other names."""
    name = str(device_name).lower().replace(" ", "")
    for key, flops in ASCEND_PEAK_FLOPS:
        if key in name:
            return flops
    return None


def device_type_changes(argv: list[str]) -> list[tuple[int, str]]:
    """Positions in ``argv`` whose ``--device-type`` value is ``npu``, with their replacement."""
    changes = []
    for i, arg in enumerate(argv):
        if arg == "--device-type=npu":
            changes.append((i, "--device-type=cuda"))
        elif arg == "--device-type" and i + 1 < len(argv) and argv[i + 1] == "npu":
            changes.append((i + 1, "cuda"))
    return changes


def plug_fa3(ctx: PatchContext) -> None:
    """Make the NPU FA3 provider nanochat's ``_fa3`` where nanochat found none (undone with the patch)."""
    import torch

    from ascend_shim.errors import NotNeeded, TargetMissing

    module = sys.modules["nanochat.flash_attention"]
    current = ctx.need(module, "_fa3", "nanochat.flash_attention")
    resolve = ctx.need(module, "_resolve_use_fa3", "nanochat.flash_attention")
    ctx.need(module, "USE_FA3", "nanochat.flash_attention")
    if current is not None:
        raise NotNeeded(f"nanochat already loaded an FA3 implementation ({getattr(current, '__name__', current)})")
    if not torch.npu.is_available():
        raise NotNeeded("no NPU available")
    from ascend_shim.targets.hf_kernels.impl import load_fa3

    try:
        provider = load_fa3()
    except ImportError as exc:
        raise TargetMissing(f"the NPU FA3 provider cannot be imported ({exc}); nanochat keeps SDPA") from None
    ctx.replace(module, "_fa3", provider)
    ctx.replace(module, "HAS_FA3", True)
    use = bool(resolve())
    ctx.replace(module, "USE_FA3", use)
    ctx.report.translated("nanochat.flash_attention", f"FA3 -> {provider.__name__} (USE_FA3={use})")
    return None


#: the KVCache methods that move ``cache_seqlens``: wrapped to keep the position on the host (get_pos reads it)
KV_WRITERS = ("__init__", "reset", "advance", "prefill")
_ATTRIBUTE_WRITE = re.compile(r"\.cache_seqlens\s*(?:\[[^\]]*\])?\s*(?:[-+*/]?=(?!=)|\.\w+_\()")


def _outside_writers(sources: list[str], cls: type) -> list[str]:
    """Lines of ``sources`` outside ``cls``'s known writers that write ``.cache_seqlens`` in place or rebind it."""
    known = set()
    for name in KV_WRITERS + ("get_pos",):
        method = cls.__dict__.get(name)
        if method is not None:
            known.update(inspect.getsource(method).splitlines())
    return [line.strip() for source in sources for line in source.splitlines()
            if _ATTRIBUTE_WRITE.search(line) and line not in known]


def keep_kvcache_position_on_host(ctx: PatchContext) -> None:
    """Wrap nanochat's KVCache writers so that ``get_pos`` answers from a host copy of the position while it holds."""
    from ascend_shim.errors import TargetMissing

    cls = ctx.need(sys.modules["nanochat.engine"], "KVCache", "nanochat.engine")
    originals = {name: ctx.need(cls, name, "nanochat.engine.KVCache") for name in KV_WRITERS + ("get_pos",)}
    try:
        sources = [inspect.getsource(sys.modules["nanochat.engine"])]
        if "nanochat.gpt" in sys.modules:
            sources.append(inspect.getsource(sys.modules["nanochat.gpt"]))
    except (OSError, TypeError) as exc:
        raise TargetMissing(f"nanochat's source cannot be read to check who moves the KV cache ({exc})") from None
    others = _outside_writers(sources, cls)
    if others:
        raise TargetMissing(f"cache_seqlens is also written outside KVCache's {', '.join(KV_WRITERS)}: {others[:3]}")
    check = ctx.emulated  # the emulated NPU (either torch_npu layer): its memory is read without a sync
    pid = ctx.patch.id
    key = "_ascend_shim_host_position"

    def version(t):
        try:
            return t._version
        except RuntimeError:  # an inference tensor has no version counter
            return None

    def keep(self, position):
        t = self.cache_seqlens
        self.__dict__[key] = (t, position, version(t))

    def kept(self):
        """The host position while it is known to hold, else None."""
        held = self.__dict__.get(key)
        if held is None:
            return None
        t, position, seen = held
        if t is not self.cache_seqlens or (seen is not None and seen != t._version):
            return None
        return position

    def __init__(self, *args, **kwargs):
        originals["__init__"](self, *args, **kwargs)
        keep(self, 0)  # cache_seqlens starts as zeros

    def reset(self, *args, **kwargs):
        originals["reset"](self, *args, **kwargs)
        keep(self, 0)

    def advance(self, num_tokens):
        position = kept(self)
        originals["advance"](self, num_tokens)
        if position is not None and type(num_tokens) is int:
            keep(self, position + num_tokens)
        else:
            self.__dict__.pop(key, None)

    def prefill(self, other):
        originals["prefill"](self, other)
        position = kept(other)
        if position is not None:
            keep(self, position)
        else:
            self.__dict__.pop(key, None)

    def get_pos(self):
        position = kept(self)
        if position is None:
            position = originals["get_pos"](self)
            keep(self, position)
        elif check:
            _check_on_the_emulator(ctx, self.cache_seqlens, position, pid)
        return position

    for name, new in (("__init__", __init__), ("reset", reset), ("advance", advance), ("prefill", prefill),
                      ("get_pos", get_pos)):
        functools.update_wrapper(new, originals[name])
        ctx.replace(cls, name, new)
    return None


def _check_on_the_emulator(ctx: PatchContext, cache_seqlens: Any, position: int, patch_id: str) -> None:
    """The emulated NPU's memory is host memory: compare the kept position with the device value, no sync."""
    actual = int(ctx.emulated_memory(cache_seqlens)[0])
    if actual != position:
        raise RuntimeError(f"{patch_id}: the KV cache position kept on the host ({position}) differs from "
                           f"cache_seqlens ({actual}): something outside KVCache moved it. Run with "
                           f"ASCEND_SHIM_DISABLE={patch_id} and report the case.")


def get_peak_flops(ctx: PatchContext) -> Callable[..., Any]:
    orig = ctx.original

    @functools.wraps(orig)
    def get_peak_flops(device_name, *args, **kwargs):
        flops = ascend_peak_flops(device_name)
        return orig(device_name, *args, **kwargs) if flops is None else flops

    return get_peak_flops


def device_type_arg(ctx: PatchContext) -> Callable[[], object]:
    from ascend_shim.errors import NotNeeded

    argv = sys.argv
    changes = device_type_changes(argv)
    if not changes:
        raise NotNeeded("no --device-type npu on the command line")
    old = list(argv)
    for i, value in changes:
        argv[i] = value
    ctx.report.translated("nanochat --device-type", "npu -> cuda (runs on the NPU under the shim)")

    def undo():
        if sys.argv is argv:
            argv[:] = old

    return undo


def convert_to_float8_training(ctx: PatchContext) -> Callable[..., Any]:
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def convert_to_float8_training(module, *args, **kwargs):
        report.fallback("nanochat --fp8", "fp8 training turned off (no fp8 matmul on Ascend A2/A3); the model "
                                          "trains in its compute dtype")
        log.warning("nanochat --fp8: fp8 training is not available on Ascend NPUs; training in the compute "
                    "dtype instead (ascend_shim patch nanochat.fp8)")
        return module

    return convert_to_float8_training
