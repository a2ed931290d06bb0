"""Like nanochat/flash_attention.py: FA3 from the kernels hub at import time, else an SDPA fallback."""
import torch
import torch.nn.functional as F


def _load_flash_attention_3():
    if not torch.cuda.is_available():
        return None
    try:
        major, _ = torch.cuda.get_device_capability()
        from kernels import get_kernel, has_kernel
        if major == 9:
            return get_kernel("varunneal/flash-attention-3").flash_attn_interface
        if has_kernel("kernels-community/flash-attn3"):
            return get_kernel("kernels-community/flash-attn3").flash_attn_interface
        return None
    except Exception:
        return None


_fa3 = _load_flash_attention_3()
HAS_FA3 = _fa3 is not None
_override_impl = None


def _resolve_use_fa3():
    if _override_impl == "sdpa":
        return False
    if HAS_FA3:
        from nanochat.common import COMPUTE_DTYPE
        return torch.bfloat16 == COMPUTE_DTYPE
    return False


USE_FA3 = _resolve_use_fa3()


def _mask(tq, tk, window, device):
    row = (tk - tq) + torch.arange(tq, device=device).unsqueeze(1)
    col = torch.arange(tk, device=device).unsqueeze(0)
    mask = col <= row
    if 0 <= window < tk:
        mask = mask & ((row - col) <= window)
    return mask


def _sdpa(q, k, v, window):  # (B, T, H, D) in and out
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=_mask(q.size(2), k.size(2), window, q.device))
    return y.transpose(1, 2)


def flash_attn_func(q, k, v, causal=False, window_size=(-1, -1)):
    if USE_FA3:
        return _fa3.flash_attn_func(q, k, v, causal=causal, window_size=window_size)
    return _sdpa(q, k, v, window_size[0])


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, causal=False,
                            window_size=(-1, -1)):
    if USE_FA3:
        return _fa3.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens,
                                            causal=causal, window_size=window_size)
    pos, t = int(cache_seqlens[0].item()), q.size(1)
    k_cache[:, pos:pos + t] = k
    v_cache[:, pos:pos + t] = v
    return _sdpa(q, k_cache[:, :pos + t], v_cache[:, :pos + t], window_size[0])


class _Namespace:
    pass


flash_attn = _Namespace()
flash_attn.flash_attn_func = flash_attn_func
flash_attn.flash_attn_with_kvcache = flash_attn_with_kvcache
