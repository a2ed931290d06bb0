"""Emulated inference attention: ``npu_prompt_flash_attention`` (PFA), ``npu_incre_flash_attention`` (IFA) and
``npu_fused_infer_attention_score`` (FIA: S=1 -> IFA path, otherwise PFA path).

Semantics (op-plugin docs + CANN kernels): ``softmax(scale * Q K^T + pse_shift, masked by atten_mask) V`` -- unlike
the training op, ``pse_shift`` is added *after* scaling. Masks are bool/int8/uint8 with 1 = masked; PFA/FIA mode 0
with a mask computes only the band ``i - pre_tokens <= j <= i + next_tokens`` (top-left; PFA's ``next_tokens``
defaults to 0, so a mask plus default tokens is causal), 1 = mask only, 2 = ``j <= i``, 3 = ``j <= i + Skv - Sq``,
4 = band anchored bottom-right; modes 2-4 need the 2048x2048 compressed ``triu(ones, 1)`` mask. Per-batch
``actual_seq_lengths`` (query) / ``actual_seq_lengths_kv`` are valid lengths (NOT cumulative, except in TND where
they are cumulative ends without a leading 0); the causal/band rules are anchored on those lengths. Query rows
beyond their valid length and rows left with nothing to attend output 0. No autograd (inference only).
"""
from __future__ import annotations

import itertools

import torch

from . import _attention_core as core
from ._common import INT32_MAX, NotEmulatedError, check, check_float_dtypes, check_npu, dtype_name, fail, \
    int_list, is_compressed_causal_mask
from ._registry import npu_op

OP_PFA = "npu_prompt_flash_attention"
OP_IFA = "npu_incre_flash_attention"
OP_FIA = "npu_fused_infer_attention_score"
_HALF = (torch.float16, torch.bfloat16)


# ----------------------------------------------------------------------------------------------------- helpers

def _not_emulated_if_set(op, **kw):
    for name, v in kw.items():
        if v is not None:
            raise NotEmulatedError(op, f"'{name}' (quantization / prefix / left-padding / MLA features)")


def _per_batch(op, name, lst, B, limit, limit_name):
    """Per-batch non-cumulative lengths: length 1 broadcasts, length >= B takes the first B, else error."""
    if lst is None:
        return None
    check(len(lst) == 1 or len(lst) >= B, op, f"{name} length must be 1 or >= batch size {B}, but got {len(lst)}")
    vals = lst * B if len(lst) == 1 else lst[:B]
    for b, x in enumerate(vals):
        check(0 <= x <= limit, op, f"{name}[{b}] = {x} must be in range [0, {limit}] ({limit_name})")
    return vals


def _cumulative_ends(op, name, lst, total):
    check(lst is not None and len(lst) > 0, op, f"{name} is required for the TND layout")
    check(lst[0] != 0, op, f"{name} holds cumulative END offsets WITHOUT a leading 0 in the TND layout "
                           f"(lengths 2,2 -> [2, 4]), but got {lst[:4]}; pass cu_seqlens[1:]")
    check(all(b >= a for a, b in itertools.pairwise(lst)) and lst[0] >= 0, op,
          f"{name} must be non-decreasing cumulative end offsets, got {lst}")
    check(lst[-1] <= total, op, f"the last element of {name} ({lst[-1]}) exceeds T ({total})")
    return lst


def _heads(op, num_heads, num_key_value_heads):
    check(num_heads > 0, op, "the query's heads num is zero" if num_heads == 0 else
          f"num_heads must be > 0, but got {num_heads}")
    nkv = num_key_value_heads if num_key_value_heads != 0 else num_heads
    check(0 < nkv <= num_heads and num_heads % nkv == 0, op,
          f"Attr num_key_value_heads is invalid, n: {num_heads}, the key/value's heads num: {nkv} "
          f"(num_heads must be a multiple of num_key_value_heads)")
    check(num_heads // nkv <= 64, op, f"num_heads / num_key_value_heads must not exceed 64, but got "
                                      f"{num_heads}/{nkv} = {num_heads // nkv}")
    check(num_heads <= 256, op, f"N must be <= 256, but got {num_heads}")
    return nkv


