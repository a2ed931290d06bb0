"""flash-attn attention on ``torch_npu.npu_fusion_attention``: the mapping, shared by the FA2 and FA3 modules.

Exactly flash-attn's semantics (``_reference.py`` states them), mapped onto the fused op's contract
(torch_npu's documented signature and layouts):

* ``softmax_scale`` defaults to ``1/sqrt(head_dim)`` and is always passed (the op's default is 1.0);
* the visible band of query i is ``[i + Sk - Sq - left, i + Sk - Sq + right]`` (bottom-right aligned; ``causal``
  sets right = 0; a side >= seqlen_k is unbounded, as flash-attn normalises it). Full attention -> sparse_mode 0
  without a mask; causal -> sparse_mode 3; any other band -> sparse_mode 4 (band anchored bottom-right) with
  ``pre_tockens=left``, ``next_tockens=right``. Modes 3/4 take the compressed 2048x2048 ``triu(1)`` bool mask,
  built once per device and reused (a causal flag without the mask would silently be full attention);
* GQA/MQA natively (Nq % Nkv == 0); ``dropout_p`` -> ``keep_prob = 1 - dropout_p``;
* ``softmax_lse = softmax_max + log(softmax_sum)`` from the op's statistics; rows with nothing visible output 0 and
  get ``lse = +inf`` (flash-attn's value);
* ALiBi -> ``pse = -slope * |i + Sk - Sq - j| / scale`` (the op adds pse before scaling) for fp16 dense calls;
  in bf16 (a bf16 pse loses ~3 significant digits of the bias) and varlen it runs the exact reference;
* ``softcap`` (no op argument) and bands the op rejects run the exact reference; every fallback is recorded with
  ``REPORT.fallback``; ``deterministic=True`` is honoured when ``torch.use_deterministic_algorithms`` is on and
  reported otherwise (the op has no per-call switch);
* varlen: ``cu_seqlens`` become the host lists the TND layout wants (``cu_seqlens[1:]``, cumulative ends without
  the leading 0), one device-to-host sync per distinct tensor per step (``_hostlists``). A decode step (one query
  per sequence, ``max_seqlen_q == 1``, no autograd) reads nothing: keys gathered into a padded batch, masked on
  the device, through the inference op's incremental path (``varlen_decode``).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from ascend_shim.errors import UnsupportedOnNPUError
from ascend_shim.report import REPORT

from . import _hostlists, _reference

PATCH_ID = "flash_attn.provide"
INT32_MAX = 2147483647
INVALID_ROW_MAX = -1e38  # the op's softmax_max of a row with nothing visible is -FLT_MAX
_masks: dict[tuple, torch.Tensor] = {}


def npu():
    """``torch_npu`` (the real one, or the emulator when the shim runs with the sim backend)."""
    import torch_npu

    return torch_npu


def compressed_mask(device: torch.device) -> torch.Tensor:
    """The 2048x2048 ``triu(ones, 1)`` bool mask sparse modes 2-4 require, one per device, built once.

    Built outside inference mode even when the first caller is a generation loop under ``torch.inference_mode``:
    a cached inference tensor has no version counter and cannot be saved for backward, so a later training step
    (or the op's own mask check) would fail on it.
    """
    key = (device.type, device.index if device.index is not None else torch.npu.current_device())
    mask = _masks.get(key)
    if mask is None:
        with torch.inference_mode(False), torch.no_grad():
            mask = torch.ones(2048, 2048, dtype=torch.bool, device=device).triu_(1)
        _masks[key] = mask
    return mask


# ---------------------------------------------------------------------------------------------------- checks

def check_inputs(api: str, q, *others, max_head_dim: int = 256) -> None:
    """flash-attn's own argument checks (dtype, heads, head dim), plus: the tensors must be on the NPU."""
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError(f"{api}: FlashAttention only support fp16 and bf16 data type (got {q.dtype})")
    for t in others:
        if t is not None and t.dtype != q.dtype:
            raise RuntimeError(f"{api}: query and key/value must have the same dtype")
    if q.device.type != "npu":
        raise RuntimeError(f"{api}: FlashAttention on Ascend needs tensors on the npu device, got {q.device}")
    if q.shape[-1] > max_head_dim:
        raise RuntimeError(f"{api}: FlashAttention forward only supports head dimension at most {max_head_dim}")
    if others and q.shape[-2] % others[0].shape[-2] != 0:
        raise RuntimeError(f"{api}: Number of heads in key/value must divide number of heads in query")


def note_deterministic(deterministic: bool, api: str) -> None:
    if deterministic and not torch.are_deterministic_algorithms_enabled():
        REPORT.note(f"{api}(deterministic=True): npu_fusion_attention has no per-call switch; its backward is "
                    f"deterministic under torch.use_deterministic_algorithms(True), which is off")


# ------------------------------------------------------------------------------------------------------ plans

@dataclasses.dataclass
class Plan:
    """How one call maps onto the op: sparse mode, tokens, mask, pse -- or why the reference runs instead."""

    left: int
    right: int
    mode: int = 0
    pre: int = INT32_MAX
    nxt: int = INT32_MAX
    mask: Any = None
    pse: Any = None
    fallback: str = ""


def normalize_window(causal: bool, window_size, seqlen_k: int) -> tuple[int, int]:
    """flash-attn's (left, right) after its own normalisation; -1 = unbounded."""
    left, right = (int(window_size[0]), int(window_size[1])) if window_size is not None else (-1, -1)
    left = -1 if left < 0 or left >= seqlen_k else left
    right = -1 if right < 0 or right >= seqlen_k else right
    if causal:
        right = 0
    return left, right


def _band(plan: Plan, device, max_q: int, max_k: int) -> Plan:
    if plan.left < 0 and plan.right < 0:
        return plan  # mode 0 without a mask: full attention
    plan.mask = compressed_mask(device)
    if plan.left < 0 and plan.right == 0:
        plan.mode = 3
        return plan
    plan.mode = 4  # unbounded sides clamped to the sequence lengths: same band, no int32 overflow
    plan.pre = plan.left if plan.left >= 0 else max_k
    plan.nxt = plan.right if plan.right >= 0 else max_q
    return plan


def _band_has_blocks(pre: int, nxt: int, sq: int, sk: int) -> bool:
    """The op's band check (sparse_mode 4, dense layouts): is there a valid block at all."""
    p, n = pre + sq - sk, nxt + sk - sq
    if p >= 0 and n >= 0:
        return True
    if p < 0 and n < 0:
        return False
    if p < 0:
        return n >= -p and -p < sk
    return -n <= p and -n < sq


def plan_dense(q, k, *, scale, causal, window_size, softcap, alibi_slopes) -> Plan:
    Sq, Sk = q.shape[1], k.shape[1]
    left, right = normalize_window(causal, window_size, Sk)
    plan = _band(Plan(left, right), q.device, Sq, Sk)
    if softcap > 0:
        plan.fallback = f"softcap={softcap}: npu_fusion_attention has no softcap; exact reference attention"
    elif plan.mode == 4 and not _band_has_blocks(plan.pre, plan.nxt, Sq, Sk):
        plan.fallback = (f"window_size={tuple(window_size)} with seqlen_q={Sq}, seqlen_k={Sk}: the band has rows "
                         f"with no key, which the op rejects; exact reference attention")
    elif alibi_slopes is not None:
        if q.dtype != torch.float16:
            plan.fallback = ("alibi_slopes with bfloat16: a bf16 pse would round the bias; exact reference "
                             "attention")
        else:
            bias = _reference.alibi_bias(alibi_slopes, q.shape[0], Sq, Sk, q.device)
            plan.pse = (bias / scale).to(q.dtype).contiguous()
    return plan


def plan_varlen(q, *, q_ends, k_ends, max_seqlen_k, causal, window_size, softcap, alibi_slopes) -> Plan:
    lens = [(a - pa, b - pb)
            for a, b, pa, pb in zip(q_ends, k_ends, [0] + q_ends[:-1], [0] + k_ends[:-1], strict=True)]
    max_q = max((a for a, _ in lens), default=0)
    max_k = max((b for _, b in lens), default=0)
    left, right = normalize_window(causal, window_size, int(max_seqlen_k))
    plan = _band(Plan(left, right), q.device, max_q, max_k)
    if softcap > 0:
        plan.fallback = f"softcap={softcap}: npu_fusion_attention has no softcap; exact reference attention"
    elif alibi_slopes is not None:
        plan.fallback = "alibi_slopes in varlen (the TND pse layout is not mapped); exact reference attention"
    elif not q_ends or q_ends[0] == 0 or k_ends[0] == 0:
        plan.fallback = "a leading empty sequence (the op wants a non-zero first end offset); exact reference"
    elif plan.mode == 3 and any(a > b for a, b in lens):
        plan.fallback = "causal with a sequence whose seqlen_q > seqlen_k (the op rejects it in TND); exact reference"
    elif plan.mode == 4 and any(a and b and a - plan.nxt > b for a, b in lens):
        plan.fallback = "a window leaving rows with no key in TND (the op rejects it); exact reference"
    return plan


# ----------------------------------------------------------------------------------------------- statistics

def lse_from_stats(smax: torch.Tensor, ssum: torch.Tensor, tnd: bool = False, heads: int = 0) -> torch.Tensor:
    """flash-attn's softmax_lse: (B, H, Sq) from [B, N, S, 8], or (H, T) from TND [T, N, 8] (NTD data)."""
    if tnd:
        m = smax.reshape(heads, -1, 8)[..., 0]
        s = ssum.reshape(heads, -1, 8)[..., 0]
    else:
        m, s = smax[..., 0], ssum[..., 0]
    lse = m + torch.log(s)
    return torch.where(m <= INVALID_ROW_MAX, torch.full_like(lse, math.inf), lse)


def stats_from_lse(lse: torch.Tensor, tnd: bool = False):
    """(softmax_max, softmax_sum) for the grad op from flash-attn's lse: max = lse, sum = 1 gives the same P."""
    lse = lse.float()
    if tnd:  # (H, T) -> [T, N, 8] holding NTD data
        h, t = lse.shape
        smax = lse.unsqueeze(-1).expand(h, t, 8).contiguous().reshape(t, h, 8)
    else:
        smax = lse.unsqueeze(-1).expand(*lse.shape, 8).contiguous()
    return smax, torch.ones_like(smax)


def tnd_numels(heads: int, q_ends, k_ends) -> int:
    """op-plugin's dropout-mask length for TND."""
    acc = q_ends[0] * k_ends[0]
    for i in range(1, len(q_ends)):
        acc += (q_ends[i] - q_ends[i - 1]) * (k_ends[i] - k_ends[i - 1])
    return heads * acc


# ---------------------------------------------------------------------------------------------------- forward

@dataclasses.dataclass
class Result:
    out: torch.Tensor
    smax: Any = None
    ssum: Any = None
    lse_ref: Any = None  # the reference's lse when it ran
    rng: tuple = (0, 0, 0)  # seed, offset, numels
    tnd: bool = False

    def lse(self) -> torch.Tensor:
        if self.lse_ref is not None:
            return self.lse_ref
        return lse_from_stats(self.smax, self.ssum, self.tnd, self.out.shape[-2])


def dense(q, k, v, *, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
          alibi_slopes=None, deterministic=False, api="flash_attn_func") -> Result:
    """q (B, Sq, H, D), k/v (B, Sk, Hk, D) -> Result; autograd flows through the op (or the reference)."""
    check_inputs(api, q, k, v)
    note_deterministic(deterministic, api)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)
    plan = plan_dense(q, k, scale=scale, causal=causal, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes)
    if plan.fallback:
        REPORT.fallback(api, plan.fallback)
        out, lse = _reference.attention(q, k, v, scale=scale, left=plan.left, right=plan.right, softcap=softcap,
                                        alibi=alibi_slopes, dropout_p=dropout_p)
        return Result(out, lse_ref=lse)
    res = npu().npu_fusion_attention(q, k, v, q.shape[2], "BSND", pse=plan.pse, atten_mask=plan.mask, scale=scale,
                                     keep_prob=1.0 - dropout_p, pre_tockens=plan.pre, next_tockens=plan.nxt,
                                     sparse_mode=plan.mode)
    return Result(res[0], res[1], res[2], rng=(int(res[4]), int(res[5]), int(res[6])))


