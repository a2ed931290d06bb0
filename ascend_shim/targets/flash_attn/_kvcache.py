"""``flash_attn_with_kvcache`` on ``torch_npu.npu_fused_infer_attention_score`` (FA2 and FA3 share it).

What flash-attn does, in order: rotate ``k`` (and ``q``) by ``rotary_cos/sin`` at positions
``cache_seqlens + t`` (``q`` all at ``cache_seqlens`` when neither causal nor local); write ``k``/``v`` **in place**
into ``k_cache``/``v_cache`` at rows ``cache_seqlens[b] + t`` of cache row ``cache_batch_idx[b]`` (or of the pages
``block_table[b]`` names); attend over the first ``cache_seqlens[b] + seqlen_new`` keys with the band anchored
bottom-right on that length. No backward.

Mapping: the writes are device index_put_ (no sync). Decode (seqlen_q == 1) with device ``cache_seqlens`` reads
no lengths to the host: it attends over the whole cache width through the op's incremental path with a (B, width)
bool mask built on the device from ``cache_seqlens + seqlen_new`` (and the left window edge), so a decode step of
any depth makes no sync of its own, also under ``torch.inference_mode`` (paged caches: the op gets the full page
count, unused ``block_table`` entries clamped to a real page, all hidden by the mask). A prefill into a dense cache
(the queries' own keys appended, mask at most ``PREFILL_MASK_LIMIT`` elements) does the same on the prompt path
with an explicit (B, 1, Sq, width) band mask, sparse_mode 0. With host lengths (an int, None, a cpu tensor) the
per-batch key lengths go to the op as ``actual_seq_lengths_kv``. Other prompt-path calls (paged, no new keys, a
larger mask) read them to the host (``_hostlists``: one read per distinct ``cache_seqlens`` tensor version,
shared by every layer; an inference tensor is read per call) and take sparse_mode 3 (causal) / 4 (band) with the
compressed mask. Paged caches go to the op as (blocks, page, Hk*D) with ``block_table``. ``softcap``, ALiBi,
head dims the prompt path rejects (D % 16) and page sizes it rejects run the exact reference (recorded);
``cache_leftpad`` raises UnsupportedOnNPUError; ``num_splits`` is a CUDA scheduling hint and has no effect.
"""
from __future__ import annotations

import math

import torch

from ascend_shim.errors import UnsupportedOnNPUError
from ascend_shim.report import REPORT

from . import _hostlists, _npu, _reference, _rotary

#: largest B * seqlen_q * cache width a prefill masks on the device instead of reading the lengths (16 MB of bool)
PREFILL_MASK_LIMIT = 1 << 24


def _lengths(cache_seqlens, batch: int, capacity: int, device, host: bool = True):
    """(host list, device long tensor) of the cache lengths before the append.

    The host list is None when ``host`` is False and the lengths live on the device: decode never reads them.
    """
    lens: list[int] | None
    if cache_seqlens is None:
        lens = [capacity] * batch
        return lens, torch.full((batch,), capacity, dtype=torch.long, device=device)
    if isinstance(cache_seqlens, int):
        return [cache_seqlens] * batch, torch.full((batch,), cache_seqlens, dtype=torch.long, device=device)
    lens = _hostlists.host_lists(cache_seqlens)[0] if host or cache_seqlens.device.type == "cpu" else None
    return lens, cache_seqlens.to(device=device, dtype=torch.long)


def _decode_mask(kv_len_dev, width: int, left: int):
    """(B, width) bool, True = masked: keys at or past each row's length, and before its left window edge.

    Built on the device from the device lengths, so a decode step never reads them to the host.
    """
    col = torch.arange(width, device=kv_len_dev.device).view(1, -1)
    end = kv_len_dev.view(-1, 1)
    mask = col >= end
    if left >= 0:  # the one query row sees keys [len - 1 - left, len - 1]
        mask |= col < end - 1 - left
    return mask