def _q_to4(op, q, layout, n):
    """query -> (B, N, S, D) for BSH/BSND/BNSD."""
    if layout == "BSH":
        check(q.dim() == 3, op, f"query must be 3-D for BSH, got {tuple(q.shape)}")
        b, s, h = q.shape
        check(h % n == 0, op, "H should be an interger multiple of numHeads")
        return q.reshape(b, s, n, h // n).permute(0, 2, 1, 3)
    check(q.dim() == 4, op, f"query must be 4-D for {layout}, got {tuple(q.shape)}")
    if layout == "BSND":
        check(q.shape[2] == n, op, f"the query's heads num should be equal to qOfHeadnum ({q.shape[2]} != {n})")
        return q.permute(0, 2, 1, 3)
    check(q.shape[1] == n, op, f"the query's heads num should be equal to qOfHeadnum ({q.shape[1]} != {n})")
    return q


def _kv_to4(op, t, layout, nkv, d, name):
    if layout == "BSH":
        check(t.dim() == 3, op, f"{name} must be 3-D for BSH, got {tuple(t.shape)}")
        b, s, h = t.shape
        check(h % nkv == 0, op, f"{name} H ({h}) must be num_key_value_heads ({nkv}) * D")
        return t.reshape(b, s, nkv, h // nkv).permute(0, 2, 1, 3)
    check(t.dim() == 4, op, f"{name} must be 4-D for {layout}, got {tuple(t.shape)}")
    if layout == "BSND":
        check(t.shape[2] == nkv, op, f"{name} N ({t.shape[2]}) must equal num_key_value_heads ({nkv})")
        return t.permute(0, 2, 1, 3)
    check(t.shape[1] == nkv, op, f"{name} N ({t.shape[1]}) must equal num_key_value_heads ({nkv})")
    return t


def _out_from4(o4, layout):
    if layout == "BSH":
        b, n, s, d = o4.shape
        return o4.permute(0, 2, 1, 3).reshape(b, s, n * d)
    if layout in ("BSND", "BNSD_BSND"):
        return o4.permute(0, 2, 1, 3).contiguous()
    return o4.contiguous()


def _paged_kv(op, cache, block_table, kv_lens, block_size, nkv, layout, name):
    """Gather a paged KV cache into (B, Nkv, maxlen, D)."""
    check(block_table.dtype == torch.int32, op, f"blockTables dtype {dtype_name(block_table.dtype)} invalid, "
                                                f"should be int32")
    check(block_table.dim() == 2, op, f"blockTables dim num {block_table.dim()}, invalid, should be 2")
    B = block_table.shape[0]
    check(len(kv_lens) == B, op, f"block_table first dim ({B}) must equal the batch size ({len(kv_lens)})")
    need = max((x + block_size - 1) // block_size for x in kv_lens) if kv_lens else 0
    check(block_table.shape[1] >= need, op, f"block_table second dim ({block_table.shape[1]}) is smaller than "
                                            f"maxBlockNumPerSeq ({need})")
    if cache.dim() == 3:  # (blocknum, block_size, H)
        nb, bs, h = cache.shape
        check(bs == block_size, op, f"{name} cache block dim ({bs}) must equal block_size ({block_size})")
        blocks = cache.reshape(nb, bs, nkv, h // nkv).permute(0, 2, 1, 3)  # (nb, nkv, bs, d)
    elif cache.dim() == 4:  # (blocknum, Nkv, block_size, D)
        check(layout in ("BNSD", "BNSD_BSND", "TND"), op,
              "when Page Attention scene, kvcache is BNBD, query layout must be BNSD, BNSD_NBSD, TND, TND_NTD or "
              "BNSD_BSND")
        nb, n, bs, d = cache.shape
        check(n == nkv and bs == block_size, op, f"{name} cache shape {tuple(cache.shape)} must be "
                                                 f"(blocknum, {nkv}, {block_size}, D)")
        blocks = cache
    else:
        fail(op, f"The dim of keyShape[{cache.dim()}] should be one of 3,4 in the page attention scene")
    if need == 0:
        return blocks.new_zeros(B, nkv, 0, blocks.shape[-1])
    table = block_table[:, :need].long().to(cache.device)
    col = torch.arange(need, device=cache.device).unsqueeze(0)
    nblk = torch.tensor([(x + block_size - 1) // block_size for x in kv_lens], device=cache.device).unsqueeze(1)
    table = torch.where(col < nblk, table, torch.zeros_like(table))  # unused table entries may be garbage
    g = blocks[table]  # (B, need, nkv, bs, d)
    return g.permute(0, 2, 1, 3, 4).reshape(B, nkv, need * block_size, blocks.shape[-1])


def _compute(q4, k4, v4, *, scale, pse4, user4, mode, pre, nxt, q_lens, kv_lens, lse, qk_dtype=None):
    """Batched masked attention with per-batch valid lengths. Returns (out4 fp32->dtype, lse (B,N,Sq) or None).
    ``qk_dtype``: QK^T rounded to it before the scale (:func:`_attention_core.scores`)."""
    B, Nq, Sq, D = q4.shape
    Nkv, Skv = k4.shape[1], k4.shape[2]
    G = Nq // Nkv
    dev = q4.device
    i = torch.arange(Sq, device=dev).view(1, Sq, 1)
    j = torch.arange(Skv, device=dev).view(1, 1, Skv)
    sq = torch.tensor(q_lens if q_lens is not None else [Sq] * B, device=dev).view(B, 1, 1)
    skv = torch.tensor(kv_lens if kv_lens is not None else [Skv] * B, device=dev).view(B, 1, 1)
    masked = (j >= skv) | (i >= sq)
    if mode == 0 and user4 is not None:
        d = j - i
        masked = masked | (d < -pre) | (d > nxt)
    elif mode == 2:
        masked = masked | (j > i)
    elif mode == 3:
        masked = masked | (j > i + skv - sq)
    elif mode == 4:
        d = j - i - (skv - sq)
        masked = masked | (d < -pre) | (d > nxt)
    masked5 = masked.view(B, 1, 1, Sq, Skv)
    if user4 is not None and mode in (0, 1):
        u = user4
        u5 = u.reshape(u.shape[0], 1, 1, Sq, Skv) if u.shape[1] == 1 else u.reshape(u.shape[0], Nkv, G, Sq, Skv)
        masked5 = masked5 | u5
    q5 = q4.reshape(B, Nkv, G, Sq, D)
    k5 = k4.reshape(B, Nkv, 1, Skv, D)
    v5 = v4.reshape(B, Nkv, 1, Skv, v4.shape[-1])
    pse5 = None
    if pse4 is not None:
        pse5 = pse4.reshape(pse4.shape[0], Nkv, G, pse4.shape[2], Skv)
    out, m, row_sum = core.forward(q5, k5, v5, scale=scale, pse=pse5, pse_first=False, masked=masked5,
                                   correct_invalid=True, qk_dtype=qk_dtype)
    out4 = out.reshape(B, Nq, Sq, -1).to(q4.dtype)
    lse_t = (m + torch.log(row_sum)).reshape(B, Nq, Sq) if lse else None
    return out4, lse_t


def _mask_prep(op, mask, mode, B, Sq, Skv, *, decode: bool):
    """Validate an inference atten_mask; return (B|1, 1, Sq, Skv) bool (mode 0/1) or None (modes 2-4)."""
    if mask is None:
        check(mode not in (2, 3, 4), op, f"sparse_mode={mode} requires atten_mask (the 2048x2048 compressed "
                                         f"torch.triu(torch.ones(2048, 2048), 1).bool() mask); not passing it is an "
                                         f"error on the hardware")
        return None
    check(mask.dtype in (torch.bool, torch.int8, torch.uint8), op,
          f"atten_mask dtype must be bool, int8 or uint8, but got {dtype_name(mask.dtype)}")
    shp = tuple(mask.shape)
    if mode in (2, 3, 4):
        check(shp in ((2048, 2048), (1, 2048, 2048), (1, 1, 2048, 2048)), op,
              f"sparse_mode={mode} needs atten_mask of shape (2048, 2048), (1, 2048, 2048) or (1, 1, 2048, 2048), "
              f"but got {list(shp)}")
        check(is_compressed_causal_mask(mask), op,
              f"sparse_mode={mode} needs the compressed mask torch.triu(torch.ones(2048, 2048), 1) (True above the "
              f"diagonal = masked); the given mask has other contents (the hardware would silently use it)")
        return None
    if decode:  # Q_S == 1 (IFA path): (B, KV_S), (B, 1, KV_S), (B, 1, 1, KV_S); Q_S up to 16: (B, 1, Q_S, KV_S)
        if mask.dim() == 2:
            m = mask.reshape(mask.shape[0], 1, 1, mask.shape[1])
        elif mask.dim() == 3:
            m = mask.reshape(mask.shape[0], 1, mask.shape[1], mask.shape[2])
        elif mask.dim() == 4:
            m = mask
        else:
            fail(op, f"atten_mask must be 2-4 dimensional, got {list(shp)}")
        check(m.shape[0] in (1, B) and m.shape[1] == 1 and m.shape[2] in (1, Sq) and m.shape[-1] >= Skv, op,
              f"unsupported atten_mask shape {list(shp)} for the decode path: expected (B, KV_S), (B, 1, KV_S) or "
              f"(B, 1, Q_S|1, KV_S) with B={B}, Q_S={Sq}, KV_S>={Skv}")
        m = m[..., :Skv]
        return (m != 0).expand(m.shape[0], 1, Sq, Skv)
    if mask.dim() == 2:
        m = mask.reshape(1, 1, *shp)
    elif mask.dim() == 3:
        m = mask.reshape(shp[0], 1, shp[1], shp[2])
    elif mask.dim() == 4:
        m = mask
        check(shp[1] == 1, op, f"atten_mask of shape {list(shp)}: the second dim must be 1 ((B, 1, Q_S, KV_S))")
    else:
        fail(op, f"atten_mask must be 2-4 dimensional, got {list(shp)}")
    check(m.shape[0] in (1, B) and m.shape[2] >= Sq and m.shape[3] >= Skv, op,
          f"unsupported atten_mask shape {list(shp)}: supported (Q_S, KV_S), (B, Q_S, KV_S), (1, Q_S, KV_S), "
          f"(B, 1, Q_S, KV_S), (1, 1, Q_S, KV_S) with B={B}, Q_S={Sq}, KV_S={Skv} (dims may be padded larger)")
    return m[:, :, :Sq, :Skv] != 0


def _pse_prep(op, pse, dtype, B, N, Sq, Skv):
    if pse is None:
        return None
    check(pse.dtype == dtype, op, f"pse_shift dtype ({dtype_name(pse.dtype)}) must match the query dtype "
                                  f"({dtype_name(dtype)})")
    check(pse.dim() == 4 and pse.shape[0] in (1, B) and pse.shape[1] == N and pse.shape[2] >= Sq
          and pse.shape[3] >= Skv, op,
          f"pse_shift shape must be (B, N, Q_S, KV_S) or (1, N, Q_S, KV_S) with B={B}, N={N}, Q_S>={Sq}, "
          f"KV_S>={Skv}, but got {list(pse.shape)}")
    return pse[:, :, :Sq, :Skv]


def _check_d(op, D, N, layout, *, strict16: bool, max_d=512):
    check(1 <= D <= max_d, op, f"D must be in range [1, {max_d}], but got {D}")
    if strict16:
        check(D % 16 == 0, op, f"D must be 16-aligned when query/key/value are float16/bfloat16, but got {D}")
    elif D % 16 != 0:
        check(D <= 128, op, f"D ({D}) is not 32-byte aligned, which is only supported up to 128")
    if layout in ("BSH", "BSND"):
        check(N * D < 65535, op, f"N * D must be < 65535 for {layout}, got {N * D}")


def _sparse_mode_pfa(op, sparse_mode):
    inner_high = False
    if 10 <= sparse_mode <= 14:  # op-plugin: [10, 14] = modes 0..4 with high precision
        sparse_mode -= 10
        inner_high = True
    check(sparse_mode not in (5, 6, 7, 8), op, f"sparse_mode={sparse_mode} (prefix/global/dilated/block_local) is "
                                               f"not supported (暂不支持)")
    check(0 <= sparse_mode <= 4, op, f"sparse_mode only supports 0/1/2/3/4, but got {sparse_mode}")
    return sparse_mode, inner_high


# ------------------------------------------------------------------------------------------------------- PFA path

def _prefill(op, query, key, value, *, atten_mask, pse_shift, q_lens_raw, kv_lens_raw, num_heads, scale, pre, nxt,
             layout, num_key_value_heads, sparse_mode, lse, strict16, fia_tnd=False, block_table=None,
             block_size=0, qk_dtype=None):
    dtype = check_float_dtypes(op, _HALF, query=query, key=key, value=value)
    nkv = _heads(op, num_heads, num_key_value_heads)
    if layout == "TND":
        return _prefill_tnd(op, query, key, value, atten_mask=atten_mask, pse_shift=pse_shift,
                            q_lens_raw=q_lens_raw, kv_lens_raw=kv_lens_raw, num_heads=num_heads, nkv=nkv, scale=scale,
                            pre=pre, nxt=nxt, sparse_mode=sparse_mode, lse=lse, dtype=dtype, fia_tnd=fia_tnd)
    out_layout = layout
    in_layout = "BNSD" if layout == "BNSD_BSND" else layout
    check(in_layout in ("BSH", "BSND", "BNSD"), op,
          f"input_layout must be BSH, BSND, BNSD, BNSD_BSND or TND, but got {layout}")
    q4 = _q_to4(op, query, in_layout, num_heads)
    B, N, Sq, D = q4.shape
    check(1 <= B <= 65536, op, f"B must be in range [1, 65536], got {B}")
    _check_d(op, D, N, in_layout, strict16=strict16)
    if block_table is not None:
        kv_lens = _per_batch(op, "actual_seq_lengths_kv", kv_lens_raw, B, 1 << 30, "page attention")
        check(kv_lens is not None, op, "page attention needs actual_seq_lengths_kv")
        check(block_size > 0 and block_size % 128 == 0 and 128 <= block_size <= 512, op,
              f"in the page attention scene with Q_S > 1, block_size must be a multiple of 128 in [128, 512], "
              f"but got {block_size}")
        k4 = _paged_kv(op, key, block_table, kv_lens, block_size, nkv, layout, "key")
        v4 = _paged_kv(op, value, block_table, kv_lens, block_size, nkv, layout, "value")
    else:
        k4 = _kv_to4(op, key, in_layout, nkv, D, "key")
        v4 = _kv_to4(op, value, in_layout, nkv, D, "value")
        check(tuple(k4.shape) == tuple(v4.shape), op, f"key and value shapes must be the same, got "
                                                      f"{tuple(key.shape)} and {tuple(value.shape)}")
        kv_lens = _per_batch(op, "actual_seq_lengths_kv", kv_lens_raw, B, k4.shape[2], "key/value S")
    check(k4.shape[0] == B and k4.shape[3] == D, op, f"key shape {tuple(key.shape)} does not match query "
                                                     f"{tuple(query.shape)} (B and D must agree)")
    Skv = k4.shape[2]
    q_lens = _per_batch(op, "actual_seq_lengths", q_lens_raw, B, Sq, "query S")
    user = _mask_prep(op, atten_mask, sparse_mode, B, Sq, Skv, decode=False)
    pse4 = _pse_prep(op, pse_shift, dtype, B, N, Sq, Skv)
    if Skv == 0:
        out4 = q4.new_zeros(B, N, Sq, v4.shape[-1])
        l4 = torch.full((B, N, Sq), core.NEG, device=query.device) if lse else None
    else:
        out4, l4 = _compute(q4, k4, v4, scale=scale, pse4=pse4, user4=user, mode=sparse_mode, pre=pre, nxt=nxt,
                            q_lens=q_lens, kv_lens=kv_lens, lse=lse, qk_dtype=qk_dtype)
    return _out_from4(out4, out_layout), (l4.unsqueeze(-1) if l4 is not None else None)


def _prefill_tnd(op, query, key, value, *, atten_mask, pse_shift, q_lens_raw, kv_lens_raw, num_heads, nkv, scale,
                 pre, nxt, sparse_mode, lse, dtype, fia_tnd):
    check(query.dim() == 3 and key.dim() == 3 and value.dim() == 3, op, "TND query/key/value must be 3-D")
    T, N, D = query.shape
    check(num_heads == N, op, f"the query's heads num should be equal to qOfHeadnum ({N} != {num_heads})")
    check(key.shape[1] == nkv and value.shape[1] == nkv, op, f"key/value N must equal num_key_value_heads ({nkv})")
    check(key.shape[2] == D, op, f"query and key D must be equal, got {D} and {key.shape[2]}")
    Dv = value.shape[2]
    if fia_tnd:
        check(dtype == torch.bfloat16, op, "in the TND layout (non-MLA) only bfloat16 is supported")
        check(D == 192 and Dv in (128, 192), op, f"in the TND layout (non-MLA) Q_D and K_D must be 192 and V_D "
                                                 f"128 or 192, but got D={D}, Dv={Dv}")
        check(nkv == N and N in (2, 4, 8, 16, 32, 64, 128), op, "in the TND layout Q_N == K_N == V_N in "
                                                                "{2,4,...,128} is required")
        check(sparse_mode == 0 and atten_mask is None or sparse_mode == 3 and atten_mask is not None, op,
              "in the TND layout only sparse_mode=0 without a mask or sparse_mode=3 with the mask is supported")
        check(pse_shift is None, op, "pse_shift is not supported in the TND layout")
    else:
        _check_d(op, D, N, "TND", strict16=False)
        if pse_shift is not None:
            raise NotEmulatedError(op, "pse_shift with the TND layout")
    qe = _cumulative_ends(op, "actual_seq_lengths", q_lens_raw, T)
    ke = _cumulative_ends(op, "actual_seq_lengths_kv", kv_lens_raw, key.shape[0])
    check(len(qe) == len(ke), op, f"the query's actual sequence lengths shape size({len(qe)}) should equal the "
                                  f"key/value's actual sequence lengths shape size({len(ke)})")
    if fia_tnd and sparse_mode == 3:
        prev = (0, 0)
        for b, (a, c) in enumerate(zip(qe, ke, strict=True)):
            check(a - prev[0] <= c - prev[1], op, f"with sparse_mode=3 in the TND layout every batch needs "
                                                  f"q_len <= kv_len, batch {b} has {a - prev[0]} > {c - prev[1]}")
            prev = (a, c)
    msq = max(b - a for a, b in itertools.pairwise([0, *qe]))
    mskv = max(b - a for a, b in itertools.pairwise([0, *ke]))
    user_full = _mask_prep(op, atten_mask, sparse_mode, 1, msq, mskv, decode=False)
    out = query.new_zeros(T, N, Dv)
    lse_t = torch.zeros(T, N, 1, device=query.device) if lse else None
    pq = pk = 0
    for a, c in zip(qe, ke, strict=True):
        sq, skv = a - pq, c - pk
        if sq > 0:
            q4 = query[pq:a].permute(1, 0, 2).unsqueeze(0)
            if skv > 0:
                k4 = key[pk:c].permute(1, 0, 2).unsqueeze(0)
                v4 = value[pk:c].permute(1, 0, 2).unsqueeze(0)
                user = user_full[:, :, :sq, :skv] if user_full is not None else None
                o4, l4 = _compute(q4, k4, v4, scale=scale, pse4=None, user4=user, mode=sparse_mode, pre=pre, nxt=nxt,
                                  q_lens=None, kv_lens=None, lse=lse)
                out[pq:a] = o4[0].permute(1, 0, 2)
                if lse_t is not None:
                    lse_t[pq:a, :, 0] = l4[0].t()
            elif lse_t is not None:
                lse_t[pq:a] = core.NEG
        pq, pk = a, c
    return out, lse_t


# -------------------------------------------------------------------------------------------------- IFA path

def _decode(op, query, key, value, *, atten_mask, pse_shift, kv_lens_raw, block_table, block_size, num_heads,
            scale, layout, num_key_value_heads, inner_precise, lse):
    check(inner_precise in (0, 1), op, f"precision mode[{inner_precise}] should be 0 or 1")
    if isinstance(key, (list, tuple)) or isinstance(value, (list, tuple)):
        key, value = _kv_list(op, key, value, layout)
    dtype = check_float_dtypes(op, _HALF, query=query)
    check(key.dtype == value.dtype, op, f"datatype of k tensor and value tensor is different "
                                        f"({dtype_name(key.dtype)} vs {dtype_name(value.dtype)})")
    if key.dtype == torch.int8:
        raise NotEmulatedError(op, "int8 key/value (KV-cache antiquant)")
    check(key.dtype == dtype, op, f"key/value dtype ({dtype_name(key.dtype)}) must match the query dtype "
                                  f"({dtype_name(dtype)})")
    nkv = _heads(op, num_heads, num_key_value_heads)
    check(layout in ("BSH", "BSND", "BNSD"), op, f"Only support input_layout(BSH, BNSD, BSND), actually is {layout}")
    q4 = _q_to4(op, query, layout, num_heads)
    B, N, Sq, D = q4.shape
    check(1 <= Sq <= 16, op, f"S of Query:{Sq} is invalid. It should be in range [1, 16] (incremental decode)")
    check(1 <= B <= 65536, op, f"B must be in range [1, 65536], got {B}")
    _check_d(op, D, N, layout, strict16=False)
    if block_table is not None:
        check(kv_lens_raw is not None, op, "page attention needs actual_seq_lengths (the per-batch KV lengths)")
        check(block_size > 0, op, "When Page Attention is enabled, input attribute blocksize can not be 0.")
        check(block_size % 16 == 0, op, f"block_size ({block_size}) must be 16-aligned for float16/bfloat16 KV")
        kv_lens = _per_batch(op, "actual_seq_lengths", kv_lens_raw, B, 1 << 30, "page attention")
        k4 = _paged_kv(op, key, block_table, kv_lens, block_size, nkv, layout, "key")
        v4 = _paged_kv(op, value, block_table, kv_lens, block_size, nkv, layout, "value")
    else:
        k4 = _kv_to4(op, key, layout, nkv, D, "key")
        v4 = _kv_to4(op, value, layout, nkv, D, "value")
        check(tuple(key.shape) == tuple(value.shape), op, "k v shape shoud be same")
        check(k4.shape[0] == B and k4.shape[3] == D, op, f"key shape {tuple(key.shape)} does not match the query "
                                                         f"{tuple(query.shape)}")
        kv_lens = _per_batch(op, "actual_seq_lengths", kv_lens_raw, B, k4.shape[2], "key/value S")
    Skv = k4.shape[2]
    user = _mask_prep(op, atten_mask, 1 if atten_mask is not None else 0, B, Sq, Skv, decode=True)
    pse4 = _pse_prep(op, pse_shift, dtype, B, N, Sq, Skv)
    if Skv == 0:
        out4 = q4.new_zeros(B, N, Sq, D)
        l4 = torch.full((B, N, Sq), core.NEG, device=query.device) if lse else None
    else:
        out4, l4 = _compute(q4, k4, v4, scale=scale, pse4=pse4, user4=user, mode=1 if user is not None else 0,
                            pre=INT32_MAX, nxt=INT32_MAX, q_lens=None, kv_lens=kv_lens, lse=lse)
    return _out_from4(out4, layout), (l4.unsqueeze(-1) if l4 is not None else None)


def _kv_list(op, key, value, layout):
    """TensorList key/value (one tensor per batch, batch dim 1): pad to a common S and concatenate."""
    check(isinstance(key, (list, tuple)) and isinstance(value, (list, tuple)) and len(key) == len(value), op,
          "key and value must both be tensors or both be lists of the same length")
    sdim = 2 if layout == "BNSD" else 1
    smax = max(t.shape[sdim] for t in key)
    check(all(t.shape[sdim] == smax for t in key), op, "TensorList key/value with different S per batch: pass "
                                                       "actual_seq_lengths with a padded tensor instead")
    return torch.cat(list(key), 0), torch.cat(list(value), 0)


# --------------------------------------------------------------------------------------------------- Meta kernels

def _meta_out_shape(query, value, layout, num_heads, num_key_value_heads, paged):
    """attention_out's shape: the query's layout (BNSD_BSND: BSND) with the value's head dim."""
    value = value[0] if isinstance(value, (list, tuple)) else value
    nkv = num_key_value_heads or num_heads
    q_layout = "BNSD" if layout == "BNSD_BSND" else layout
    if paged:
        dv = query.shape[-1] if q_layout != "BSH" else query.shape[2] // num_heads
    elif q_layout == "BSH":
        dv = value.shape[-1] // nkv
    else:
        dv = value.shape[-1]
    if q_layout == "BSH":
        return (query.shape[0], query.shape[1], num_heads * dv)
    if q_layout == "TND":
        return (query.shape[0], query.shape[1], dv)
    if layout == "BNSD_BSND":
        return (query.shape[0], query.shape[2], query.shape[1], dv)
    return (*query.shape[:3], dv)


def _pfa_meta(query, key, value, *, num_heads=1, input_layout="BSH", num_key_value_heads=0, **_):
    return query.new_empty(_meta_out_shape(query, value, input_layout, num_heads, num_key_value_heads, False))


def _ifa_meta(query, key, value, *, block_table=None, num_heads=1, input_layout="BSH", num_key_value_heads=0, **_):
    return query.new_empty(_meta_out_shape(query, value, input_layout, num_heads, num_key_value_heads,
                                           block_table is not None))


def _fia_meta(query, key, value, *, block_table=None, num_heads=1, input_layout="BSH", num_key_value_heads=0,
              softmax_lse_flag=False, **_):
    out = _meta_out_shape(query, value, input_layout, num_heads, num_key_value_heads, block_table is not None)
    lse: tuple[int, ...]
    if not softmax_lse_flag:
        lse = (1,)
    elif input_layout == "TND":
        lse = (query.shape[0], num_heads, 1)
    else:
        q_layout = "BNSD" if input_layout == "BNSD_BSND" else input_layout
        sq = query.shape[2] if q_layout == "BNSD" else query.shape[1]
        lse = (query.shape[0], num_heads, sq, 1)
    return query.new_empty(out), query.new_empty(lse, dtype=torch.float32)


# -------------------------------------------------------------------------------------------------- public ops

@npu_op(meta=_pfa_meta, public=True)
def npu_prompt_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None, pse_shift=None,
                               actual_seq_lengths=None, deq_scale1=None, quant_scale1=None, deq_scale2=None,
                               quant_scale2=None, quant_offset2=None, num_heads=1, scale_value=1.0,
                               pre_tokens=2147483647, next_tokens=0, input_layout="BSH", num_key_value_heads=0,
                               actual_seq_lengths_kv=None, sparse_mode=0):
    """Emulated ``torch_npu.npu_prompt_flash_attention`` (full/prefill inference attention)."""
    check_npu(OP_PFA, query=query, key=key, value=value, padding_mask=padding_mask, atten_mask=atten_mask,
              pse_shift=pse_shift, deq_scale1=deq_scale1, quant_scale1=quant_scale1, deq_scale2=deq_scale2,
              quant_scale2=quant_scale2, quant_offset2=quant_offset2)
    return _npu_prompt_flash_attention(query, key, value, padding_mask=padding_mask, atten_mask=atten_mask,
                                       pse_shift=pse_shift, actual_seq_lengths=actual_seq_lengths,
                                       deq_scale1=deq_scale1, quant_scale1=quant_scale1, deq_scale2=deq_scale2,
                                       quant_scale2=quant_scale2, quant_offset2=quant_offset2, num_heads=num_heads,
                                       scale_value=scale_value, pre_tokens=pre_tokens, next_tokens=next_tokens,
                                       input_layout=input_layout, num_key_value_heads=num_key_value_heads,
                                       actual_seq_lengths_kv=actual_seq_lengths_kv, sparse_mode=sparse_mode)


def _npu_prompt_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None, pse_shift=None,
                                actual_seq_lengths=None, deq_scale1=None, quant_scale1=None, deq_scale2=None,
                                quant_scale2=None, quant_offset2=None, num_heads=1, scale_value=1.0,
                                pre_tokens=INT32_MAX, next_tokens=0, input_layout="BSH", num_key_value_heads=0,
                                actual_seq_lengths_kv=None, sparse_mode=0):
    op = OP_PFA
    check(isinstance(input_layout, str) and input_layout != "", op, "input_layout is empty")
    if query.dtype == torch.int8:
        raise NotEmulatedError(op, "int8 (quantized) query")
    _not_emulated_if_set(op, deq_scale1=deq_scale1, quant_scale1=quant_scale1, deq_scale2=deq_scale2,
                         quant_scale2=quant_scale2, quant_offset2=quant_offset2)
    mode, _ = _sparse_mode_pfa(op, int(sparse_mode))
    with torch.no_grad():
        out, _ = _prefill(op, query, key, value, atten_mask=atten_mask, pse_shift=pse_shift,
                          q_lens_raw=int_list(op, "actual_seq_lengths", actual_seq_lengths),
                          kv_lens_raw=int_list(op, "actual_seq_lengths_kv", actual_seq_lengths_kv),
                          num_heads=int(num_heads), scale=float(scale_value), pre=int(pre_tokens),
                          nxt=int(next_tokens), layout=input_layout, num_key_value_heads=int(num_key_value_heads),
                          sparse_mode=mode, lse=False, strict16=False,
                          # fp16: the kernel keeps QK^T in fp16 before the scale (what Huawei's own test of it
                          # compares with: fp16 matmul, then the scale); bf16 and fp32 are computed in fp32
                          qk_dtype=torch.float16 if query.dtype == torch.float16 else None)
    return out


@npu_op(meta=_ifa_meta, public=True)
def npu_incre_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None, pse_shift=None,
                              actual_seq_lengths=None, antiquant_scale=None, antiquant_offset=None, block_table=None,
                              dequant_scale1=None, quant_scale1=None, dequant_scale2=None, quant_scale2=None,
                              quant_offset2=None, kv_padding_size=None, num_heads=1, scale_value=1.0,
                              input_layout="BSH", num_key_value_heads=0, block_size=0, inner_precise=1):
    """Emulated ``torch_npu.npu_incre_flash_attention`` (incremental decode attention, optional paged KV)."""
    check_npu(OP_IFA, query=query, key=key, value=value, padding_mask=padding_mask, atten_mask=atten_mask,
              pse_shift=pse_shift, antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset,
              block_table=block_table, dequant_scale1=dequant_scale1, quant_scale1=quant_scale1,
              dequant_scale2=dequant_scale2, quant_scale2=quant_scale2, quant_offset2=quant_offset2,
              kv_padding_size=kv_padding_size)
    return _npu_incre_flash_attention(query, key, value, padding_mask=padding_mask, atten_mask=atten_mask,
                                      pse_shift=pse_shift, actual_seq_lengths=actual_seq_lengths,
                                      antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset,
                                      block_table=block_table, dequant_scale1=dequant_scale1,
                                      quant_scale1=quant_scale1, dequant_scale2=dequant_scale2,
                                      quant_scale2=quant_scale2, quant_offset2=quant_offset2,
                                      kv_padding_size=kv_padding_size, num_heads=num_heads, scale_value=scale_value,
                                      input_layout=input_layout, num_key_value_heads=num_key_value_heads,
                                      block_size=block_size, inner_precise=inner_precise)


def _npu_incre_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None, pse_shift=None,
                               actual_seq_lengths=None, antiquant_scale=None, antiquant_offset=None,
                               block_table=None, dequant_scale1=None, quant_scale1=None, dequant_scale2=None,
                               quant_scale2=None, quant_offset2=None, kv_padding_size=None, num_heads=1,
                               scale_value=1.0, input_layout="BSH", num_key_value_heads=0, block_size=0,
                               inner_precise=1):
    op = OP_IFA
    check(isinstance(input_layout, str) and input_layout != "", op, "input_layout is empty")
    _not_emulated_if_set(op, antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset,
                         dequant_scale1=dequant_scale1, quant_scale1=quant_scale1, dequant_scale2=dequant_scale2,
                         quant_scale2=quant_scale2, quant_offset2=quant_offset2, kv_padding_size=kv_padding_size)
    with torch.no_grad():
        out, _ = _decode(op, query, key, value, atten_mask=atten_mask, pse_shift=pse_shift,
                         kv_lens_raw=int_list(op, "actual_seq_lengths", actual_seq_lengths), block_table=block_table,
                         block_size=int(block_size), num_heads=int(num_heads), scale=float(scale_value),
                         layout=input_layout, num_key_value_heads=int(num_key_value_heads),
                         inner_precise=int(inner_precise), lse=False)
    return out


@npu_op(meta=_fia_meta)
def npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None, actual_seq_lengths=None,
                                    actual_seq_lengths_kv=None, dequant_scale1=None, quant_scale1=None,
                                    dequant_scale2=None, quant_scale2=None, quant_offset2=None, antiquant_scale=None,
                                    antiquant_offset=None, key_antiquant_scale=None, key_antiquant_offset=None,
                                    value_antiquant_scale=None, value_antiquant_offset=None, block_table=None,
                                    query_padding_size=None, kv_padding_size=None, key_shared_prefix=None,
                                    value_shared_prefix=None, actual_shared_prefix_len=None, query_rope=None,
                                    key_rope=None, key_rope_antiquant_scale=None, num_heads=1, scale=1.0,
                                    pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH",
                                    num_key_value_heads=0, sparse_mode=0, inner_precise=0, block_size=0,
                                    antiquant_mode=0, key_antiquant_mode=0, value_antiquant_mode=0,
                                    softmax_lse_flag=False):
    """Emulated ``torch_npu.npu_fused_infer_attention_score`` -> ``(attention_out, softmax_lse)``."""
    check_npu(OP_FIA, query=query, key=key, value=value, pse_shift=pse_shift, atten_mask=atten_mask,
              dequant_scale1=dequant_scale1, quant_scale1=quant_scale1, dequant_scale2=dequant_scale2,
              quant_scale2=quant_scale2, quant_offset2=quant_offset2, antiquant_scale=antiquant_scale,
              antiquant_offset=antiquant_offset, key_antiquant_scale=key_antiquant_scale,
              key_antiquant_offset=key_antiquant_offset, value_antiquant_scale=value_antiquant_scale,
              value_antiquant_offset=value_antiquant_offset, block_table=block_table,
              query_padding_size=query_padding_size, kv_padding_size=kv_padding_size,
              key_shared_prefix=key_shared_prefix, value_shared_prefix=value_shared_prefix, query_rope=query_rope,
              key_rope=key_rope, key_rope_antiquant_scale=key_rope_antiquant_scale)
    return _npu_fused_infer_attention_score(
        query, key, value, pse_shift=pse_shift, atten_mask=atten_mask, actual_seq_lengths=actual_seq_lengths,
        actual_seq_lengths_kv=actual_seq_lengths_kv, dequant_scale1=dequant_scale1, quant_scale1=quant_scale1,
        dequant_scale2=dequant_scale2, quant_scale2=quant_scale2, quant_offset2=quant_offset2,
        antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset, key_antiquant_scale=key_antiquant_scale,
        key_antiquant_offset=key_antiquant_offset, value_antiquant_scale=value_antiquant_scale,
        value_antiquant_offset=value_antiquant_offset, block_table=block_table,
        query_padding_size=query_padding_size, kv_padding_size=kv_padding_size, key_shared_prefix=key_shared_prefix,
        value_shared_prefix=value_shared_prefix, actual_shared_prefix_len=actual_shared_prefix_len,
        query_rope=query_rope, key_rope=key_rope, key_rope_antiquant_scale=key_rope_antiquant_scale,
        num_heads=num_heads, scale=scale, pre_tokens=pre_tokens, next_tokens=next_tokens, input_layout=input_layout,
        num_key_value_heads=num_key_value_heads, sparse_mode=sparse_mode, inner_precise=inner_precise,
        block_size=block_size, antiquant_mode=antiquant_mode, key_antiquant_mode=key_antiquant_mode,
        value_antiquant_mode=value_antiquant_mode, softmax_lse_flag=softmax_lse_flag)


def _npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None,
                                     actual_seq_lengths=None, actual_seq_lengths_kv=None, dequant_scale1=None,
                                     quant_scale1=None, dequant_scale2=None, quant_scale2=None, quant_offset2=None,
                                     antiquant_scale=None, antiquant_offset=None, key_antiquant_scale=None,
                                     key_antiquant_offset=None, value_antiquant_scale=None,
                                     value_antiquant_offset=None, block_table=None, query_padding_size=None,
                                     kv_padding_size=None, key_shared_prefix=None, value_shared_prefix=None,
                                     actual_shared_prefix_len=None, query_rope=None, key_rope=None,
                                     key_rope_antiquant_scale=None, num_heads=1, scale=1.0, pre_tokens=INT32_MAX,
                                     next_tokens=INT32_MAX, input_layout="BSH", num_key_value_heads=0, sparse_mode=0,
                                     inner_precise=0, block_size=0, antiquant_mode=0, key_antiquant_mode=0,
                                     value_antiquant_mode=0, softmax_lse_flag=False):
    op = OP_FIA
    check(isinstance(input_layout, str) and input_layout != "", op, "input_layout is empty")
    sparse_mode = int(sparse_mode)
    if sparse_mode == 9:
        raise NotEmulatedError(op, "sparse_mode=9 (tree mask, MLA only)")
    check(sparse_mode in (0, 1, 2, 3, 4), op, f"SparseMode only supports 0/1/2/3/4/9, but got {sparse_mode}")
    if query.dtype == torch.int8:
        raise NotEmulatedError(op, "int8 (quantized) query")
    _not_emulated_if_set(op, dequant_scale1=dequant_scale1, quant_scale1=quant_scale1, dequant_scale2=dequant_scale2,
                         quant_scale2=quant_scale2, quant_offset2=quant_offset2, antiquant_scale=antiquant_scale,
                         antiquant_offset=antiquant_offset, key_antiquant_scale=key_antiquant_scale,
                         key_antiquant_offset=key_antiquant_offset, value_antiquant_scale=value_antiquant_scale,
                         value_antiquant_offset=value_antiquant_offset, query_padding_size=query_padding_size,
                         kv_padding_size=kv_padding_size, key_shared_prefix=key_shared_prefix,
                         value_shared_prefix=value_shared_prefix, actual_shared_prefix_len=actual_shared_prefix_len,
                         query_rope=query_rope, key_rope=key_rope, key_rope_antiquant_scale=key_rope_antiquant_scale)
    check(int(inner_precise) in (0, 1, 2, 3), op, f"inner_precise must be 0, 1, 2 or 3, but got {inner_precise}")
    if input_layout in ("BSH_NBSD", "BSND_NBSD", "BNSD_NBSD", "TND_NTD", "NTD_TND"):
        raise NotEmulatedError(op, f"input_layout={input_layout}")
    check(input_layout in ("BSH", "BSND", "BNSD", "BNSD_BSND", "TND"), op,
          f"input_layout must be one of BSH, BSND, BNSD, BNSD_BSND, TND, but got {input_layout}")
    q_lens_raw = int_list(op, "actual_seq_lengths", actual_seq_lengths)
    kv_lens_raw = int_list(op, "actual_seq_lengths_kv", actual_seq_lengths_kv)
    if input_layout == "TND":
        qs = 2
    elif input_layout == "BSH" or input_layout == "BSND":
        qs = query.shape[1] if query.dim() >= 2 else 0
    else:
        qs = query.shape[2] if query.dim() == 4 else 0
    with torch.no_grad():
        if qs == 1:  # IFA branch
            check(input_layout != "BNSD_BSND", op, "input_layout BNSD_BSND is only supported when Q_S > 1")
            check(int(inner_precise) in (0, 1), op, f"when Q_S is 1 inner_precise only supports 0 and 1, but got "
                                                    f"{inner_precise}")
            out, lse = _decode(op, query, key, value, atten_mask=atten_mask, pse_shift=pse_shift,
                               kv_lens_raw=kv_lens_raw, block_table=block_table, block_size=int(block_size),
                               num_heads=int(num_heads), scale=float(scale), layout=input_layout,
                               num_key_value_heads=int(num_key_value_heads), inner_precise=int(inner_precise),
                               lse=bool(softmax_lse_flag))
        else:
            out, lse = _prefill(op, query, key, value, atten_mask=atten_mask, pse_shift=pse_shift,
                                q_lens_raw=q_lens_raw, kv_lens_raw=kv_lens_raw, num_heads=int(num_heads),
                                scale=float(scale), pre=int(pre_tokens), nxt=int(next_tokens), layout=input_layout,
                                num_key_value_heads=int(num_key_value_heads), sparse_mode=sparse_mode,
                                lse=bool(softmax_lse_flag), strict16=True, fia_tnd=True, block_table=block_table,
                                block_size=int(block_size),
                                # high-performance modes (1, 3) keep QK^T in fp16, as the prompt kernel does
                                qk_dtype=torch.float16 if query.dtype == torch.float16 and int(inner_precise) in (1, 3)
                                else None)
    if not softmax_lse_flag:
        lse = torch.zeros(1, device=query.device, dtype=torch.float32)
    return out, lse
