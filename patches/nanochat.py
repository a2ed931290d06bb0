"""nanochat (karpathy/nanochat, run from a git checkout): the fixes a generic CUDA -> NPU redirect leaves over.

The torch-level sets already carry most of nanochat: ``get_device_capability()`` answers (8, 0) so the
import-time bf16 check in ``nanochat/common.py`` works (torch_cuda), ``torch.compile`` of the model and of the
optimizer steps uses an NPU-capable backend (torch_features), ``init_process_group("nccl", device_id=cuda:N)``
and ``ReduceOp.AVG`` on hccl (torch_distributed), ``torch.amp.GradScaler()`` for NANOCHAT_DTYPE=float16
(torch_devices), ``device_type == "cuda"`` branches (user_code), ``PYTORCH_ALLOC_CONF`` set by the scripts
before importing torch (environment). This set adds what is nanochat's own:

* FlashAttention-3: nanochat loads it from the ``kernels`` hub at import time; the hf_kernels set answers that
  locally, and when ``kernels`` is not installed this set plugs the same NPU FA3 provider in, so attention
  (sliding windows, in-place kv cache) runs on NPU fused attention instead of the SDPA fallback;
* ``--fp8``: Float8 training needs ``torch._scaled_mm`` fp8 GEMMs, absent on Atlas A2/A3; the conversion is
  turned off (warned and reported) and the model trains in its compute dtype;
* MFU: ``get_peak_flops`` knows Ascend parts (it answers inf, i.e. MFU 0%, for them);
* ``--device-type npu`` (how NPU ports of nanochat spell it) is accepted by every script, as ``cuda``;
* decode: the KV cache's position is kept on the host, so a generated token costs one device-to-host read (the
  sampler's), not two.

nanochat is not a distribution (run from a checkout; PyPI's ``nanochat`` is an unrelated package), so the set
has no version gate: its patches wait for ``nanochat.*`` modules and skip, reported, where the attributes they
need are missing (another nanochat commit).
"""
from __future__ import annotations

import functools
import inspect
import logging
import re
import sys

from ascend_shim.registry import PatchSet

log = logging.getLogger("ascend_shim")
REMOVE = "nanochat gains an NPU code path upstream"
nanochat = PatchSet(
    id="nanochat", title="nanochat: FA3 on NPU, --fp8 off, Ascend peak flops, --device-type npu",
    checked_against="karpathy/nanochat @ 92d63d4e8bb4 (2026-07-03), run from a git checkout; scripts/chat_web.py "
                    "(removed in da32e1d) @ 21a7774eab39",
)

#: dense bf16/fp16 peak per device, matched on torch.npu.get_device_name() (lower case), most specific first.
#: Figures as in verl's and AReaL's flops tables (datasheet values, not measured here).
ASCEND_PEAK_FLOPS = (
    ("ascend910_93", 354e12),   # Atlas A3 (910C), per device as torch_npu lists it (Ascend910_9391/9392 ...)
    ("ascend910b", 354e12),     # Atlas A2 (Ascend910B1 ... Ascend910B4)
    ("ascend910", 256e12),      # Atlas 800 (Ascend910A / ProA / ProB / PremiumA)
)


def ascend_peak_flops(device_name: str) -> float | None:
    name = str(device_name).lower().replace(" ", "")
    for key, flops in ASCEND_PEAK_FLOPS:
        if key in name:
            return flops
    return None


@nanochat.patch("nanochat.common:get_peak_flops", id="nanochat.peak_flops",
                why="base_train computes MFU from get_peak_flops(torch.cuda.get_device_name(0)); Ascend names are "
                    "not in its table, so it warns and answers inf (MFU 0%).",
                what="Ascend device names (Ascend910B*, Ascend910_93*, Ascend910*) get their dense bf16 peak "
                     "(354e12 for A2/A3 devices, 256e12 for the 910A line); other names go to nanochat's table.",
                remove_when=REMOVE)
def get_peak_flops(ctx):
    orig = ctx.original

    @functools.wraps(orig)
    def get_peak_flops(device_name, *args, **kwargs):
        flops = ascend_peak_flops(device_name)
        return orig(device_name, *args, **kwargs) if flops is None else flops

    return get_peak_flops


def _translate_device_type_args(argv: list[str]) -> list[tuple[int, str]]:
    """Positions in ``argv`` whose ``--device-type`` value is ``npu``, with their replacement."""
    changes = []
    for i, arg in enumerate(argv):
        if arg == "--device-type=npu":
            changes.append((i, "--device-type=cuda"))
        elif arg == "--device-type" and i + 1 < len(argv) and argv[i + 1] == "npu":
            changes.append((i + 1, "cuda"))
    return changes