def varlen_ends(cu_seqlens_q, cu_seqlens_k, api: str) -> tuple[list[int], list[int]]:
    """Cumulative end offsets without the leading 0 (the op's actual_seq_qlen/kvlen), one sync for both."""
    lq, lk = _hostlists.host_lists(cu_seqlens_q, cu_seqlens_k)
    if lq[0] != 0 or lk[0] != 0:
        raise UnsupportedOnNPUError(f"{api} with cu_seqlens[0] != 0", PATCH_ID,
                                    "Pass cu_seqlens starting at 0 (slice q/k/v instead of offsetting).")
    return lq[1:], lk[1:]


def gather_paged(k_cache, block_table, k_ends: list[int]) -> torch.Tensor:
    """Paged (num_blocks, page, Hk, D) -> TND (total_k, Hk, D) for the sequences' lengths (device gathers only)."""
    page = k_cache.shape[1]
    parts, prev = [], 0
    for b, end in enumerate(k_ends):
        n = end - prev
        prev = end
        blocks = -(-n // page)
        if n:
            parts.append(k_cache[block_table[b, :blocks].long()].reshape(-1, *k_cache.shape[2:])[:n])
    return torch.cat(parts) if parts else k_cache.new_zeros(0, *k_cache.shape[2:])


def recorded_for_backward(*tensors: torch.Tensor) -> bool:
    """Would an op on these tensors be recorded for autograd? The decode paths serve only calls that are not."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _is_decode_step(q, k, v, cu_seqlens_q, max_seqlen_q, dropout_p, softcap, alibi_slopes, block_table) -> bool:
    """One query per sequence (``max_seqlen_q == 1`` and as many queries as sequences), device lengths, no
    autograd, nothing the reference would have to run: a generation step, served without reading the lengths."""
    return (int(max_seqlen_q) == 1 and q.shape[0] == cu_seqlens_q.shape[0] - 1 and block_table is None
            and cu_seqlens_q.device.type != "cpu" and dropout_p == 0 and not softcap > 0 and alibi_slopes is None
            and not recorded_for_backward(q, k, v))


def varlen_decode(q, k, v, cu_seqlens_k, max_seqlen_k: int, *, scale: float, window) -> Result:
    """A varlen decode step (one query per sequence, as transformers' ``generate`` with padding sends) with no
    device-to-host sync: the keys are gathered into a (B, max_seqlen_k) padded batch on the device and
    :func:`padded_decode` masks each row past its length (and before its left window edge); the lengths stay on
    the device."""
    width = max(int(max_seqlen_k), 1)
    starts = cu_seqlens_k[:-1].long()
    lens = cu_seqlens_k[1:].long() - starts
    col = torch.arange(width, device=q.device).view(1, -1)
    idx = (starts.view(-1, 1) + col).clamp_(0, max(k.shape[0] - 1, 0))
    hide = col >= lens.view(-1, 1)
    left = window[0]
    if left >= 0:
        hide |= col < lens.view(-1, 1) - 1 - left
    out, lse = padded_decode(q, k[idx], v[idx], hide, lens == 0, scale=scale)
    return Result(out, lse_ref=lse.t().contiguous(), tnd=True)


def padded_decode(q, kp, vp, hide, empty, *, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One query per row of a padded batch, through the inference op's incremental path: q (B, H, D), kp/vp
    (B, Sk, Hk, D), ``hide`` (B, Sk) bool (True = not visible), ``empty`` (B,) bool (rows with no key at all) ->
    (out (B, H, D), lse (B, H) float32). Row b's only query sits at its last key (bottom-right alignment), so
    ``causal`` hides nothing; rows with nothing visible give flash-attn's zeros and lse +inf. Nothing is read to
    the host."""
    B, H, D = q.shape
    out, lse = npu().npu_fused_infer_attention_score(q.view(B, 1, H, D), kp, vp, atten_mask=hide, num_heads=H,
                                                     num_key_value_heads=kp.shape[2], input_layout="BSND",
                                                     scale=scale, softmax_lse_flag=True)
    empty = empty.view(B, 1, 1)
    out = torch.where(empty, torch.zeros((), dtype=out.dtype, device=out.device), out.view(B, H, D))
    lse = lse.reshape(B, H).float()
    lse = torch.where((lse <= INVALID_ROW_MAX) | empty.view(B, 1), torch.full_like(lse, math.inf), lse)
    return out, lse


def varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           block_table=None, api="flash_attn_varlen_func") -> Result:
    """q (Tq, H, D), k/v (Tk, Hk, D) (or paged caches with ``block_table``) -> Result with TND statistics."""
    check_inputs(api, q, k, v)
    note_deterministic(deterministic, api)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)
    if _is_decode_step(q, k, v, cu_seqlens_q, max_seqlen_q, dropout_p, softcap, alibi_slopes, block_table):
        return varlen_decode(q, k, v, cu_seqlens_k, int(max_seqlen_k), scale=scale,
                             window=normalize_window(causal, window_size, int(max_seqlen_k)))
    q_ends, k_ends = varlen_ends(cu_seqlens_q, cu_seqlens_k, api)
    if block_table is not None:
        k, v = gather_paged(k, block_table, k_ends), gather_paged(v, block_table, k_ends)
    plan = plan_varlen(q, q_ends=q_ends, k_ends=k_ends, max_seqlen_k=max_seqlen_k, causal=causal,
                       window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes)
    if plan.fallback:
        REPORT.fallback(api, plan.fallback)
        out, lse = varlen_reference(q, k, v, q_ends, k_ends, scale=scale, plan=plan, softcap=softcap,
                                    alibi=alibi_slopes, dropout_p=dropout_p)
        return Result(out, lse_ref=lse, tnd=True)
    res = npu().npu_fusion_attention(q, k, v, q.shape[1], "TND", atten_mask=plan.mask, scale=scale,
                                     keep_prob=1.0 - dropout_p, pre_tockens=plan.pre, next_tockens=plan.nxt,
                                     actual_seq_qlen=q_ends, actual_seq_kvlen=k_ends, sparse_mode=plan.mode)
    return Result(res[0], res[1], res[2], rng=(int(res[4]), int(res[5]), int(res[6])), tnd=True)


