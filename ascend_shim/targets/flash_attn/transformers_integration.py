"""transformers' flash-attention path on the NPU without host syncs per generated token.

transformers' NPU integration reads sequence lengths and padding from the device in every layer of every decode
step. Here: its varlen function goes to this provider (:func:`varlen_function`), the unpadding data is computed
once per mask (:func:`unpad_once`), a padded batch's decode step packs its keys on the device
(:func:`padded_decode_forward`) and the mask is kept without asking whether it holds padding
(:func:`decode_mask`). Each falls back to transformers' own code wherever the result could differ.
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext

from .install import PROVIDER

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


def varlen_function(ctx: PatchContext) -> Callable:
    """transformers' npu_flash_attn_varlen_func, calling this provider where its semantics are the same."""
    orig = ctx.original
    module = __import__("transformers.integrations.npu_flash_attention", fromlist=["SPARSE_MODE"])

    @functools.wraps(orig)
    def npu_flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                                   dropout_p=0.0, softmax_scale=None, causal=False, **kwargs):
        if (max_seqlen_q is None or max_seqlen_k is None or (causal and getattr(module, "SPARSE_MODE", 3) != 3)
                or not set(kwargs) <= {"window_size", "softcap", "deterministic", "alibi_slopes"}):
            return orig(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=dropout_p,
                        softmax_scale=softmax_scale, causal=causal, **kwargs)
        from .fa2 import flash_attn_varlen_func

        return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal, **kwargs)

    return npu_flash_attn_varlen_func


def unpad_once(ctx: PatchContext) -> Callable:
    """transformers' _get_unpad_data, computed once per unchanged mask."""
    return functools.wraps(ctx.original)(once_per_mask(ctx.original))


def once_per_mask(compute: Callable) -> Callable:
    """``compute(mask)``, computed once for the mask of the running step and given to every layer while that
    mask tensor is unchanged (the same object, version counter, storage, shape, stride, dtype and device): one
    entry per thread. Inference tensors (no version counter) and code being compiled recompute."""
    import torch

    from ._hostlists import state

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


def reaches_provider(varlen_fn: Any, causal: bool) -> bool:
    """Would transformers' varlen call reach the shim's provider, with its bottom-right causal alignment?"""
    if getattr(varlen_fn, "__ascend_shim_patch__", None) == "flash_attn.transformers_varlen":
        integration = sys.modules.get("transformers.integrations.npu_flash_attention")
        return not (causal and getattr(integration, "SPARSE_MODE", 3) != 3)
    return (getattr(varlen_fn, "__module__", "") or "").startswith(PROVIDER) \
        and getattr(varlen_fn, "__name__", "") == "flash_attn_varlen_func"


def padded_decode_forward(ctx: PatchContext) -> Callable:
    """transformers' _flash_attention_forward, with a padded batch's decode step done on packed keys."""
    import torch

    from ascend_shim.errors import TargetMissing

    from . import _npu

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

    packed_once = once_per_mask(packed)

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
                or not reaches_provider(varlen_fn, causal):
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


def decode_mask(ctx: PatchContext) -> Callable:
    """transformers' flash_attention_mask, kept without the padding question where the padded decode runs."""
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
            and reaches_provider(getattr(utils, "_flash_varlen_fn", None), causal=True)

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
