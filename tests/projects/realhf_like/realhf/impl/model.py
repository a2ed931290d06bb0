"""realhf's model-path CUDA patterns: jiterator created at import, a TorchScript helper calling torch.arange,
@torch.compile, use_cuda()/current_device(), CUDA-graph storage annotation, flash_attn for non-CPU tensors."""

import torch

try:  # noqa: SIM105  (realhf's optional import, as written there)
    from flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache
except ModuleNotFoundError:
    pass

CUDA_GRAPH_STORAGE: dict[str, torch.cuda.CUDAGraph] = dict()
swiglu_fwd = torch.cuda.jiterator._create_jit_fn("template <typename T> T swiglu_fwd(T x, T y) { return x; }")


def use_cuda():
    return torch.cuda.is_available()


def current_device():
    return torch.cuda.current_device() if use_cuda() else torch.device("cpu")


@torch.no_grad()
@torch.jit.script
def compute_varlen_position_indices(total_seqlen: int, cu_seqlens: torch.Tensor,
                                    seqlen_offsets: torch.Tensor | None = None) -> torch.Tensor:
    indexing_t = torch.arange(total_seqlen, dtype=torch.long, device=cu_seqlens.device).unsqueeze_(0)
    indexing_t = (cu_seqlens[:-1].unsqueeze(1) <= indexing_t) & (indexing_t < cu_seqlens[1:].unsqueeze(1))
    indices = indexing_t.cumsum(1) - 1
    if seqlen_offsets is not None:
        indices += seqlen_offsets.unsqueeze(1)
    return torch.where(indexing_t, indices, 0).sum(0)


@torch.compile
def calc_entropy(logits: torch.Tensor) -> torch.Tensor:
    probs = torch.softmax(logits.float(), dim=-1)
    return -(probs * torch.log(probs + 1e-9)).sum(-1)


def attention(q, k, v, cu_seqlens, max_seqlen, scale):
    if str(q.device) == "cpu":
        raise AssertionError("the fixture runs on the accelerator")
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p=0.0,
                                  softmax_scale=scale, causal=True)


def decode(q, k, v, k_cache, v_cache, cache_seqlens, cos, sin, scale, interleaved):
    out = flash_attn_with_kvcache(q.unsqueeze(1), k_cache, v_cache, k=k.unsqueeze(1), v=v.unsqueeze(1),
                                  cache_seqlens=cache_seqlens, softmax_scale=scale, causal=False,
                                  rotary_cos=cos, rotary_sin=sin, rotary_interleaved=interleaved)
    return out.squeeze(1)