def varlen_reference(q, k, v, q_ends, k_ends, *, scale, plan: Plan, softcap, alibi, dropout_p):
    """The reference over TND tensors; windows are normalised per flash-attn already (left/right of ``plan``)."""
    if alibi is not None and alibi.dim() == 2:  # (B, H) slopes: one row per sequence
        out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype, device=q.device)
        lse = torch.full((q.shape[1], q.shape[0]), math.inf, device=q.device)
        pq = pk = 0
        outs, lses, spans = [], [], []
        for b, (a, c) in enumerate(zip(q_ends, k_ends, strict=True)):
            if a > pq:
                o, seq_lse = _reference.attention(q[pq:a][None], k[pk:c][None], v[pk:c][None], scale=scale,
                                                  left=plan.left, right=plan.right, softcap=softcap, alibi=alibi[b],
                                                  dropout_p=dropout_p)
                outs.append(o[0])
                lses.append(seq_lse[0])
                spans.append((pq, a))
            pq, pk = a, c
        idx = torch.cat([torch.arange(s, e, device=q.device) for s, e in spans])
        return out.index_put((idx,), torch.cat(outs)), lse.t().index_put((idx,), torch.cat(lses, 1).t()).t()
    return _reference.varlen_attention(q, k, v, q_ends, k_ends, scale=scale, left=plan.left, right=plan.right,
                                       softcap=softcap, alibi=alibi, dropout_p=dropout_p)


