"""Emulated ``torch_npu.npu_fusion_attention`` (training FlashAttention) and ``npu_fusion_attention_grad``.

The contract (torch_npu 2.7.1.post11 .. 2.14.0 schema; op-plugin ``FlashAttentionKernelNpuOpApi.cpp``; CANN
``flash_attention_score`` tiling; torch_npu's documentation of the op):

* ``attention_out = Dropout(Softmax(Mask(scale * (pse + Q K^T), atten_mask)), keep_prob) V``: ``scale`` defaults to
  **1.0**, ``pse`` is added *before* scaling, masked scores are selected to -FLT_MAX.
* ``atten_mask`` (bool/uint8, 1 = masked) is required for sparse modes 2-4 (the compressed 2048x2048
  ``triu(ones, 1)``); without a mask modes 0/1 compute full attention whatever ``pre_tockens``/``next_tockens``
  say. Mode 0 = mask + band ``i - pre <= j <= i + next`` (top-left), 1 = mask only, 2 = ``j <= i``,
  3 = ``j <= i + Skv - Sq``, 4 = band anchored bottom-right.
* Rows left with nothing to attend (mode 3 with Sq > Skv, bands) get the kernel's automatic invalid-row
  correction: output 0, ``softmax_max = -FLT_MAX``, ``softmax_sum = FLT_MAX``; ``inner_precise=2`` forces it.
* Returns ``(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)``; the statistics are fp32
  ``[B, N, Sq, 8]`` (``[T, N, 8]`` for TND, data in NTD order unless ``softmax_layout="TND"``), the value
  replicated over the last 8; ``softmax_out`` is an empty tensor.
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from . import _attention_core as core
from . import _release, _rng
from ._common import INT32_MAX, NotEmulatedError, check, check_float_dtypes, check_npu, dtype_name, fail, \
    int_list, is_compressed_causal_mask
from ._derivatives import OpFunction, argument_names
from ._registry import npu_op

OP = "npu_fusion_attention"
OP_GRAD = "npu_fusion_attention_grad"
_LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 768
MAX_HEADS = 256


@dataclass
class _Seq:
    q0: int
    q1: int
    k0: int
    k1: int

    @property
    def sq(self):
        return self.q1 - self.q0

    @property
    def skv(self):
        return self.k1 - self.k0


@dataclass
class _Plan:
    op: str
    layout: str
    dtype: torch.dtype
    B: int
    Nq: int
    Nkv: int
    Sq: int
    Skv: int
    D: int
    Dv: int
    scale: float
    keep_prob: float
    sparse_mode: int
    pre: int
    nxt: int
    inner_precise: int
    mask: Any = None  # bool tensor, (B|1, N|1, Sq, Skv) or (Sq, Skv) for mode 0/1; None for 2-4 (rule based)
    pse: Any = None
    pse_kind: str = ""
    softmax_layout: str = ""
    seqs: list = field(default_factory=list)  # TND only
    T: int = 0
    Tkv: int = 0
    numels: int = 0

    @property
    def G(self):
        return self.Nq // self.Nkv


# ---------------------------------------------------------------------------------------------------- validation

def _shape_info(op, layout, q, k, v, head_num):
    """(B, Nq, Nkv, Sq, Skv, D, Dv) from the layout, with the kernel's shape checks."""
    nd = 3 if layout in ("BSH", "SBH", "TND") else 4
    for name, t in (("query", q), ("key", k), ("value", v)):
        check(t.dim() == nd, op, f"Invalid layout[{layout}]: {name} must be {nd}-dimensional for {layout}, "
                                 f"but got shape {tuple(t.shape)}")
    if layout in ("BSH", "SBH"):
        if layout == "BSH":
            B, Sq, Hq = q.shape
            Bk, Skv, Hk = k.shape
            Bv, Sv, Hv = v.shape
        else:
            Sq, B, Hq = q.shape
            Skv, Bk, Hk = k.shape
            Sv, Bv, Hv = v.shape
        check(Hq % head_num == 0 and Hq > 0, op, f"h1 [{Hq}] should be a multiple of n1Size [{head_num}] "
                                                 f"(query H must be head_num * D)")
        D = Hq // head_num
        check(Hk % D == 0 and Hk > 0, op, f"key H [{Hk}] should be a multiple of D [{D}] (key H = Nkv * D)")
        Nkv = Hk // D
        check(Hv % Nkv == 0, op, f"value H [{Hv}] should be a multiple of Nkv [{Nkv}] (value H = Nkv * Dv)")
        Dv = Hv // Nkv
        Nq = head_num
    elif layout in ("BSND", "BNSD"):
        if layout == "BSND":
            B, Sq, Nq, D = q.shape
            Bk, Skv, Nkv, Dk = k.shape
            Bv, Sv, Nv, Dv = v.shape
        else:
            B, Nq, Sq, D = q.shape
            Bk, Nkv, Skv, Dk = k.shape
            Bv, Nv, Sv, Dv = v.shape
        check(Nq == head_num, op, f"head_num is [{head_num}], but got query N [{Nq}].")
        check(Dk == D, op, f"query and key head dims must be equal (Dq == Dk), but got Dq={D}, Dk={Dk}")
        check(Nv == Nkv, op, f"key and value must have the same number of heads, but got {Nkv} and {Nv}")
    else:  # TND
        T, Nq, D = q.shape
        Tk, Nkv, Dk = k.shape
        Tv, Nv, Dv = v.shape
        check(Nq == head_num, op, f"head_num is [{head_num}], but got query dim1 [{Nq}].")
        check(Dk == D, op, f"query and key head dims must be equal (Dq == Dk), but got Dq={D}, Dk={Dk}")
        check(Nv == Nkv and Tv == Tk, op, f"key and value shapes must match except D, got {tuple(k.shape)} and "
                                          f"{tuple(v.shape)}")
        return None, Nq, Nkv, None, None, D, Dv
    check(B == Bk == Bv, op, f"query, key and value batch sizes must be equal, got {B}, {Bk}, {Bv}")
    check(Skv == Sv, op, f"key and value sequence lengths must be equal, got {Skv} and {Sv}")
    return B, Nq, Nkv, Sq, Skv, D, Dv


