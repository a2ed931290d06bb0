"""``flash_attn_interface`` (FA3, hopper/ 3.0.0 API) on the Ascend NPU.

Return conventions (current upstream, since PR #1851, 2025-08): ``flash_attn_func`` / ``flash_attn_varlen_func``
return a bare ``out`` tensor unless ``return_attn_probs=True``, then ``(out, softmax_lse)``;
``flash_attn_with_kvcache`` returns ``out`` unless ``return_softmax_lse=True``, then ``(out, softmax_lse)``.
(FA3 builds before that change always returned ``(out, softmax_lse)``; code written for them indexes ``[0]``.)
nanochat-style use, which this module serves as ``kernels.get_kernel(...).flash_attn_interface`` too::

    y = flash_attn_func(q, k, v, causal=True, window_size=(L, 0))              # a tensor
    y = flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=pos,
                                causal=True, window_size=(L, 0))               # caches updated in place

FA3 has no dropout and no ALiBi. FP8 descaling, ``qv``, ``attention_chunk``, ``seqused_*`` and varlen queries in
``flash_attn_with_kvcache`` raise UnsupportedOnNPUError; ``num_splits``, ``pack_gqa``, ``sm_margin`` and
``scheduler_metadata`` are CUDA scheduling hints with no effect.
"""
from __future__ import annotations

import torch

from ascend_shim.errors import UnsupportedOnNPUError

from . import _kvcache, _npu

__version__ = "3.0.0"


def _unsupported(api: str, **given) -> None:
    for name, value in given.items():
        if value is not None and not (name == "attention_chunk" and value == 0):
            raise UnsupportedOnNPUError(f"flash_attn_interface.{api}({name}=...)", _npu.PATCH_ID,
                                        "FP8 descaling, qv, attention_chunk, seqused and varlen kvcache queries "
                                        "have no NPU mapping here; drop the argument.")


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                    v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                    pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
    """q (B, Sq, H, D), k/v (B, Sk, Hk, D) -> ``out``, or ``(out, softmax_lse (B, H, Sq))`` with return_attn_probs."""
    _unsupported("flash_attn_func", qv=qv, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                 attention_chunk=attention_chunk)
    res = _npu.dense(q, k, v, softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                     deterministic=deterministic, api="flash_attn_interface.flash_attn_func")
    return (res.out, res.lse()) if return_attn_probs else res.out


def flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, q_descale=None, k_descale=None,
                              v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                              deterministic=False, num_heads_q=None, sm_margin=0, return_attn_probs=False):
    """qkv (B, S, 3, H, D), or (B, S, Hq + 2 * Hk, D) with num_heads_q."""
    if qkv.dim() == 5:
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    else:
        hk = (qkv.shape[2] - num_heads_q) // 2
        q, k, v = qkv.split([num_heads_q, hk, hk], dim=2)
    return flash_attn_func(q, k, v, softmax_scale, causal, None, q_descale, k_descale, v_descale, window_size,
                           attention_chunk, softcap, 1, None, deterministic, sm_margin, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                           seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                           v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                           pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
    """q (total_q, H, D) -> ``out``, or ``(out, softmax_lse (H, total_q))`` with return_attn_probs."""
    _unsupported("flash_attn_varlen_func", seqused_q=seqused_q, seqused_k=seqused_k, qv=qv, q_descale=q_descale,
                 k_descale=k_descale, v_descale=v_descale, attention_chunk=attention_chunk)
    res = _npu.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=softmax_scale,
                      causal=causal, window_size=window_size, softcap=softcap, deterministic=deterministic,
                      api="flash_attn_interface.flash_attn_varlen_func")
    return (res.out, res.lse()) if return_attn_probs else res.out


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens: int | torch.Tensor | None = None, cache_batch_idx=None,
                            cache_leftpad=None, page_table=None, cu_seqlens_q=None, cu_seqlens_k_new=None,
                            max_seqlen_q=None, rotary_seqlens=None, q_descale=None, k_descale=None, v_descale=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                            rotary_interleaved=True, scheduler_metadata=None, num_splits=0, pack_gqa=None,
                            sm_margin=0, return_softmax_lse=False):
    """Append k/v into k_cache/v_cache **in place** at cache_seqlens, attend; ``out`` or ``(out, softmax_lse)``.

    ``page_table`` is FA2's ``block_table`` (paged cache (num_blocks, page, Hk, D)).
    """
    _unsupported("flash_attn_with_kvcache", qv=qv, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k_new=cu_seqlens_k_new,
                 rotary_seqlens=rotary_seqlens, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                 attention_chunk=attention_chunk)
    out, lse = _kvcache.with_kvcache(q, k_cache, v_cache, k, v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                     cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                                     cache_leftpad=cache_leftpad, block_table=page_table,
                                     softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                     softcap=softcap, rotary_interleaved=rotary_interleaved, num_splits=num_splits,
                                     api="flash_attn_interface.flash_attn_with_kvcache")
    return (out, lse) if return_softmax_lse else out


def get_scheduler_metadata(*args, **kwargs):
    """CUDA scheduling metadata: nothing to precompute on the NPU (None is accepted back by the functions)."""
    return None