# --------------------------------------------------------------------------------------------------- backward

def _reference_grads(fn, dout, tensors):
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) for t in tensors]
        out = fn(*leaves)
        return torch.autograd.grad(out, leaves, dout)


def _write(dst, src):
    if dst is None:
        return src
    dst.copy_(src)
    return dst


def dense_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, *, dropout_p, softmax_scale, causal, window_size,
                   softcap, alibi_slopes, deterministic, rng_state, api="_flash_attn_backward"):
    """Gradients into dq/dk/dv (in place, as flash-attn's bwd); returns softmax_d = rowsum(dout * out)."""
    note_deterministic(deterministic, api)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)
    plan = plan_dense(q, k, scale=scale, causal=causal, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes)
    if plan.fallback:
        _no_dropout_replay(dropout_p, api)
        REPORT.fallback(api, plan.fallback)
        g = _reference_grads(lambda a, b, c: _reference.attention(a, b, c, scale=scale, left=plan.left,
                                                                  right=plan.right, softcap=softcap,
                                                                  alibi=alibi_slopes)[0], dout, (q, k, v))
    else:
        smax, ssum = stats_from_lse(softmax_lse)
        seed, offset = _rng(rng_state)
        B, Sq, H, _ = q.shape
        g = npu().npu_fusion_attention_grad(
            q, k, v, dout, H, "BSND", pse=plan.pse, atten_mask=plan.mask, softmax_max=smax, softmax_sum=ssum,
            attention_in=out, scale_value=scale, keep_prob=1.0 - dropout_p, pre_tockens=plan.pre,
            next_tockens=plan.nxt, seed=seed, offset=offset, numels=B * H * Sq * k.shape[1], sparse_mode=plan.mode)
    dq, dk, dv = _write(dq, g[0]), _write(dk, g[1]), _write(dv, g[2])
    return (dout.float() * out.float()).sum(-1).transpose(1, 2).contiguous()


