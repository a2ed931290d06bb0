"""``flash_attn.flash_attn_interface`` (FA2 2.8.4 API) backed by ``torch_npu`` fused attention.

Public functions differentiate through ``npu_fusion_attention``'s own autograd. Return conventions as upstream:
``out``, or with ``return_attn_probs=True`` ``(out, softmax_lse, S_dmask)`` where ``softmax_lse`` is (B, H, Sq)
(varlen: (H, total_q)) and ``S_dmask`` is None (upstream computes it only for dropout_p > 0, for testing; the NPU
op cannot return it, which is reported). ``flash_attn_with_kvcache`` returns ``out`` or ``(out, softmax_lse)``.

The private ``_flash_attn_forward`` / ``_flash_attn_varlen_forward`` / ``_flash_attn_backward`` /
``_flash_attn_varlen_backward`` keep upstream's 2.7+/2.8 parameter names, defaults and returns
(``(out, softmax_lse, S_dmask, rng_state)``; the backward writes dq/dk/dv in place and returns ``softmax_d``), for
callers such as ring attention that fill them by ``inspect.signature``. ``rng_state`` is a host int64
(seed, offset) pair here.
"""
from __future__ import annotations

import torch

from ascend_shim.report import REPORT

from .. import _kvcache, _npu


def _returns(res: _npu.Result, return_attn_probs: bool, dropout_p: float, api: str):
    if not return_attn_probs:
        return res.out
    if dropout_p > 0:
        REPORT.unsupported(api, "return_attn_probs with dropout: S_dmask is not available on the NPU (None)")
    return res.out, res.lse(), None


# ----------------------------------------------------------------------------------------------- public API

def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (B, Sq, H, D), k/v (B, Sk, Hk, D) -> out (B, Sq, H, D); causal is bottom-right aligned."""
    res = _npu.dense(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                     window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                     deterministic=deterministic, api="flash_attn_func")
    return _returns(res, return_attn_probs, dropout_p, "flash_attn_func")


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv (B, S, 3, H, D)."""
    res = _npu.dense(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p=dropout_p, softmax_scale=softmax_scale,
                     causal=causal, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                     deterministic=deterministic, api="flash_attn_qkvpacked_func")
    return _returns(res, return_attn_probs, dropout_p, "flash_attn_qkvpacked_func")


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (B, Sq, H, D), kv (B, Sk, 2, Hk, D)."""
    res = _npu.dense(q, kv[:, :, 0], kv[:, :, 1], dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                     window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                     deterministic=deterministic, api="flash_attn_kvpacked_func")
    return _returns(res, return_attn_probs, dropout_p, "flash_attn_kvpacked_func")


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """q (total_q, H, D), k/v (total_k, Hk, D), cu_seqlens int32 (B + 1,) -> out (total_q, H, D).

    The cu_seqlens are read to the host once per distinct tensor (all layers of a step share the read).
    """
    res = _npu.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=dropout_p,
                      softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes, deterministic=deterministic, block_table=block_table,
                      api="flash_attn_varlen_func")
    return _returns(res, return_attn_probs, dropout_p, "flash_attn_varlen_func")


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv (total, 3, H, D)."""
    res = _npu.varlen(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                      softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic,
                      api="flash_attn_varlen_qkvpacked_func")
    return _returns(res, return_attn_probs, dropout_p, "flash_attn_varlen_qkvpacked_func")


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (total_q, H, D), kv (total_k, 2, Hk, D)."""
    res = _npu.varlen(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                      softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic,
                      api="flash_attn_varlen_kvpacked_func")
    return _returns(res, return_attn_probs, dropout_p, "flash_attn_varlen_kvpacked_func")


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens: int | torch.Tensor | None = None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None,
                            num_splits=0, return_softmax_lse=False):
    """Incremental decoding: appends k/v into k_cache/v_cache **in place** at cache_seqlens, then attends.

    k_cache/v_cache (B_cache, S_cache, Hk, D), or paged (num_blocks, page, Hk, D) with block_table (B, pages).
    Returns ``out`` or ``(out, softmax_lse (B, H, Sq))``. See ``_kvcache`` for the NPU mapping.
    """
    out, lse = _kvcache.with_kvcache(q, k_cache, v_cache, k, v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                     cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                                     cache_leftpad=cache_leftpad, block_table=block_table,
                                     softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                     softcap=softcap, rotary_interleaved=rotary_interleaved,
                                     alibi_slopes=alibi_slopes, num_splits=num_splits)
    return (out, lse) if return_softmax_lse else out


# --------------------------------------------------------------------------------------- private (2.7+/2.8)

def _flash_attn_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float, softmax_scale: float,
                        causal: bool, window_size_left: int, window_size_right: int, softcap: float,
                        alibi_slopes: torch.Tensor | None, return_softmax: bool):
    """-> (out, softmax_lse (B, H, Sq), S_dmask (None), rng_state). No autograd (as upstream's custom op)."""
    with torch.no_grad():
        res = _npu.dense(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                         window_size=(window_size_left, window_size_right), softcap=softcap,
                         alibi_slopes=alibi_slopes, api="_flash_attn_forward")
        return res.out, res.lse(), None, _npu.rng_tensor(res)


def _flash_attn_varlen_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                               cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, dropout_p: float,
                               softmax_scale: float, causal: bool, window_size_left: int = -1,
                               window_size_right: int = -1, softcap: float = 0.0,
                               alibi_slopes: torch.Tensor | None = None, return_softmax: bool = False,
                               block_table: torch.Tensor | None = None, leftpad_k: torch.Tensor | None = None,
                               seqused_k: torch.Tensor | None = None, zero_tensors: bool = False,
                               num_splits: int = 0):
    """-> (out (total_q, H, D), softmax_lse (H, total_q), S_dmask (None), rng_state). No autograd."""
    if leftpad_k is not None or seqused_k is not None:
        from ascend_shim.errors import UnsupportedOnNPUError

        raise UnsupportedOnNPUError("_flash_attn_varlen_forward(leftpad_k/seqused_k)", _npu.PATCH_ID,
                                    "Describe the keys with cu_seqlens_k only.")
    with torch.no_grad():
        res = _npu.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=dropout_p,
                          softmax_scale=softmax_scale, causal=causal,
                          window_size=(window_size_left, window_size_right), softcap=softcap,
                          alibi_slopes=alibi_slopes, block_table=block_table, api="_flash_attn_varlen_forward")
        out = res.out
        if zero_tensors:
            out = out.clone()
        return out, res.lse(), None, _npu.rng_tensor(res)