def _cumulative(op, name, lst, total):
    check(len(lst) > 0, op, f"{name} must not be empty")
    shown = f"{lst[:4]}{'...' if len(lst) > 4 else ''}"
    check(lst[0] != 0, op, f"{name} holds the cumulative END offsets of the sequences WITHOUT a leading 0 "
                           f"(lengths 2,2,2 are passed as [2, 4, 6]), but got {shown}; pass cu_seqlens[1:], not "
                           "cu_seqlens")
    # Trailing zeros skip trailing batches (documented); everything before them must be non-decreasing.
    n = len(lst)
    while n > 0 and lst[n - 1] == 0:
        n -= 1
    vals = lst[:n]
    check(all(x >= 0 for x in lst), op, f"{name} must not contain negative values, got {lst}")
    check(all(b >= a for a, b in itertools.pairwise(vals)), op,
          f"{name} must be cumulative (non-decreasing) end offsets, got {lst}")
    check(vals[-1] <= total, op, f"Query/key T({total}) need larger than or equal to the sum of sequence lengths "
                                 f"({vals[-1]}) given by {name}")
    return vals


def _band_check_tl(op, pre, nxt, s1, s2, orig):
    """SparseBandModeCheck of the kernel tiling (pre/next already top-left anchored)."""
    if pre >= 0 and nxt >= 0:
        return
    op_pre, op_next = orig
    if pre < 0 and nxt < 0:
        fail(op, f"PreTokens[{op_pre}] and nextTokens[{op_next}] config error, there is no valid data block.")
    if pre < 0:
        if not (nxt >= -pre and -pre < s2):
            fail(op, f"PreTokens[{op_pre}] and nextTokens[{op_next}] config error with S1[{s1}], there is no "
                     f"valid data block.")
    else:
        if not (-nxt <= pre and -nxt < s1):
            fail(op, f"PreTokens[{op_pre}] and nextTokens[{op_next}] config error with S2[{s2}], there is no "
                     f"valid data block.")


def _check_mask(op, plan: _Plan, mask):
    mode = plan.sparse_mode
    check(mask.dtype in (torch.bool, torch.uint8), op,
          f"invalid atten_mask dtype[{dtype_name(mask.dtype)}], only support bool or uint8.")
    shp = tuple(mask.shape)
    if plan.layout == "TND":
        if mode in (2, 3, 4):
            check(shp == (2048, 2048), op, f"sparse_mode {mode} needs the compressed atten_mask of shape "
                                           f"[2048, 2048] (torch.triu(torch.ones(2048, 2048), 1).bool()), "
                                           f"but got {list(shp)}")
        else:
            msq = max(s.sq for s in plan.seqs)
            mskv = max(s.skv for s in plan.seqs)
            check(shp == (msq, mskv), op,
                  f"get unsupported atten_mask shape, the shape is {list(shp)}. MaxSq=[{msq}], MaxSkv=[{mskv}], "
                  f"when input_layout is TND, the supported atten_mask shape is [MaxSq, MaxSkv].")
    else:
        B, N, Sq, Skv = plan.B, plan.Nq, plan.Sq, plan.Skv
        ok4 = [(1, 1, Sq, Skv), (B, 1, Sq, Skv), (B, N, Sq, Skv)]
        if mask.dim() == 4:
            check(shp in ok4, op,
                  f"get unsupported atten_mask shape, the shape is {list(shp)}. B=[{B}], N=[{N}], Sq=[{Sq}], "
                  f"Skv=[{Skv}], supported atten_mask shape can be [B, N, Sq, Skv], [B, 1, Sq, Skv], "
                  f"[1, 1, Sq, Skv] and [Sq, Skv].")
        elif mask.dim() == 2:
            check(shp == (Sq, Skv) or mode in (2, 3, 4), op,
                  f"get unsupported atten_mask shape, the shape is {list(shp)}. B=[{B}], N=[{N}], Sq=[{Sq}], "
                  f"Skv=[{Skv}], supported atten_mask shape can be [B, N, Sq, Skv], [B, 1, Sq, Skv], "
                  f"[1, 1, Sq, Skv] and [Sq, Skv].")
        else:
            fail(op, f"atten mask dim should be 2 or 4, but got {mask.dim()}")
        if mode in (2, 3, 4):
            check(shp[-2:] == (2048, 2048), op,
                  f"In the attenmask compression, please set the atten_mask_shape to [2048,2048] (sparse_mode "
                  f"{mode} needs torch.triu(torch.ones(2048, 2048), 1).bool()), but got {list(shp)}")
    if mode in (2, 3, 4):
        check(is_compressed_causal_mask(mask), op,
              f"sparse_mode {mode} needs the compressed mask torch.triu(torch.ones(2048, 2048), diagonal=1).bool() "
              f"(True above the diagonal = masked); the given 2048x2048 mask has other contents. The hardware would "
              f"not reject it but would compute with a wrong mask (a common bug: tril or an inverted SDPA mask).")


def _check_pse(op, plan: _Plan, pse):
    shp = tuple(pse.shape)
    if plan.layout == "TND":
        N = plan.Nq
        acc_s2 = sum(s.skv for s in plan.seqs)
        acc_s1s2 = sum(s.sq * s.skv for s in plan.seqs)
        check(all(s.sq > 0 for s in plan.seqs), op,
              "pse is not supported when a batch of actual_seq_qlen has length 0")
        if pse.dim() == 4 and shp[2] == 1024 and shp[1] == N:
            raise NotEmulatedError(op, "alibi-compressed pse (last 1024 rows) in TND layout")
        if shp[0] == acc_s2 * N and pse.numel() == shp[0]:
            return "tnd_bn1s"
        if shp[0] == acc_s1s2 * N and pse.numel() == shp[0]:
            return "tnd_bnss"
        fail(op, f"get unsupported pse shape {list(shp)} for TND: expected a flattened per-batch [N, 1, Skv_i] "
                 f"(first dim {acc_s2 * N}) or [N, Sq_i, Skv_i] (first dim {acc_s1s2 * N}) tensor")
    check(pse.dim() == 4, op, f"pse dim should be 4, but got {pse.dim()}")
    check(shp[0] in (1, plan.B), op, f"pse batchsize should be 1 or {plan.B}, but got {shp[0]}")
    N, Sq, Skv = plan.Nq, plan.Sq, plan.Skv
    if shp[1:] == (N, Sq, Skv) or shp[1:] == (N, 1, Skv):
        return "bnss"
    if shp[1:] == (N, 1024, Skv) and Sq > 1024:
        raise NotEmulatedError(op, "alibi-compressed pse (last 1024 rows, Sq > 1024)")
    fail(op, f"get unsupported pse shape, the shape is {list(shp)}; supported: [B, N, Sq, Skv], [1, N, Sq, Skv], "
             f"[B, N, 1, Skv], [1, N, 1, Skv] with B={plan.B}, N={N}, Sq={Sq}, Skv={Skv}")