def _prefill_mask(kv_len_dev, sq: int, width: int, left: int, right: int):
    """(B, 1, Sq, width) bool, True = masked: query i of row b sees keys up to its length, in its band anchored
    bottom-right on that length (flash-attn's rule), built on the device. Only used when the queries' own keys
    were just appended, so every query sees at least its own key."""
    col = torch.arange(width, device=kv_len_dev.device).view(1, 1, -1)
    end = kv_len_dev.view(-1, 1, 1)
    diag = torch.arange(sq, device=kv_len_dev.device).view(1, -1, 1) + end - sq  # query i's own position
    mask = (col >= end).expand(-1, sq, -1)
    if right >= 0:
        mask = mask | (col > diag + right)
    if left >= 0:
        mask = mask | (col < diag - left)
    return mask.unsqueeze(1).contiguous()


def _append(k_cache, v_cache, k, v, lens_dev, cache_batch_idx, block_table):
    pos = lens_dev.view(-1, 1) + torch.arange(k.shape[1], device=k_cache.device)  # (B, S_new)
    if block_table is not None:
        page = k_cache.shape[1]
        blk = torch.gather(block_table.long(), 1, torch.div(pos, page, rounding_mode="floor"))
        idx = (blk, pos % page)
    else:
        rows = cache_batch_idx.long() if cache_batch_idx is not None else torch.arange(k.shape[0],
                                                                                       device=k_cache.device)
        idx = (rows.view(-1, 1).expand_as(pos), pos)
    k_cache.index_put_(idx, k.to(k_cache.dtype))
    v_cache.index_put_(idx, v.to(v_cache.dtype))


