"""flash_attn on the NPU: the FA2 package and FA3's ``flash_attn_interface``, provided by the shim.

``flash-attn`` needs nvcc and CUDA; nothing of it installs on an Ascend machine. While the shim is active and the
real distribution is absent, ``import flash_attn`` yields :mod:`ascend_shim.providers.flash_attn.fa2` and
``import flash_attn_interface`` yields :mod:`ascend_shim.providers.flash_attn.fa3`; ``importlib.metadata`` reports
``flash_attn`` 2.8.4 and ``flash_attn_3`` 3.0.0 (the names and versions of the real wheels), so version checks
pass. Both are backed by ``torch_npu.npu_fusion_attention`` (training, autograd) and
``npu_fused_infer_attention_score`` (``flash_attn_with_kvcache``), with flash-attn's exact semantics; see
``ascend_shim/providers/flash_attn/_npu.py`` for the mapping and ``_reference.py`` for what falls back to exact
plain-torch attention.

An installed ``flash-attn-npu`` (a third-party Ascend build of the FA2 API) is preferred: if it installs a
``flash_attn`` module itself nothing is provided, otherwise ``flash_attn`` is aliased to its module. Either way
the report says so.

This module only declares (cheap to import); the provider modules import torch when ``flash_attn`` is imported.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet

FA2_VERSION = "2.8.4"  # flash-attention @ 0251105, flash_attn/__init__.py
FA3_VERSION = "3.0.0"  # hopper/__init__.py; the wheel is named flash_attn_3, its module flash_attn_interface
PROVIDER = "ascend_shim.providers.flash_attn"
REMOVE = "flash-attn (or an official Ascend build of its API) installs and runs on Ascend NPUs"

flash_attn = PatchSet(
    id="flash_attn", title="flash_attn (FA2) and flash_attn_interface (FA3) backed by NPU fused attention",
    requires={"torch": ">=2.4,<2.15"},
    checked_against="flash-attention 2.8.4 / hopper 3.0.0 @ 0251105 API; torch 2.13.0 with the sim backend; "
                    "transformers 5.23.0",
)


def _npu_build_module(dist) -> str | None:
    """The top-level module of an installed flash-attn-npu distribution (None if it cannot be told)."""
    text = dist.read_text("top_level.txt") or ""
    names = [n.strip() for n in text.splitlines() if n.strip()]
    if not names:
        names = sorted({str(f).split("/")[0] for f in (dist.files or ())
                        if str(f).endswith(".py") and "/" in str(f) and ".dist-info" not in str(f)})
    return names[0] if names else None


@flash_attn.patch("flash_attn", kind="provide-module", id="flash_attn.provide", fidelity="exact",
                  covers=("flash_attn", "flash_attn.flash_attn_func", "flash_attn.flash_attn_varlen_func", "flash_attn.flash_attn_with_kvcache", "flash_attn.bert_padding", "flash_attn.layers.rotary", "flash_attn_interface"),
                  why="flash-attn cannot be built or installed on Ascend (it needs CUDA); realhf/AReaL, Twinkle's "
                      "ring attention, FA3-style code (nanochat) and many training scripts import it directly.",
                  what="provides `flash_attn` (FA2 API incl. bert_padding, layers.rotary and the private "
                       "_flash_attn_*_forward/backward) and `flash_attn_interface` (FA3 API) with distribution "
                       "metadata flash_attn 2.8.4 / flash_attn_3 3.0.0, backed by npu_fusion_attention and "
                       "npu_fused_infer_attention_score; what the NPU ops cannot express (softcap, alibi in bf16 "
                       "or varlen, bands with no valid block) runs an exact plain-torch reference, recorded as a "
                       "fallback. A real flash_attn install is left alone; flash-attn-npu is preferred if present.",
                  remove_when=REMOVE)
def provide(ctx):
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


@flash_attn.patch("transformers.integrations.npu_flash_attention:npu_flash_attn_varlen_func",
                  id="flash_attn.transformers_varlen", requires={"transformers": ">=4.50,<5.24"},
                  why="on an NPU transformers' flash_attention_2 runs its own varlen function, which reads "
                      "cu_seqlens_q and cu_seqlens_k to the host in every layer: two syncs per layer per "
                      "generated token when a batch is padded.",
                  what="the call goes to the shim's flash_attn provider (same attention, bottom-right causal as "
                       "transformers' default NPU_FA2_SPARSE_MODE=3): a decode step (one query per sequence) "
                       "makes no sync, a prefill one read for both lengths. With NPU_FA2_SPARSE_MODE=2 (top-left "
                       "causal), without max_seqlen_q/max_seqlen_k or with other arguments, transformers' own "
                       "function runs.",
                  remove_when="transformers' NPU flash-attention integration keeps sequence lengths on the device")
def transformers_varlen(ctx):
    import functools

    orig = ctx.original
    module = __import__("transformers.integrations.npu_flash_attention", fromlist=["SPARSE_MODE"])

    @functools.wraps(orig)
    def npu_flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                                   dropout_p=0.0, softmax_scale=None, causal=False, **kwargs):
        if (max_seqlen_q is None or max_seqlen_k is None or (causal and getattr(module, "SPARSE_MODE", 3) != 3)
                or not set(kwargs) <= {"window_size", "softcap", "deterministic", "alibi_slopes"}):
            return orig(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=dropout_p,
                        softmax_scale=softmax_scale, causal=causal, **kwargs)
        from ascend_shim.providers.flash_attn.fa2 import flash_attn_varlen_func

        return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal, **kwargs)

    return npu_flash_attn_varlen_func


@flash_attn.patch("transformers.modeling_flash_attention_utils:_get_unpad_data",
                  id="flash_attn.transformers_unpad_once", requires={"transformers": ">=4.50,<5.24"},
                  why="transformers' flash-attention path derives the unpadding data (indices, cumulative lengths, "
                      "the longest length read to the host) from the attention mask in every layer: one host "
                      "sync per layer per generated token when a batch is padded.",
                  what="the result for a mask is computed once and given to every layer while that mask tensor is "
                       "unchanged (the same object, version counter, storage, shape and dtype): one sync per step "
                       "whatever the depth. Inference tensors (no version counter) and code being compiled "
                       "recompute, as before.",
                  remove_when="transformers computes the unpadding data once per forward pass")
def transformers_unpad_once(ctx):
    import functools

    return functools.wraps(ctx.original)(_once_per_mask(ctx.original))


def _once_per_mask(compute):
    """``compute(mask)``, computed once for the mask of the running step and given to every layer while that
    mask tensor is unchanged (the same object, version counter, storage, shape, stride, dtype and device): one
    entry per thread. Inference tensors (no version counter) and code being compiled recompute."""
    import threading
    import weakref

    import torch

    from ascend_shim.providers.flash_attn._hostlists import state

    last = threading.local()  # (weak mask, its state, the result)

    def once(mask):
        if type(mask) is not torch.Tensor or mask.is_inference() or torch.compiler.is_compiling():
            return compute(mask)
        now = state(mask)
        entry = getattr(last, "entry", None)
        if entry is not None and entry[0]() is mask and entry[1] == now:
            return entry[2]
        result = compute(mask)
        last.entry = (weakref.ref(mask), now, result)
        return result

    return once


# The parameters of transformers' _flash_attention_forward, in order: the wrapper mirrors them (no repacking per
# layer); any other signature leaves the function alone.
_FA_FORWARD_PARAMS = (
    "query_states", "key_states", "value_states", "attention_mask", "query_length", "is_causal", "dropout",
    "position_ids", "softmax_scale", "sliding_window", "use_top_left_mask", "softcap", "deterministic",
    "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "target_dtype", "attn_implementation",
    "block_table", "k_cache", "v_cache", "kwargs")
# What the varlen call of a decode step may be asked for, beyond which transformers' own path runs.
_DECODE_KWARGS = {"causal", "softmax_scale", "dropout_p", "window_size", "deterministic", "softcap", "max_seqlen_q",
                  "max_seqlen_k"}


def _reaches_provider(varlen_fn, causal: bool) -> bool:
    """Would transformers' varlen call reach the shim's provider, with its bottom-right causal alignment?"""
    import sys

    if getattr(varlen_fn, "__ascend_shim_patch__", None) == "flash_attn.transformers_varlen":
        integration = sys.modules.get("transformers.integrations.npu_flash_attention")
        return not (causal and getattr(integration, "SPARSE_MODE", 3) != 3)
    return (getattr(varlen_fn, "__module__", "") or "").startswith(PROVIDER) \
        and getattr(varlen_fn, "__name__", "") == "flash_attn_varlen_func"


@flash_attn.patch("transformers.modeling_flash_attention_utils:_flash_attention_forward",
                  id="flash_attn.transformers_padded_decode", requires={"transformers": ">=5.0,<5.24"},
                  why="a padded batch sends transformers' flash-attention path through unpadding in every decode "
                      "step: the indices of the real tokens and the longest length are read from the attention "
                      "mask to the host, one device-to-host sync per generated token.",
                  what="a decode step (one query per sequence, inference, no dropout or softcap) whose varlen call "
                       "would reach the shim's flash_attn provider gets its real keys packed to the front of each "
                       "row on the device (the layout unpadding makes, at the mask's width) and the rest hidden by "
                       "the op's mask: the same attention, nothing read to the host. Prefill, training, top-left "
                       "causal (NPU_FA2_SPARSE_MODE=2), any other argument for the kernel (attention sinks) and "
                       "other kernels take transformers' own path.",
                  remove_when="transformers' flash-attention decode keeps a padded batch's lengths on the device")
def transformers_padded_decode(ctx):
    import functools
    import inspect
    import sys

    import torch

    from ascend_shim.errors import TargetMissing
    from ascend_shim.providers.flash_attn import _npu

    orig = ctx.original
    params = tuple(inspect.signature(orig).parameters)
    if params != _FA_FORWARD_PARAMS:
        raise TargetMissing(f"_flash_attention_forward takes {params}, not the parameters this patch mirrors")
    utils = sys.modules[orig.__module__]
    for name in ("lazy_import_flash_attention", "fa_peft_integration_check"):
        if not callable(getattr(utils, name, None)):
            raise TargetMissing(f"{orig.__module__}.{name} is missing")

    def packed(mask):
        """The padded batch's real keys moved to the front of each row, in order (as unpadding lays them out,
        padded back to the mask's width): gather indices, their rows, the columns, the lengths and the rows with
        no key, all on the device."""
        real = mask.bool()
        order = torch.sort((~real).to(torch.uint8), dim=-1, stable=True).indices
        rows = torch.arange(mask.shape[0], device=mask.device).view(-1, 1)
        cols = torch.arange(mask.shape[1], device=mask.device).view(1, -1)
        lens = real.sum(-1).view(-1, 1)
        return order, rows, cols, lens, lens.view(-1) == 0

    packed_once = _once_per_mask(packed)

    def decode(q, k, v, mask, is_causal, dropout, softmax_scale, sliding_window, use_top_left_mask, softcap,
               deterministic, target_dtype, attn_implementation, kwargs):
        """The decode step's attention on the packed keys, or None where transformers' own path must run."""
        if (mask.dim() != 2 or q.dim() != 4 or q.shape[1] != 1 or q.device.type == "cpu" or mask.device != q.device
                or k.shape[1] < mask.shape[1] or dropout or softcap or torch.compiler.is_compiling()
                or _npu.recorded_for_backward(q, k, v)):
            return None
        (_, varlen_fn, *_), (process_kwargs, _) = utils.lazy_import_flash_attention(attn_implementation)
        width = mask.shape[1]
        flash_kwargs = process_kwargs(query_length=1, key_length=k.shape[1], is_causal=is_causal, dropout=dropout,
                                      softmax_scale=softmax_scale, sliding_window=sliding_window,
                                      use_top_left_mask=use_top_left_mask, softcap=softcap,
                                      deterministic=deterministic, max_seqlen_q=1, max_seqlen_k=width, **kwargs)
        causal = bool(flash_kwargs.get("causal"))
        if not set(flash_kwargs) <= _DECODE_KWARGS or flash_kwargs.get("softcap") or flash_kwargs.get("dropout_p") \
                or not _reaches_provider(varlen_fn, causal):
            return None
        q, k, v = utils.fa_peft_integration_check(q, k, v, target_dtype)
        _npu.check_inputs("flash_attn_varlen_func", q, k, v)
        order, rows, cols, lens, empty = packed_once(mask)
        hide = cols >= lens
        left = _npu.normalize_window(False, flash_kwargs.get("window_size"), width)[0]
        if left >= 0:
            hide |= cols < lens - 1 - left
        scale = flash_kwargs.get("softmax_scale")
        scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
        out, _ = _npu.padded_decode(q.squeeze(1), k[rows, order], v[rows, order], hide, empty, scale=scale)
        return out.unsqueeze(1)

    @functools.wraps(orig)
    def _flash_attention_forward(query_states, key_states, value_states, attention_mask, query_length, is_causal,
                                 dropout=0.0, position_ids=None, softmax_scale=None, sliding_window=None,
                                 use_top_left_mask=False, softcap=None, deterministic=None, cu_seq_lens_q=None,
                                 cu_seq_lens_k=None, max_length_q=None, max_length_k=None, target_dtype=None,
                                 attn_implementation=None, block_table=None, k_cache=None, v_cache=None, **kwargs):
        if (query_length == 1 and attention_mask is not None and cu_seq_lens_q is None and cu_seq_lens_k is None
                and max_length_q is None and max_length_k is None and block_table is None and k_cache is None):
            out = decode(query_states, key_states, value_states, attention_mask, is_causal, dropout, softmax_scale,
                         sliding_window, use_top_left_mask, softcap, deterministic, target_dtype,
                         attn_implementation, kwargs)
            if out is not None:
                return out
        return orig(query_states, key_states, value_states, attention_mask, query_length, is_causal, dropout,
                    position_ids, softmax_scale, sliding_window, use_top_left_mask, softcap, deterministic,
                    cu_seq_lens_q, cu_seq_lens_k, max_length_q, max_length_k, target_dtype, attn_implementation,
                    block_table, k_cache, v_cache, **kwargs)

    return _flash_attention_forward


@flash_attn.patch("transformers.masking_utils:flash_attention_mask",
                  id="flash_attn.transformers_decode_mask", requires={"transformers": ">=5.0,<5.24"},
                  why="before every forward pass transformers asks whether the flash-attention mask holds any "
                      "padding (`attention_mask.all()`), to drop a mask without any: one device-to-host sync per "
                      "generated token.",
                  what="for a decode step (one query, no autograd) whose attention takes the shim's padded decode "
                       "(patch flash_attn.transformers_padded_decode, which is exact with or without padding and "
                       "reads nothing), the mask is kept without the question. Prefill, training and other kernels "
                       "ask as before. The entries of transformers' mask interface that hold the function are "
                       "rebound alongside.",
                  remove_when="transformers' flash-attention mask no longer reads the mask to the host")
def transformers_decode_mask(ctx):
    import functools
    import sys

    import torch

    from ascend_shim.errors import TargetMissing

    orig = ctx.original
    mapping = getattr(getattr(sys.modules[orig.__module__], "AttentionMaskInterface", None), "_global_mapping", None)
    if not isinstance(mapping, dict):
        raise TargetMissing("transformers' AttentionMaskInterface._global_mapping is missing")

    def padded_decode_runs() -> bool:
        utils = sys.modules.get("transformers.modeling_flash_attention_utils")
        forward = getattr(utils, "_flash_attention_forward", None)
        return getattr(forward, "__ascend_shim_patch__", None) == "flash_attn.transformers_padded_decode" \
            and _reaches_provider(getattr(utils, "_flash_varlen_fn", None), causal=True)

    @functools.wraps(orig)
    def flash_attention_mask(*args, **kwargs):
        mask = kwargs.get("attention_mask")
        if (not args and kwargs.get("q_length") == 1 and type(kwargs.get("kv_length")) is int
                and type(mask) is torch.Tensor and mask.dim() == 2
                and mask.device.type != "cpu" and not torch.is_grad_enabled() and not torch.compiler.is_compiling()
                and padded_decode_runs()):
            return mask[:, -kwargs["kv_length"]:]
        return orig(*args, **kwargs)

    rebound = [name for name, fn in mapping.items() if fn is orig]
    for name in rebound:
        mapping[name] = flash_attention_mask

    def undo():
        for name in rebound:
            if mapping.get(name) is flash_attention_mask:
                mapping[name] = orig

    ctx.on_undo(undo)
    return flash_attention_mask


PATCH_SETS = [flash_attn]