def _plan(op, query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale, keep_prob,
          pre_tockens, next_tockens, inner_precise, prefix, actual_seq_qlen, actual_seq_kvlen, sparse_mode,
          softmax_layout, sink, dropout_mask) -> _Plan:
    # --- op-plugin wrapper checks (messages as torch_npu's) ---
    check(head_num > 0, op, f"head_num must > 0, but got {head_num}")
    for name, t in (("query", query), ("key", key), ("value", value)):
        check(t.dim() in (3, 4), op, f"The shapes of the input {name} should be 3 or 4 dimensional, but got "
                                     f"{t.dim()}-dimensional")
    check(0 < keep_prob <= 1, op, f"The keep_prob value must be in range of (0, 1], but got {keep_prob}")
    check(isinstance(input_layout, str) and input_layout != "", op, "input_layout is empty")
    layout = input_layout.upper()
    softmax_layout = softmax_layout or ""
    check(softmax_layout in ("", "TND"), op, "only supported softmax_layout=TND")
    check(not (softmax_layout == "TND" and layout != "TND"), op,
          "softmax_layout=TND only supported when input_layout_str=TND")
    qlen = int_list(op, "actual_seq_qlen", actual_seq_qlen) or []  # (read for TND only)
    kvlen = int_list(op, "actual_seq_kvlen", actual_seq_kvlen) or []
    prefix = int_list(op, "prefix", prefix)
    if layout == "TND":
        check(0 <= sparse_mode <= 8 and sparse_mode != 5, op,
              f"The sparse_mode value must be in range of [0,5) or (5,8], but got {sparse_mode}")
        check(bool(qlen) and bool(kvlen) and len(qlen) == len(kvlen), op,
              "the size of actual_seq_qlen and actual_seq_kvlen must be the same and cannot be empty.")
    else:
        check(0 <= sparse_mode <= 6, op, f"The sparse_mode value must be in range of [0,6], but got {sparse_mode}"
                                         + (" (sparse_mode 7 and 8 are varlen/TND-only)" if sparse_mode in (7, 8)
                                            else ""))
    check(layout in _LAYOUTS, op,
          f"The input_layout should be BSH/SBH/BNSD/BSND/TND(case-insensitive), but got {input_layout}")

    # --- kernel (aclnn / tiling) checks ---
    dtype = check_float_dtypes(op, _FLOATS, query=query, key=key, value=value, pse=pse)
    check(padding_mask is None, op, "padding_mask is not supported (暂不支持); pass None")
    if sink is not None:
        raise NotEmulatedError(op, "sink (learnable attention sink)")
    if dropout_mask is not None:
        raise NotEmulatedError(op, "an externally generated dropout_mask")
    if sparse_mode in (5, 6, 7, 8):
        raise NotEmulatedError(op, f"sparse_mode={sparse_mode} (prefix / varlen split-sequence modes)")

    B, Nq, Nkv, Sq, Skv, D, Dv = _shape_info(op, layout, query, key, value, head_num)
    check(Nkv > 0 and Nq % Nkv == 0, op, f"n1Size [{Nq}] should be a multiple of n2Size [{Nkv}] "
                                         f"(Nq/Nkv must be a positive integer for GQA/MQA)")
    check(1 <= Nq <= MAX_HEADS, op, f"Nq must be in range [1, {MAX_HEADS}], but got {Nq}")
    check(1 <= D <= MAX_HEAD_DIM, op, f"head dim D must be in range [1, {MAX_HEAD_DIM}], but got {D}")
    check(Dv <= D and Dv >= 1, op, f"head dims must satisfy Dq == Dk >= Dv, but got Dk={D}, Dv={Dv}")

    plan = _Plan(op=op, layout=layout, dtype=dtype, B=B or 0, Nq=Nq, Nkv=Nkv, Sq=Sq or 0, Skv=Skv or 0, D=D,
                 Dv=Dv, scale=float(scale), keep_prob=float(keep_prob), sparse_mode=int(sparse_mode),
                 pre=int(pre_tockens), nxt=int(next_tockens), inner_precise=int(inner_precise),
                 softmax_layout=softmax_layout)

    if layout == "TND":
        T, Tk = query.shape[0], key.shape[0]
        check(1 <= T <= (1 << 20), op, f"T must be in range [1, 1M], but got {T}")
        check(len(qlen) <= 2048, op, f"varlen batch must be in range [1, 2K], but got {len(qlen)}")
        qv = _cumulative(op, "actual_seq_qlen", qlen, T)
        kv = _cumulative(op, "actual_seq_kvlen", kvlen, Tk)
        check(len(qv) == len(kv), op, "actual_seq_qlen and actual_seq_kvlen must describe the same number of "
                                      f"batches (after trailing zeros), got {len(qv)} and {len(kv)}")
        seqs, pq, pk = [], 0, 0
        for a, b in zip(qv, kv, strict=True):
            seqs.append(_Seq(pq, a, pk, b))
            pq, pk = a, b
        plan.seqs, plan.T, plan.Tkv = seqs, T, Tk
        acc = qlen[0] * kvlen[0]
        for i in range(1, len(qlen)):
            acc += (qlen[i] - qlen[i - 1]) * (kvlen[i] - kvlen[i - 1])
        plan.numels = Nq * acc  # exactly op-plugin's formula (returned as the 7th output)
    else:
        check(1 <= B <= (1 << 21), op, f"B must be in range [1, 2M], but got {B}")
        check(1 <= Sq <= (1 << 20) and 1 <= Skv <= (1 << 20), op,
              f"S must be in range [1, 1M], but got Sq={Sq}, Skv={Skv}")
        plan.numels = B * Nq * Sq * Skv

    if pse is not None:
        plan.pse, plan.pse_kind = pse, _check_pse(op, plan, pse)

    mode = plan.sparse_mode
    if atten_mask is None:
        check(mode not in (2, 3, 4), op,
              f"sparse_mode {mode} needs atten_mask = torch.triu(torch.ones(2048, 2048), 1).bool() (the compressed "
              f"causal/band mask). Without a mask the hardware ignores sparse_mode/pre_tockens/next_tockens and "
              f"computes FULL, non-causal attention, which is almost certainly a bug in the caller; ascend_shim's "
              f"sim rejects it.")
        return plan
    _check_mask(op, plan, atten_mask)
    if mode in (0, 1):
        plan.mask = atten_mask if atten_mask.dtype == torch.bool else atten_mask != 0
    _check_tokens(op, plan)
    return plan