def _dense_cache(cache, kv_lens, cache_batch_idx, block_table):
    """(B, S, Hk, D) keys for the reference: gathered pages / selected rows, S = max length."""
    smax = max(kv_lens) if kv_lens else 0
    if block_table is not None:
        page = cache.shape[1]
        blocks = -(-smax // page)
        g = cache[block_table[:, :blocks].long()]  # (B, blocks, page, Hk, D)
        return g.reshape(g.shape[0], blocks * page, *cache.shape[2:])[:, :smax]
    if cache_batch_idx is not None:
        cache = cache.index_select(0, cache_batch_idx.long())
    return cache[:, :smax]


def _reference_attention(q, k_cache, v_cache, kv_lens, cache_batch_idx, block_table, *, scale, left, right, softcap,
                         alibi):
    kc = _dense_cache(k_cache, kv_lens, cache_batch_idx, block_table)
    vc = _dense_cache(v_cache, kv_lens, cache_batch_idx, block_table)
    outs, lses = [], []
    for b, n in enumerate(kv_lens):
        slopes = alibi[b] if alibi is not None and alibi.dim() == 2 else alibi
        o, lse = _reference.attention(q[b:b + 1], kc[b:b + 1, :n], vc[b:b + 1, :n], scale=scale, left=left,
                                      right=right, softcap=softcap, alibi=slopes)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def with_kvcache(q, k_cache, v_cache, k=None, v=None, *, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                 cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
                 window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                 api="flash_attn_with_kvcache"):
    """-> (out (B, Sq, H, D), softmax_lse (B, H, Sq) fp32). Updates k_cache / v_cache in place."""
    _npu.check_inputs(api, q, k_cache, v_cache)
    if cache_leftpad is not None:
        raise UnsupportedOnNPUError(f"{api}(cache_leftpad=...)", _npu.PATCH_ID,
                                    "Keep caches left-aligned and pass their lengths in cache_seqlens.")
    if block_table is not None and cache_batch_idx is not None:
        raise RuntimeError(f"{api}: paged KV cache does not support cache_batch_idx")
    if (k is None) != (v is None):
        raise RuntimeError(f"{api}: k and v must be given together")
    B, Sq, H, D = q.shape
    Hk = k_cache.shape[2]
    page = k_cache.shape[1] if block_table is not None else 0
    capacity = block_table.shape[1] * page if block_table is not None else k_cache.shape[1]
    scale = D ** -0.5 if softmax_scale is None else float(softmax_scale)
    reason = ""
    if softcap > 0:
        reason = f"softcap={softcap}: the inference ops have no softcap"
    elif alibi_slopes is not None:
        reason = "alibi_slopes: the inference ops' pse_shift is not mapped"
    elif Sq > 1 and D % 16 != 0:
        reason = f"head_dim {D} (the prompt path needs D % 16 == 0)"
    elif Sq > 1 and block_table is not None and not (page % 128 == 0 and 128 <= page <= 512):
        reason = f"page size {page} (the prompt path needs a multiple of 128 in [128, 512])"
    knew = k.shape[1] if k is not None else 0
    # decode reads no lengths to the host: its mask is built on the device (one sync per token is the sampler's);
    # so does a prefill that appends its queries' own keys into a dense cache, while its mask stays small
    device_mask = not reason and (Sq == 1 or (knew == Sq and block_table is None
                                              and B * Sq * k_cache.shape[1] <= PREFILL_MASK_LIMIT))
    lens, lens_dev = _lengths(cache_seqlens, B, capacity, q.device, host=not device_mask)
    left, right = _npu.normalize_window(causal and not (Sq == 1 and alibi_slopes is None), window_size, capacity)

    if rotary_cos is not None and k is not None:
        k = _rotary.rotate_at(k, rotary_cos, rotary_sin, _rotary.positions(k, lens_dev), rotary_interleaved, api)
        if causal or left >= 0 or right >= 0:
            qpos = _rotary.positions(q, lens_dev)
        else:  # every query token sits at position cache_seqlens
            qpos = lens_dev.view(-1, 1).expand(B, Sq)
        q = _rotary.rotate_at(q, rotary_cos, rotary_sin, qpos, rotary_interleaved, api)
    if k is not None:
        _append(k_cache, v_cache, k, v, lens_dev, cache_batch_idx, block_table)
    kv_lens = [n + knew for n in lens] if lens is not None else None

    if reason:
        REPORT.fallback(api, reason + "; exact reference attention")
        return _reference_attention(q, k_cache, v_cache, kv_lens, cache_batch_idx, block_table, scale=scale, left=left,
                          right=right, softcap=softcap, alibi=alibi_slopes)

    if block_table is not None:
        kc = k_cache.reshape(k_cache.shape[0], page, Hk * D)
        vc = v_cache.reshape(v_cache.shape[0], page, Hk * v_cache.shape[-1])
        width = (-(-max(kv_lens) // page) * page) if kv_lens is not None else capacity
    else:
        kc = k_cache[:B] if cache_batch_idx is None else k_cache.index_select(0, cache_batch_idx.long())
        vc = v_cache[:B] if cache_batch_idx is None else v_cache.index_select(0, cache_batch_idx.long())
        width = kc.shape[1]
    common = dict(num_heads=H, num_key_value_heads=Hk, input_layout="BSND", scale=scale, block_size=page,
                  softmax_lse_flag=True)
    fia = _npu.npu().npu_fused_infer_attention_score
    if Sq == 1:
        mask = None
        if kv_lens is None:  # lengths on the device: attend over the whole width, the mask hides the rest
            mask = _decode_mask(lens_dev + knew, width, left)
            table = block_table
            if block_table is not None:  # every page is read now: unused table entries must name a real page
                table = block_table.clamp(0, k_cache.shape[0] - 1)
                kv_lens = [width] * B  # paged attention needs lengths; the mask does the rest
            out, lse = fia(q, kc, vc, atten_mask=mask, actual_seq_lengths_kv=kv_lens, block_table=table, **common)
        else:
            if left >= 0:  # the one query row sees keys [len - 1 - left, len - 1]
                first = torch.tensor([n - 1 - left for n in kv_lens], device=q.device).view(-1, 1)
                mask = torch.arange(width, device=q.device).view(1, -1) < first
            out, lse = fia(q, kc, vc, atten_mask=mask, actual_seq_lengths_kv=kv_lens, block_table=block_table,
                           **common)
    elif kv_lens is None:  # a prefill with device lengths: an explicit (B, 1, Sq, width) mask, sparse_mode 0
        mask = _prefill_mask(lens_dev + knew, Sq, width, left, right)
        out, lse = fia(q, kc, vc, atten_mask=mask, sparse_mode=0, **common)
    else:
        plan = _npu._band(_npu.Plan(left, right), q.device, Sq, max(kv_lens))
        out, lse = fia(q, kc, vc, atten_mask=plan.mask, actual_seq_lengths=[Sq] * B, sparse_mode=plan.mode,
                       pre_tokens=plan.pre, next_tokens=plan.nxt, actual_seq_lengths_kv=kv_lens,
                       block_table=block_table, **common)
    lse = lse.reshape(B, H, Sq)
    lse = torch.where(lse <= _npu.INVALID_ROW_MAX, torch.full_like(lse, math.inf), lse)
    return out, lse
