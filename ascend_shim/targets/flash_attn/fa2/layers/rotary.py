"""``flash_attn.layers.rotary`` (2.8.4) on ``torch_npu.npu_rotary_mul`` (see ``_rotary`` for when it fits).

``apply_rotary_emb`` / ``apply_rotary_emb_qkv_`` / ``apply_rotary_emb_kv_`` / ``RotaryEmbedding`` with upstream's
signatures and defaults (non-interleaved unless asked). The ``*_`` functions and ``inplace=True`` write the result
into their input, as upstream does.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ... import _rotary


def rotate_half(x, interleaved=False):
    return _rotary._rotate(x, interleaved)


def apply_rotary_emb_torch(x, cos, sin, interleaved=False):
    """Pure-torch reference: x (B, S, H, D), cos/sin (S, rotary_dim / 2)."""
    ro_dim = cos.shape[-1] * 2
    c = _rotary._full_width(cos, interleaved)[:x.shape[1]].unsqueeze(-2)
    s = _rotary._full_width(sin, interleaved)[:x.shape[1]].unsqueeze(-2)
    return torch.cat([x[..., :ro_dim] * c + rotate_half(x[..., :ro_dim], interleaved) * s, x[..., ro_dim:]], dim=-1)


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets: int | Tensor = 0,
                     cu_seqlens: Tensor | None = None, max_seqlen: int | None = None):
    """x (B, S, H, D), or (total, H, D) with cu_seqlens; cos/sin (seqlen_ro, rotary_dim / 2)."""
    out = _rotary.apply(x, cos, sin, interleaved, seqlen_offsets, cu_seqlens)
    if inplace:
        x.copy_(out)
        return x
    return out


apply_rotary_emb_func = apply_rotary_emb


def _qk_views(qkv, num_heads_q):
    if qkv.dim() == 5:
        return qkv[:, :, 0], qkv[:, :, 1]
    assert num_heads_q is not None, "num_heads_q is required for (B, S, Hq + 2 * Hk, D) qkv"
    num_heads_k = (qkv.shape[2] - num_heads_q) // 2
    assert qkv.shape[2] == num_heads_q + 2 * num_heads_k
    return qkv[:, :, :num_heads_q], qkv[:, :, num_heads_q:num_heads_q + num_heads_k]


def apply_rotary_emb_qkv_(qkv, cos, sin, cos_k=None, sin_k=None, interleaved=False,
                          seqlen_offsets: int | torch.Tensor = 0, num_heads_q: int | None = None):
    """Rotate Q and K of a packed qkv **in place**; returns qkv."""
    q, k = _qk_views(qkv, num_heads_q)
    cos_k = cos if cos_k is None else cos_k
    sin_k = sin if sin_k is None else sin_k
    q_new = _rotary.apply(q, cos, sin, interleaved, seqlen_offsets, api="apply_rotary_emb_qkv_")
    k_new = _rotary.apply(k, cos_k, sin_k, interleaved, seqlen_offsets, api="apply_rotary_emb_qkv_")
    q.copy_(q_new)
    k.copy_(k_new)
    return qkv


def apply_rotary_emb_kv_(kv, cos, sin, interleaved=False, seqlen_offsets: int | torch.Tensor = 0):
    """Rotate K of a packed kv (B, S, 2, Hk, D) **in place**; returns kv."""
    k = kv[:, :, 0]
    k.copy_(_rotary.apply(k, cos, sin, interleaved, seqlen_offsets, api="apply_rotary_emb_kv_"))
    return kv


class RotaryEmbedding(torch.nn.Module):
    """RoPE (RoFormer) with flash-attn's cos/sin cache; ``scale_base`` gives XPos as upstream."""

    inv_freq: Tensor  # buffers
    scale: Tensor | None
    _cos_cached: Tensor | None  # built on first use
    _sin_cached: Tensor | None
    _cos_k_cached: Tensor | None
    _sin_k_cached: Tensor | None

    def __init__(self, dim: int, base=10000.0, interleaved=False, scale_base=None, device=None):
        super().__init__()
        self.dim = dim
        self.base = float(base)
        self.register_buffer("inv_freq", self._compute_inv_freq(device), persistent=False)
        self.interleaved = interleaved
        self.scale_base = scale_base
        scale = ((torch.arange(0, dim, 2, device=device, dtype=torch.float32) + 0.4 * dim) / (1.4 * dim)
                 if scale_base is not None else None)
        self.register_buffer("scale", scale, persistent=False)
        self._seq_len_cached = 0
        self._cos_cached = self._sin_cached = self._cos_k_cached = self._sin_k_cached = None

    def _compute_inv_freq(self, device=None):
        return 1.0 / (self.base ** (torch.arange(0, self.dim, 2, device=device, dtype=torch.float32) / self.dim))

    def _update_cos_sin_cache(self, seqlen, device=None, dtype=None):
        if (seqlen > self._seq_len_cached or self._cos_cached is None or self._cos_cached.device != device
                or self._cos_cached.dtype != dtype or (self.training and self._cos_cached.is_inference())):
            self._seq_len_cached = seqlen
            t = torch.arange(seqlen, device=device, dtype=torch.float32)
            inv_freq = self.inv_freq if self.inv_freq.dtype == torch.float32 else self._compute_inv_freq(device)
            freqs = torch.outer(t, inv_freq.to(device))
            if self.scale is None:
                self._cos_cached = torch.cos(freqs).to(dtype)
                self._sin_cached = torch.sin(freqs).to(dtype)
            else:
                power = (torch.arange(seqlen, dtype=self.scale.dtype, device=self.scale.device)
                         - seqlen // 2) / self.scale_base
                scale = self.scale.to(device=power.device) ** power.unsqueeze(-1)
                scale = scale.to(freqs.device)
                self._cos_cached = (torch.cos(freqs) * scale).to(dtype)
                self._sin_cached = (torch.sin(freqs) * scale).to(dtype)
                self._cos_k_cached = (torch.cos(freqs) / scale).to(dtype)
                self._sin_k_cached = (torch.sin(freqs) / scale).to(dtype)

    def forward(self, qkv: torch.Tensor, kv: torch.Tensor | None = None,
                seqlen_offset: int | torch.Tensor = 0, max_seqlen: int | None = None,
                num_heads_q: int | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Rotate qkv (or q and kv) **in place**, as upstream."""
        seqlen = qkv.shape[1]
        if max_seqlen is not None:
            self._update_cos_sin_cache(max_seqlen, device=qkv.device, dtype=qkv.dtype)
        elif isinstance(seqlen_offset, int):
            self._update_cos_sin_cache(seqlen + seqlen_offset, device=qkv.device, dtype=qkv.dtype)
        xpos = self.scale is not None
        if kv is None:
            return apply_rotary_emb_qkv_(qkv, self._cos_cached, self._sin_cached,
                                         self._cos_k_cached if xpos else None, self._sin_k_cached if xpos else None,
                                         interleaved=self.interleaved, seqlen_offsets=seqlen_offset,
                                         num_heads_q=num_heads_q)
        q = apply_rotary_emb_func(qkv, self._cos_cached, self._sin_cached, interleaved=self.interleaved,
                                  inplace=True, seqlen_offsets=seqlen_offset)
        kv = apply_rotary_emb_kv_(kv, self._cos_k_cached if xpos else self._cos_cached,
                                  self._sin_k_cached if xpos else self._sin_cached, interleaved=self.interleaved,
                                  seqlen_offsets=seqlen_offset)
        return q, kv