def _check_tokens(op, plan: _Plan):
    mode, pre, nxt = plan.sparse_mode, plan.pre, plan.nxt
    if plan.layout != "TND":
        s1, s2 = plan.Sq, plan.Skv
        if mode == 0:
            if pre >= s1 and nxt == 0:
                return
            if pre >= s1 and nxt >= s2:
                return
            _band_check_tl(op, pre, nxt, s1, s2, (pre, nxt))
        elif mode == 4:
            _band_check_tl(op, pre + s1 - s2, nxt + s2 - s1, s1, s2, (pre, nxt))
        return
    # varlen tiling (FlashAttentionVarLenScoreTiling)
    seqs = [s for s in plan.seqs if s.sq and s.skv]
    msq = max(s.sq for s in plan.seqs)
    mskv = max(s.skv for s in plan.seqs)
    if mode == 0:
        if pre >= msq and nxt == 0:
            return
        check(nxt >= 0, op, f"nextTokens[{nxt}] config error, there is no valid data block.")
        if pre >= msq and nxt >= mskv:
            return
        for i, s in enumerate(plan.seqs):
            if s.sq and s.skv and s.skv + pre < s.sq:
                fail(op, f"Batch[{i}] s1[{s.sq}] s2[{s.skv}] has invalid row, check pre_tokens and next_tokens.")
        if pre < 0 and nxt < -pre:
            fail(op, f"preTokens[{pre}] and nextTokens[{nxt}] config error with S[{min(s.skv for s in seqs)}], "
                     f"has invalid data block.")
    elif mode == 3:
        for i, s in enumerate(plan.seqs):
            if s.sq > s.skv:
                fail(op, f"Batch[{i}] s1[{s.sq}] is larger than s2[{s.skv}], exist invalid row.")
    elif mode == 4:
        check(pre >= 0, op, f"pre_tokens[{pre}] config error, has invalid data block.")
        check(not (nxt < 0 and pre + nxt < 0), op, f"pre_tokens[{pre}], next_tokens[{nxt}], invalid config.")
        for i, s in enumerate(plan.seqs):
            if s.sq and s.skv and s.sq - nxt > s.skv:
                fail(op, f"Batch[{i}], s1[{s.sq}], s2[{s.skv}], next_tokens[{nxt}], has invalid row.")


# ------------------------------------------------------------------------------------------------ mask building

def _rule_mask(plan: _Plan, sq: int, skv: int, device):
    """The structural part of the effective mask for one (sq, skv) block, or None; plus 'may have empty rows'."""
    mode, pre, nxt = plan.sparse_mode, plan.pre, plan.nxt
    if mode == 0:
        if pre >= sq and nxt >= skv:
            return None, False
        return core.band_masked(sq, skv, pre, nxt, device), (pre < sq - skv or nxt < 0)
    if mode == 1:
        return None, False
    if mode == 2:
        return core.causal_masked(sq, skv, device), False
    if mode == 3:
        return core.causal_masked(sq, skv, device, offset=skv - sq), skv < sq
    # mode 4: band anchored at the bottom-right corner
    off = skv - sq
    return core.band_masked(sq, skv, pre, nxt, device, offset=off), (pre - off < sq - skv or nxt + off < 0)


def _to5(t, B, Nkv, G):
    """(b, n, s1, s2) with n in {1, Nq} -> broadcastable 5-D (b, Nkv|1, G|1, s1, s2)."""
    b, n, s1, s2 = t.shape
    if n == 1:
        return t.reshape(b, 1, 1, s1, s2)
    return t.reshape(b, Nkv, G, s1, s2)


def _effective_mask(plan: _Plan, device, sq=None, skv=None, user=None):
    """(masked 5-D bool or None, correct_invalid flag) for the non-TND batch or one TND sequence."""
    if plan.mask is None and plan.sparse_mode in (0, 1):
        return None, False  # no mask: full attention, tokens and mode ignored (documented)
    sq = plan.Sq if sq is None else sq
    skv = plan.Skv if skv is None else skv
    rule, auto = _rule_mask(plan, sq, skv, device)
    rule5 = rule.reshape(1, 1, 1, sq, skv) if rule is not None else None
    if user is None and plan.mask is not None:
        m = plan.mask.to(device)
        user = m.reshape(1, 1, sq, skv) if m.dim() == 2 else m
    user5 = _to5(user, plan.B, plan.Nkv, plan.G) if user is not None else None
    masked = core.combine(user5, rule5)
    return masked, (plan.inner_precise == 2 or (auto and plan.layout != "TND"))


# ----------------------------------------------------------------------------------------------- layout helpers