def _flash_attn_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                         softmax_lse: torch.Tensor, dq: torch.Tensor | None, dk: torch.Tensor | None,
                         dv: torch.Tensor | None, dropout_p: float, softmax_scale: float, causal: bool,
                         window_size_left: int, window_size_right: int, softcap: float,
                         alibi_slopes: torch.Tensor | None, deterministic: bool,
                         rng_state: torch.Tensor | None = None) -> torch.Tensor:
    """Writes dq/dk/dv in place; returns softmax_d (B, H, Sq) = rowsum(dout * out)."""
    with torch.no_grad():
        return _npu.dense_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p=dropout_p,
                                   softmax_scale=softmax_scale, causal=causal,
                                   window_size=(window_size_left, window_size_right), softcap=softcap,
                                   alibi_slopes=alibi_slopes, deterministic=deterministic, rng_state=rng_state)


def _flash_attn_varlen_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                out: torch.Tensor, softmax_lse: torch.Tensor, dq: torch.Tensor | None,
                                dk: torch.Tensor | None, dv: torch.Tensor | None, cu_seqlens_q: torch.Tensor,
                                cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, dropout_p: float,
                                softmax_scale: float, causal: bool, window_size_left: int, window_size_right: int,
                                softcap: float, alibi_slopes: torch.Tensor | None, deterministic: bool,
                                rng_state: torch.Tensor | None = None, zero_tensors: bool = False) -> torch.Tensor:
    """Writes dq/dk/dv in place; returns softmax_d (H, total_q) = rowsum(dout * out)."""
    with torch.no_grad():
        return _npu.varlen_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
                                    max_seqlen_q, max_seqlen_k, dropout_p=dropout_p, softmax_scale=softmax_scale,
                                    causal=causal, window_size=(window_size_left, window_size_right),
                                    softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic,
                                    rng_state=rng_state)


# ------------------------------------------------------------------ what flash-attn 2.6+ exports for libraries

#: upstream (torch >= 2.4) binds these to its torch.library custom ops ``torch.ops.flash_attn.*``, which take the
#: private functions' arguments; upstream's fallback for older torch binds the functions themselves, as here
_wrapped_flash_attn_forward = _flash_attn_forward
_wrapped_flash_attn_varlen_forward = _flash_attn_varlen_forward
_wrapped_flash_attn_backward = _flash_attn_backward
_wrapped_flash_attn_varlen_backward = _flash_attn_varlen_backward

from . import flash_attn_gpu  # noqa: E402, F401  (the compiled module's API, as upstream's attribute)