@nanochat.patch("nanochat.common", kind="call", id="nanochat.device_type_arg",
                why="commands written for NPU ports of nanochat pass --device-type=npu; nanochat accepts cuda|cpu|mps (chat_cli and "
                    "chat_eval reject npu in argparse, compute_init asserts).",
                what="when nanochat.common is imported (before the script parses its arguments), a "
                     "--device-type npu in sys.argv becomes cuda, which the shim runs on the NPU; reported.",
                remove_when=REMOVE)
def device_type_arg(ctx):
    from ascend_shim.errors import NotNeeded

    argv = sys.argv
    changes = _translate_device_type_args(argv)
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


@nanochat.patch("nanochat.flash_attention", kind="call", id="nanochat.fa3",
                why="nanochat picks FlashAttention-3 at import time from the kernels hub; without the kernels "
                    "package (or with it but no NPU answer) it falls back to SDPA, whose sliding-window path "
                    "builds explicit masks.",
                what="if nanochat found no FA3 but the NPU is available, _fa3 becomes the NPU FA3 provider "
                     "(HAS_FA3 True, USE_FA3 recomputed: bf16 compute only, _override_impl honoured); "
                     "not needed when the kernels hub already answered with it.",
                remove_when=REMOVE)
def fa3(ctx):
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
    from .hf_kernels import load_fa3

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


def _outside_writers(sources: list[str], cls) -> list[str]:
    """Lines of ``sources`` outside ``cls``'s known writers that write ``.cache_seqlens`` in place or rebind it."""
    known = set()
    for name in KV_WRITERS + ("get_pos",):
        method = cls.__dict__.get(name)
        if method is not None:
            known.update(inspect.getsource(method).splitlines())
    return [line.strip() for source in sources for line in source.splitlines()
            if _ATTRIBUTE_WRITE.search(line) and line not in known]


@nanochat.patch("nanochat.engine:KVCache", kind="call", id="nanochat.kvcache_host_position",
                why="GPT.forward asks the KV cache for its position (KVCache.get_pos: cache_seqlens[0].item()) at "
                    "every decode step, a device-to-host sync per token on top of the sampler's: on an NPU each one "
                    "drains the task queue.",
                what="the cache keeps its position on the host too, updated where nanochat moves it (__init__, "
                     "reset, advance by an int, prefill), and get_pos answers from it while cache_seqlens is the "
                     "same tensor, unchanged since (version counter, where it has one); otherwise it reads the "
                     "device as before. Applies only if no other nanochat code writes cache_seqlens. On the "
                     "emulated NPU every answer is checked against the device value (without a sync).",
                remove_when="nanochat keeps its KV-cache position on the host")
def kvcache_host_position(ctx):
    from ascend_shim.activation import current_backend
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
    check = current_backend() == "sim"
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
            _check_on_the_emulator(self.cache_seqlens, position, pid)
        return position

    for name, new in (("__init__", __init__), ("reset", reset), ("advance", advance), ("prefill", prefill),
                      ("get_pos", get_pos)):
        functools.update_wrapper(new, originals[name])
        ctx.replace(cls, name, new)
    return None


def _check_on_the_emulator(cache_seqlens, position: int, patch_id: str) -> None:
    """The emulated NPU's memory is host memory: compare the kept position with the device value, no sync."""
    from ascend_shim.sim.ops._common import host

    actual = int(host(cache_seqlens)[0])
    if actual != position:
        raise RuntimeError(f"{patch_id}: the KV cache position kept on the host ({position}) differs from "
                           f"cache_seqlens ({actual}): something outside KVCache moved it. Run with "
                           f"ASCEND_SHIM_DISABLE={patch_id} and report the case.")


@nanochat.patch("nanochat.fp8:convert_to_float8_training", kind="replace", fidelity="neutral", id="nanochat.fp8",
                why="--fp8 swaps Linear layers for Float8Linear, whose matmuls are torch._scaled_mm fp8 GEMMs: "
                    "Atlas A2/A3 NPUs have none (torch_features would stop the run at the first step).",
                what="the conversion returns the model unchanged, with a warning and a report entry: training "
                     "runs in the compute dtype (bf16) instead of fp8. base_train then prints 'converted 0/N'.",
                remove_when="an NPU supports fp8 matmuls")
def convert_to_float8_training(ctx):
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def convert_to_float8_training(module, *args, **kwargs):
        report.fallback("nanochat --fp8", "fp8 training turned off (no fp8 matmul on Ascend A2/A3); the model "
                                          "trains in its compute dtype")
        log.warning("nanochat --fp8: fp8 training is not available on Ascend NPUs; training in the compute "
                    "dtype instead (ascend_shim patch nanochat.fp8)")
        return module

    return convert_to_float8_training


PATCH_SETS = [nanochat]