def _to_bnsd(t, layout, n):
    if layout == "BSH":
        b, s, h = t.shape
        return t.reshape(b, s, n, h // n).permute(0, 2, 1, 3)
    if layout == "SBH":
        s, b, h = t.shape
        return t.reshape(s, b, n, h // n).permute(1, 2, 0, 3)
    if layout == "BSND":
        return t.permute(0, 2, 1, 3)
    return t  # BNSD


def _from_bnsd(t, layout):
    if layout == "BSH":
        b, n, s, d = t.shape
        return t.permute(0, 2, 1, 3).reshape(b, s, n * d)
    if layout == "SBH":
        b, n, s, d = t.shape
        return t.permute(2, 0, 1, 3).reshape(s, b, n * d)
    if layout == "BSND":
        return t.permute(0, 2, 1, 3).contiguous()
    return t.contiguous()


def _q5(t4, Nkv, G):
    b, n, s, d = t4.shape
    return t4.reshape(b, Nkv, G, s, d)


def _kv5(t4):
    b, n, s, d = t4.shape
    return t4.reshape(b, n, 1, s, d)


def _seq4(t, s0, s1):
    """TND slice -> (1, N, s, D)."""
    return t[s0:s1].permute(1, 0, 2).unsqueeze(0)


def _pse_for_seq(plan: _Plan, idx: int):
    """Per-sequence pse (1, N, sq|1, skv) for the flattened TND pse forms."""
    N = plan.Nq
    flat = plan.pse.reshape(-1)
    off = 0
    for i, s in enumerate(plan.seqs):
        rows = 1 if plan.pse_kind == "tnd_bn1s" else s.sq
        n = N * rows * s.skv
        if i == idx:
            return flat[off:off + n].reshape(1, N, rows, s.skv), (off, n, rows)
        off += n
    raise AssertionError


def _pse5(plan: _Plan, pse4):
    return _to5(pse4, plan.B, plan.Nkv, plan.G) if pse4 is not None else None


def _dropout_active(plan: _Plan) -> bool:
    return abs(plan.keep_prob - 1.0) >= 1e-9  # op-plugin's DROPOUT_NONE test (EPSILON = 1e-9)


def _keep_tensor(plan: _Plan, seed, offset, device):
    if not _dropout_active(plan):
        return None
    need = sum(plan.Nq * s.sq * s.skv for s in plan.seqs) if plan.layout == "TND" else plan.numels
    return _rng.keep_mask(seed, offset, max(need, plan.numels), plan.keep_prob, device)


# ------------------------------------------------------------------------------------------------ forward / grad

def _stats_out(plan: _Plan, per_seq_stats, device):
    """Assemble [B, N, Sq, 8] or TND [T, N, 8] (NTD data unless softmax_layout == 'TND')."""
    if plan.layout != "TND":
        m = per_seq_stats  # (B, Nq, Sq)
        return m.unsqueeze(-1).expand(*m.shape, 8).contiguous()
    ntd = torch.zeros(plan.Nq, plan.T, device=device, dtype=torch.float32)
    for s, st in zip(plan.seqs, per_seq_stats, strict=True):
        if st is not None:
            ntd[:, s.q0:s.q1] = st
    if plan.softmax_layout == "TND":
        return ntd.t().unsqueeze(-1).expand(plan.T, plan.Nq, 8).contiguous()
    return ntd.unsqueeze(-1).expand(plan.Nq, plan.T, 8).contiguous().reshape(plan.T, plan.Nq, 8)


def _stats_in(plan: _Plan, stat: torch.Tensor, name: str):
    """Inverse of _stats_out: (B, Nq, Sq) or (Nq, T) fp32 from the user-supplied statistics."""
    op = plan.op
    check(stat is not None, op, f"{name} is required (the grad kernel recomputes the softmax from the forward's "
                                f"softmax_max/softmax_sum and attention_in)")
    check(stat.dtype == torch.float32, op, f"{name} must be float32, but got {dtype_name(stat.dtype)}")
    exp: tuple[int, ...]
    if plan.layout != "TND":
        exp = (plan.B, plan.Nq, plan.Sq, 8)
        check(tuple(stat.shape) == exp, op, f"{name} shape must be [B, N, S, 8] = {list(exp)}, got {list(stat.shape)}")
        return stat[..., 0]
    exp = (plan.T, plan.Nq, 8)
    check(tuple(stat.shape) == exp, op, f"{name} shape must be [T, N, 8] = {list(exp)}, got {list(stat.shape)}")
    if plan.softmax_layout == "TND":
        return stat[..., 0].t()
    return stat.reshape(plan.Nq, plan.T, 8)[..., 0]


def _forward(plan: _Plan, q, k, v, seed, offset):
    device = q.device
    keep = _keep_tensor(plan, seed, offset, device)
    G, Nkv = plan.G, plan.Nkv
    if plan.layout != "TND":
        q5 = _q5(_to_bnsd(q, plan.layout, plan.Nq), Nkv, G)
        k5 = _kv5(_to_bnsd(k, plan.layout, Nkv))
        v5 = _kv5(_to_bnsd(v, plan.layout, Nkv))
        masked, corr = _effective_mask(plan, device)
        keep5 = keep.view(plan.B, Nkv, G, plan.Sq, plan.Skv) if keep is not None else None
        out, m, row_sum = core.forward(q5, k5, v5, scale=plan.scale, pse=_pse5(plan, plan.pse), masked=masked,
                                       keep=keep5, keep_prob=plan.keep_prob, correct_invalid=corr)
        out4 = out.reshape(plan.B, plan.Nq, plan.Sq, plan.Dv).to(plan.dtype)
        return (_from_bnsd(out4, plan.layout), _stats_out(plan, m.reshape(plan.B, plan.Nq, plan.Sq), device),
                _stats_out(plan, row_sum.reshape(plan.B, plan.Nq, plan.Sq), device))
    out = torch.zeros(plan.T, plan.Nq, plan.Dv, device=device, dtype=plan.dtype)
    ms: list[torch.Tensor | None] = []
    ls: list[torch.Tensor | None] = []
    pos = 0
    for i, s in enumerate(plan.seqs):
        n = plan.Nq * s.sq * s.skv
        if s.sq == 0:
            ms.append(None)
            ls.append(None)
            continue
        q5 = _q5(_seq4(q, s.q0, s.q1), Nkv, G)
        k5, v5 = _kv5(_seq4(k, s.k0, s.k1)), _kv5(_seq4(v, s.k0, s.k1))
        user = _seq_user_mask(plan, s, device)
        masked, corr = _effective_mask(plan, device, s.sq, s.skv, user)
        _check_no_full_rows(plan, masked, i, s)
        if s.skv == 0:  # nothing to attend at all: treated like corrected invalid rows
            masked, corr = torch.ones(1, 1, 1, s.sq, 0, dtype=torch.bool, device=device), True
        keep5 = keep[pos:pos + n].view(1, Nkv, G, s.sq, s.skv) if keep is not None else None
        pse5 = _pse5(plan, _pse_for_seq(plan, i)[0]) if plan.pse is not None else None
        o, m, row_sum = core.forward(q5, k5, v5, scale=plan.scale, pse=pse5, masked=masked, keep=keep5,
                                     keep_prob=plan.keep_prob, correct_invalid=corr)
        if s.skv == 0:
            o = torch.zeros_like(o)
            m = torch.full_like(m, core.NEG)
            row_sum = torch.full_like(row_sum, core.FLT_MAX)
        out[s.q0:s.q1] = o.reshape(plan.Nq, s.sq, plan.Dv).permute(1, 0, 2).to(plan.dtype)
        ms.append(m.reshape(plan.Nq, s.sq))
        ls.append(row_sum.reshape(plan.Nq, s.sq))
        pos += n
    return out, _stats_out(plan, ms, device), _stats_out(plan, ls, device)


def _seq_user_mask(plan: _Plan, s: _Seq, device):
    if plan.mask is None:
        return None
    return plan.mask.to(device)[: s.sq, : s.skv].reshape(1, 1, s.sq, s.skv)


def _check_no_full_rows(plan: _Plan, masked, i, s):
    """Varlen does not support user-mask rows that are entirely masked ("不支持补pad")."""
    if plan.mask is None or masked is None or s.skv == 0:
        return
    from ._common import host
    if bool(host(masked.all(dim=-1).any())):
        fail(plan.op, f"in varlen (TND) the atten_mask must not mask a whole row (不支持补pad); batch {i} "
                      f"(sq={s.sq}, skv={s.skv}) has a fully masked row")


def _backward(plan: _Plan, q, k, v, dy, attention_in, smax, ssum, seed, offset, need_dpse):
    device = q.device
    keep = _keep_tensor(plan, seed, offset, device)
    G, Nkv, Nq = plan.G, plan.Nkv, plan.Nq
    m_all = _stats_in(plan, smax, "softmax_max")
    l_all = _stats_in(plan, ssum, "softmax_sum")
    if plan.layout != "TND":
        L = plan.layout
        q5 = _q5(_to_bnsd(q, L, Nq), Nkv, G)
        k5, v5 = _kv5(_to_bnsd(k, L, Nkv)), _kv5(_to_bnsd(v, L, Nkv))
        dy5 = _q5(_to_bnsd(dy, L, Nq), Nkv, G)
        o5 = _q5(_to_bnsd(attention_in, L, Nq), Nkv, G)
        masked, _ = _effective_mask(plan, device)
        keep5 = keep.view(plan.B, Nkv, G, plan.Sq, plan.Skv) if keep is not None else None
        m5 = m_all.reshape(plan.B, Nkv, G, plan.Sq)
        l5 = l_all.reshape(plan.B, Nkv, G, plan.Sq)
        dq, dk, dv, dsc = core.backward(q5, k5, v5, dy5, o5, m5, l5, scale=plan.scale, pse=_pse5(plan, plan.pse),
                                        masked=masked, keep=keep5, keep_prob=plan.keep_prob, need_dpse=need_dpse)
        dq4 = dq.reshape(plan.B, Nq, plan.Sq, plan.D).to(plan.dtype)
        dk4 = dk.reshape(plan.B, Nkv, plan.Skv, plan.D).to(plan.dtype)
        dv4 = dv.reshape(plan.B, Nkv, plan.Skv, plan.Dv).to(plan.dtype)
        dpse = None
        if need_dpse:
            dpse = core.reduce_to(dsc.reshape(plan.B, Nq, plan.Sq, plan.Skv), plan.pse.shape).to(plan.pse.dtype)
        return _from_bnsd(dq4, L), _from_bnsd(dk4, L), _from_bnsd(dv4, L), dpse
    dq = torch.zeros(plan.T, Nq, plan.D, device=device, dtype=plan.dtype)
    dk = torch.zeros(plan.Tkv, Nkv, plan.D, device=device, dtype=plan.dtype)
    dv = torch.zeros(plan.Tkv, Nkv, plan.Dv, device=device, dtype=plan.dtype)
    dpse = torch.zeros(plan.pse.shape, device=device, dtype=plan.pse.dtype) if need_dpse else None
    pos = 0
    for i, s in enumerate(plan.seqs):
        n = Nq * s.sq * s.skv
        if s.sq == 0 or s.skv == 0:
            pos += n
            continue
        q5 = _q5(_seq4(q, s.q0, s.q1), Nkv, G)
        k5, v5 = _kv5(_seq4(k, s.k0, s.k1)), _kv5(_seq4(v, s.k0, s.k1))
        dy5 = _q5(_seq4(dy, s.q0, s.q1), Nkv, G)
        o5 = _q5(_seq4(attention_in, s.q0, s.q1), Nkv, G)
        masked, _ = _effective_mask(plan, device, s.sq, s.skv, _seq_user_mask(plan, s, device))
        keep5 = keep[pos:pos + n].view(1, Nkv, G, s.sq, s.skv) if keep is not None else None
        m5 = m_all[:, s.q0:s.q1].reshape(1, Nkv, G, s.sq)
        l5 = l_all[:, s.q0:s.q1].reshape(1, Nkv, G, s.sq)
        pse4 = meta = None
        if plan.pse is not None:
            pse4, meta = _pse_for_seq(plan, i)
        g = core.backward(q5, k5, v5, dy5, o5, m5, l5, scale=plan.scale, pse=_pse5(plan, pse4), masked=masked,
                          keep=keep5, keep_prob=plan.keep_prob, need_dpse=need_dpse)
        dq[s.q0:s.q1] = g[0].reshape(Nq, s.sq, plan.D).permute(1, 0, 2).to(plan.dtype)
        dk[s.k0:s.k1] = g[1].reshape(Nkv, s.skv, plan.D).permute(1, 0, 2).to(plan.dtype)
        dv[s.k0:s.k1] = g[2].reshape(Nkv, s.skv, plan.Dv).permute(1, 0, 2).to(plan.dtype)
        if dpse is not None and meta is not None:  # need_dpse (which implies a pse)
            off, cnt, rows = meta
            d = core.reduce_to(g[3].reshape(1, Nq, s.sq, s.skv), (1, Nq, rows, s.skv))
            dpse.view(-1)[off:off + cnt] = d.reshape(-1).to(plan.pse.dtype)
        pos += n
    return dq, dk, dv, dpse


# -------------------------------------------------------------------------------------------------- derivative

# the forward's arguments the grad op takes again (under its own name where it differs)
_GRAD_ARGUMENTS = {"pse": "pse", "padding_mask": "padding_mask", "atten_mask": "atten_mask", "scale": "scale_value",
                   "keep_prob": "keep_prob", "pre_tockens": "pre_tockens", "next_tockens": "next_tockens",
                   "inner_precise": "inner_precise", "prefix": "prefix", "actual_seq_qlen": "actual_seq_qlen",
                   "actual_seq_kvlen": "actual_seq_kvlen", "sparse_mode": "sparse_mode",
                   "gen_mask_parallel": "gen_mask_parallel", "sync": "sync", "softmax_layout": "softmax_layout",
                   "sink": "sink"}


class _FusionAttention(OpFunction):
    INPUTS = ("query", "key", "value", "pse")

    @staticmethod
    def forward(ctx, call, query, key, value, pse):
        out = call.below_autograd()
        attention, softmax_max, softmax_sum, softmax_out = out[:4]
        bound = call.bound
        ctx.grad_op = call.grad_op
        ctx.head_num, ctx.layout = bound["head_num"], bound["input_layout"]
        ctx.seed, ctx.offset, ctx.numels = out[4:7]
        ctx.options = {name: bound[name] for name in _GRAD_ARGUMENTS
                       if name in bound and not isinstance(bound[name], torch.Tensor)}
        ctx.save_for_backward(query, key, value, pse, bound["padding_mask"], bound["atten_mask"], bound.get("sink"),
                              attention, softmax_max, softmax_sum, softmax_out)
        ctx.mark_non_differentiable(softmax_max, softmax_sum, softmax_out)
        return out

    @staticmethod
    def backward(ctx, grad, *_non_differentiable):
        query, key, value, pse, padding_mask, atten_mask, sink, attention, softmax_max, softmax_sum, softmax_out = \
            ctx.saved_tensors
        accepted = argument_names(ctx.grad_op)
        options = {_GRAD_ARGUMENTS[name]: value for name, value in ctx.options.items()}
        options.update(pse=pse, padding_mask=padding_mask, atten_mask=atten_mask, sink=sink, softmax_max=softmax_max,
                       softmax_sum=softmax_sum, softmax_in=softmax_out, attention_in=attention, seed=ctx.seed,
                       offset=ctx.offset, numels=ctx.numels)
        grads = ctx.grad_op(query, key, value, grad.contiguous(), ctx.head_num, ctx.layout,
                            **{name: value for name, value in options.items() if name in accepted})
        dq, dk, dv, dpse = grads[:4]
        return None, dq, dk, dv, dpse


# --------------------------------------------------------------------------------------------------- Meta kernels

def _meta_sizes(query, key, value, head_num, layout):
    """(B, Sq, Skv, Dv) (B, Sq, Skv None for TND)."""
    if layout in ("BSH", "SBH"):
        b, s = (0, 1) if layout == "BSH" else (1, 0)
        d = query.shape[2] // head_num
        nkv = key.shape[2] // d
        return query.shape[b], query.shape[s], key.shape[s], value.shape[2] // nkv
    if layout == "BSND":
        return query.shape[0], query.shape[1], key.shape[1], value.shape[3]
    if layout == "BNSD":
        return query.shape[0], query.shape[2], key.shape[2], value.shape[3]
    return None, None, None, value.shape[2]


def _meta_out_shape(query, head_num, layout, dv):
    if layout in ("BSH", "SBH"):
        return (query.shape[0], query.shape[1], head_num * dv)
    if layout == "TND":
        return (query.shape[0], query.shape[1], dv)
    return (*query.shape[:3], dv)


def _forward_meta(query, key, value, head_num, input_layout, pse=None, padding_mask=None, atten_mask=None, scale=1.,
                  keep_prob=1., pre_tockens=2147483647, next_tockens=2147483647, inner_precise=0, prefix=None,
                  actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
                  softmax_layout="", sink=None, dropout_mask=None, seed=0, offset=0):
    """Answers the arguments ``seed``/``offset`` and the shape-derived ``numels``: under torch.compile the traced
    graph keeps these values, as it keeps those of torch_npu's Meta kernel."""
    b, sq, skv, dv = _meta_sizes(query, key, value, head_num, input_layout)
    out = query.new_empty(_meta_out_shape(query, head_num, input_layout, dv))
    stats: tuple[int, ...]
    if input_layout == "TND":
        stats = (query.shape[0], head_num, 8)
        qlen, kvlen = list(actual_seq_qlen or [0]), list(actual_seq_kvlen or [0])
        numels = qlen[0] * kvlen[0] + sum((qlen[i] - qlen[i - 1]) * (kvlen[i] - kvlen[i - 1])
                                          for i in range(1, min(len(qlen), len(kvlen))))
        numels *= head_num
    else:
        stats = (b, head_num, sq, 8)
        numels = b * head_num * sq * skv
    softmax_max, softmax_sum = query.new_empty(stats, dtype=torch.float32), query.new_empty(stats, dtype=torch.float32)
    return out, softmax_max, softmax_sum, query.new_empty((0,)), seed, offset, numels


def _grad_meta(query, key, value, dy, head_num, input_layout, *, pse=None, padding_mask=None, atten_mask=None,
               softmax_max=None, softmax_sum=None, softmax_in=None, attention_in=None, scale_value=1., keep_prob=1.,
               pre_tockens=2147483647, next_tockens=2147483647, inner_precise=0, seed=0, offset=0, numels=0,
               prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True,
               sync=False, softmax_layout="", sink=None):
    grads = (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value),
             None if pse is None else torch.empty_like(pse), key.new_empty((0,), dtype=torch.float32))
    return grads if _release.at_least(_release.GRAD_RETURNS_DSINK_SINCE) else grads[:4]


# -------------------------------------------------------------------------------------------------- public ops

def _no_autocast(t):
    return torch.autocast(t.device.type, enabled=False) if torch.is_autocast_enabled(t.device.type) \
        else contextlib.nullcontext()


@npu_op(meta=_forward_meta, derivative=_FusionAttention, grad_op=OP_GRAD, public=True)
def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None, atten_mask=None,
                         scale=1., keep_prob=1., pre_tockens=2147483647, next_tockens=2147483647, inner_precise=0,
                         prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                         gen_mask_parallel=True, sync=False, softmax_layout="", sink=None, dropout_mask=None,
                         seed=0, offset=0):
    """Emulated ``torch_npu.npu_fusion_attention``; see the module docstring for the semantics."""
    _release.check_arguments(OP, softmax_layout=softmax_layout, sink=sink, dropout_mask=dropout_mask, seed=seed,
                             offset=offset)
    check_npu(OP, query=query, key=key, value=value, pse=pse, padding_mask=padding_mask, atten_mask=atten_mask,
              sink=sink, dropout_mask=dropout_mask)
    with _no_autocast(query):  # a kernel, not a composite: the caller's autocast does not recast its math
        return _npu_fusion_attention(query, key, value, head_num, input_layout, pse, padding_mask, atten_mask,
                                     scale, keep_prob, pre_tockens, next_tockens, inner_precise, prefix,
                                     actual_seq_qlen, actual_seq_kvlen, sparse_mode, gen_mask_parallel, sync,
                                     softmax_layout, sink, dropout_mask, seed, offset)