def varlen_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                    max_seqlen_k, *, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                    deterministic, rng_state, api="_flash_attn_varlen_backward"):
    note_deterministic(deterministic, api)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)
    q_ends, k_ends = varlen_ends(cu_seqlens_q, cu_seqlens_k, api)
    plan = plan_varlen(q, q_ends=q_ends, k_ends=k_ends, max_seqlen_k=max_seqlen_k, causal=causal,
                       window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes)
    if plan.fallback:
        _no_dropout_replay(dropout_p, api)
        REPORT.fallback(api, plan.fallback)
        g = _reference_grads(lambda a, b, c: varlen_reference(a, b, c, q_ends, k_ends, scale=scale, plan=plan,
                                                              softcap=softcap, alibi=alibi_slopes,
                                                              dropout_p=0.0)[0], dout, (q, k, v))
    else:
        smax, ssum = stats_from_lse(softmax_lse, tnd=True)
        seed, offset = _rng(rng_state)
        H = q.shape[1]
        g = npu().npu_fusion_attention_grad(
            q, k, v, dout, H, "TND", atten_mask=plan.mask, softmax_max=smax, softmax_sum=ssum, attention_in=out,
            scale_value=scale, keep_prob=1.0 - dropout_p, pre_tockens=plan.pre, next_tockens=plan.nxt, seed=seed,
            offset=offset, numels=tnd_numels(H, q_ends, k_ends), actual_seq_qlen=q_ends, actual_seq_kvlen=k_ends,
            sparse_mode=plan.mode)
    dq, dk, dv = _write(dq, g[0]), _write(dk, g[1]), _write(dv, g[2])
    return (dout.float() * out.float()).sum(-1).t().contiguous()


def rng_tensor(res: Result) -> torch.Tensor:
    """flash-attn's rng_state: here a host int64 (seed, offset) pair, so reading it back costs no sync."""
    return torch.tensor(res.rng[:2], dtype=torch.int64)


def _rng(rng_state) -> tuple[int, int]:
    if rng_state is None:
        return 0, 0
    vals = rng_state.tolist() if isinstance(rng_state, torch.Tensor) else list(rng_state)
    return int(vals[0]), int(vals[1])


def _no_dropout_replay(dropout_p: float, api: str) -> None:
    if dropout_p > 0:
        raise UnsupportedOnNPUError(f"{api} with dropout_p > 0 on the reference fallback", PATCH_ID,
                                    "The reference cannot replay the forward's dropout mask; use dropout_p=0 with "
                                    "softcap / bf16 ALiBi, or the public autograd functions.")
