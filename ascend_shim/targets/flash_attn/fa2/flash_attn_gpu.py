"""``flash_attn_interface.flash_attn_gpu``: the compiled module (``flash_attn_2_cuda``) that flash-attn 2.8 calls, as
its positional signatures, on the NPU.

Libraries that find flash_attn importable call its compiled module directly (xFormers' FA2 operator:
``flash_attn.flash_attn_interface.flash_attn_gpu.fwd(...)``). Each function here takes the C++ signature of
flash-attn 2.8.4 (csrc/flash_attn/flash_api.cpp) and runs the provider's private functions, so the semantics are
the ones documented there.
"""
from __future__ import annotations

import torch


def _interface():
    """``flash_attn_interface``, which imports this module as its ``flash_attn_gpu`` (so not imported at the top)."""
    from . import flash_attn_interface

    return flash_attn_interface


def _into(out: torch.Tensor | None, res: torch.Tensor) -> torch.Tensor:
    if out is None:
        return res
    out.copy_(res)
    return out


def _no_generator(gen) -> None:
    if gen is not None:
        from ascend_shim.errors import UnsupportedOnNPUError

        raise UnsupportedOnNPUError("flash_attn_gpu: a torch.Generator for dropout", "flash_attn.provide",
                                    "Pass gen=None; dropout draws from the NPU's default generator.")


def fwd(q, k, v, out_, alibi_slopes_, p_dropout, softmax_scale, is_causal, window_size_left, window_size_right,
        softcap, return_softmax, gen_):
    """-> [out, softmax_lse (B, H, Sq), S_dmask (empty), rng_state]."""
    _no_generator(gen_)
    out, lse, _, rng = _interface()._flash_attn_forward(q, k, v, p_dropout, softmax_scale, is_causal, window_size_left,
                                               window_size_right, softcap, alibi_slopes_, return_softmax)
    return [_into(out_, out), lse, q.new_empty(0), rng]


def varlen_fwd(q, k, v, out_, cu_seqlens_q, cu_seqlens_k, seqused_k_, leftpad_k_, block_table_, alibi_slopes_,
               max_seqlen_q, max_seqlen_k, p_dropout, softmax_scale, zero_tensors, is_causal, window_size_left,
               window_size_right, softcap, return_softmax, gen_):
    """-> [out (total_q, H, D), softmax_lse (H, total_q), S_dmask (empty), rng_state]."""
    _no_generator(gen_)
    out, lse, _, rng = _interface()._flash_attn_varlen_forward(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, p_dropout, softmax_scale, is_causal,
        window_size_left, window_size_right, softcap, alibi_slopes_, return_softmax, block_table_, leftpad_k_,
        seqused_k_, zero_tensors)
    return [_into(out_, out), lse, q.new_empty(0), rng]


def _grads(q, k, v, dq_, dk_, dv_):
    return (dq_ if dq_ is not None else torch.empty_like(q), dk_ if dk_ is not None else torch.empty_like(k),
            dv_ if dv_ is not None else torch.empty_like(v))


def bwd(dout, q, k, v, out, softmax_lse, dq_, dk_, dv_, alibi_slopes_, p_dropout, softmax_scale, is_causal,
        window_size_left, window_size_right, softcap, deterministic, gen_, rng_state):
    """Writes dq/dk/dv (allocated when None) -> [dq, dk, dv, softmax_d]."""
    _no_generator(gen_)
    dq, dk, dv = _grads(q, k, v, dq_, dk_, dv_)
    softmax_d = _interface()._flash_attn_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, p_dropout, softmax_scale,
                                         is_causal, window_size_left, window_size_right, softcap, alibi_slopes_,
                                         deterministic, rng_state)
    return [dq, dk, dv, softmax_d]


def varlen_bwd(dout, q, k, v, out, softmax_lse, dq_, dk_, dv_, cu_seqlens_q, cu_seqlens_k, alibi_slopes_,
               max_seqlen_q, max_seqlen_k, p_dropout, softmax_scale, zero_tensors, is_causal, window_size_left,
               window_size_right, softcap, deterministic, gen_, rng_state):
    """Writes dq/dk/dv (allocated when None) -> [dq, dk, dv, softmax_d]."""
    _no_generator(gen_)
    dq, dk, dv = _grads(q, k, v, dq_, dk_, dv_)
    softmax_d = _interface()._flash_attn_varlen_backward(
        dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        p_dropout, softmax_scale, is_causal, window_size_left, window_size_right, softcap, alibi_slopes_,
        deterministic, rng_state, zero_tensors)
    return [dq, dk, dv, softmax_d]