def _npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None, atten_mask=None,
                          scale=1., keep_prob=1., pre_tockens=INT32_MAX, next_tockens=INT32_MAX, inner_precise=0,
                          prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                          gen_mask_parallel=True, sync=False, softmax_layout="", sink=None, dropout_mask=None,
                          seed=0, offset=0):
    plan = _plan(OP, query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale, keep_prob,
                 pre_tockens, next_tockens, inner_precise, prefix, actual_seq_qlen, actual_seq_kvlen, sparse_mode,
                 softmax_layout, sink, dropout_mask)
    seed, offset = int(seed), int(offset)
    if _dropout_active(plan):
        seed, offset = _rng.philox_engine_inputs(query.device)
    out, smax, ssum = _forward(plan, query, key, value, seed, offset)
    softmax_out = torch.empty(0, device=query.device, dtype=query.dtype)
    return out, smax, ssum, softmax_out, seed, offset, plan.numels


@npu_op(meta=_grad_meta)
def npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, *, pse=None, padding_mask=None,
                              atten_mask=None, softmax_max=None, softmax_sum=None, softmax_in=None,
                              attention_in=None, scale_value=1., keep_prob=1., pre_tockens=2147483647,
                              next_tockens=2147483647, inner_precise=0, seed=0, offset=0, numels=0, prefix=None,
                              actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True,
                              sync=False, softmax_layout="", sink=None):
    """Emulated ``torch_npu.npu_fusion_attention_grad`` -> ``(dq, dk, dv, dpse, dsink)``.

    ``dpse`` is None when ``pse`` is None (an undefined tensor in C++), ``dsink`` an empty fp32 tensor without a
    sink -- as op-plugin returns them. The dropout mask is regenerated from ``(seed, offset, numels)``.
    Emulating a release line before 2.6, the op returns ``(dq, dk, dv, dpse)`` as those releases do.
    """
    _release.check_arguments(OP_GRAD, softmax_layout=softmax_layout, sink=sink)
    check_npu(OP_GRAD, query=query, key=key, value=value, dy=dy, pse=pse, padding_mask=padding_mask,
              atten_mask=atten_mask, softmax_max=softmax_max, softmax_sum=softmax_sum, softmax_in=softmax_in,
              attention_in=attention_in, sink=sink)
    return _npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, pse=pse,
                                      padding_mask=padding_mask, atten_mask=atten_mask, softmax_max=softmax_max,
                                      softmax_sum=softmax_sum, softmax_in=softmax_in, attention_in=attention_in,
                                      scale_value=scale_value, keep_prob=keep_prob, pre_tockens=pre_tockens,
                                      next_tockens=next_tockens, inner_precise=inner_precise, seed=seed,
                                      offset=offset, numels=numels, prefix=prefix, actual_seq_qlen=actual_seq_qlen,
                                      actual_seq_kvlen=actual_seq_kvlen, sparse_mode=sparse_mode,
                                      gen_mask_parallel=gen_mask_parallel, sync=sync, softmax_layout=softmax_layout,
                                      sink=sink)[:None if _release.at_least(_release.GRAD_RETURNS_DSINK_SINCE) else 4]


def _npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, *, pse=None, padding_mask=None,
                               atten_mask=None, softmax_max=None, softmax_sum=None, softmax_in=None,
                               attention_in=None, scale_value=1., keep_prob=1., pre_tockens=INT32_MAX,
                               next_tockens=INT32_MAX, inner_precise=0, seed=0, offset=0, numels=0, prefix=None,
                               actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True,
                               sync=False, softmax_layout="", sink=None):
    op = OP_GRAD
    check(dy.dim() in (3, 4), op, f"The shapes of the input dy should be 3 or 4 dimensional, but got "
                                  f"{dy.dim()}-dimensional")
    plan = _plan(op, query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale_value,
                 keep_prob, pre_tockens, next_tockens, inner_precise, prefix, actual_seq_qlen, actual_seq_kvlen,
                 sparse_mode, softmax_layout, sink, None)
    check(attention_in is not None, op, "attention_in (the forward's attention_out) is required")
    exp_out = _out_shape(plan, query)
    check(tuple(attention_in.shape) == exp_out, op,
          f"attention_in shape must be {list(exp_out)}, but got {list(attention_in.shape)}")
    check(tuple(dy.shape) == exp_out, op, f"dy shape must be {list(exp_out)}, but got {list(dy.shape)}")
    check(dy.dtype == plan.dtype and attention_in.dtype == plan.dtype, op,
          f"dy and attention_in must have the query dtype {dtype_name(plan.dtype)}, got "
          f"{dtype_name(dy.dtype)} and {dtype_name(attention_in.dtype)}")
    if _dropout_active(plan):
        check(int(numels) == plan.numels, op, f"numels [{numels}] does not match the dropout mask length of this "
                                              f"call [{plan.numels}] (pass the forward's 7th output)")
    with torch.no_grad():
        dq, dk, dv, dpse = _backward(plan, query.detach(), key.detach(), value.detach(), dy.detach(),
                                     attention_in.detach(), softmax_max.detach() if softmax_max is not None else None,
                                     softmax_sum.detach() if softmax_sum is not None else None, int(seed),
                                     int(offset), pse is not None)
    dsink = torch.empty(0, device=key.device, dtype=torch.float32)
    return dq, dk, dv, dpse, dsink


def _out_shape(plan: _Plan, query):
    L = plan.layout
    if L == "BSH":
        return (plan.B, plan.Sq, plan.Nq * plan.Dv)
    if L == "SBH":
        return (plan.Sq, plan.B, plan.Nq * plan.Dv)
    if L == "BSND":
        return (plan.B, plan.Sq, plan.Nq, plan.Dv)
    if L == "BNSD":
        return (plan.B, plan.Nq, plan.Sq, plan.Dv)
    return (plan.T, plan.Nq, plan.Dv)
