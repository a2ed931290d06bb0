"""``F.scaled_dot_product_attention`` on npu DTensors, sharded the way torch_npu shards attention.

torch_npu registers its own ``scaled_dot_product_attention`` kernel for the NPU's autograd key (ahead of torch's
composite, which builds plain mask tensors and fails on DTensors with "mixed torch.Tensor and DTensor"), and
sharding strategies for its fused attention: all inputs replicated, or query/key/value sharded on the batch
dimension, or on the head dimension (a 4-D mask follows when it has that dimension, else is replicated; with
dropout only replication). Plain tensors in the call are taken as replicated, as torch_npu's attention handler
takes them. This module registers the same kernel for the emulated NPU: DTensor calls are laid out by those rules
and computed shard by shard; plain npu tensors run torch's own composite, as before.
"""
from __future__ import annotations

import sys

import torch

_OP = torch.ops.aten.scaled_dot_product_attention.default
_library = None


def install() -> None:
    """Register the kernel for the emulated NPU's autograd key (idempotent)."""
    global _library
    if _library is None:
        library = torch.library.Library("aten", "IMPL")
        library.impl("scaled_dot_product_attention", scaled_dot_product_attention, "AutogradPrivateUse1")
        _library = library


def _dtensor_type():
    module = sys.modules.get("torch.distributed.tensor")  # no DTensor can exist before this is imported
    return getattr(module, "DTensor", None)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                                 enable_gqa=False):
    dtensor = _dtensor_type()
    if dtensor is not None and any(isinstance(t, dtensor) for t in (query, key, value, attn_mask)):
        return _sharded(dtensor, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return _OP.decompose(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


def layout(query_placements, query_dim: int, dropout_p: float):
    """Per mesh dimension, torch_npu's strategy for query/key/value: the batch shard (dim 0) or head shard (dim 1)
    kept, anything else replicated; everything replicated with dropout or a query that is not (B, N, L, E)."""
    from torch.distributed.tensor import Replicate, Shard

    if dropout_p > 0 or query_dim != 4:
        return [Replicate() for _ in query_placements]
    return [p if isinstance(p, Shard) and p.dim in (0, 1) else Replicate() for p in query_placements]


def mask_layout(placements, mask_shape):
    """The mask follows a batch or head shard when it has that dimension (size > 1), else it is replicated."""
    from torch.distributed.tensor import Replicate, Shard

    ndim, out = len(mask_shape), []
    for p in placements:
        dim = ndim - 4 + p.dim if isinstance(p, Shard) else -1  # the mask broadcasts from the right
        out.append(Shard(dim) if dim >= 0 and mask_shape[dim] > 1 else Replicate())
    return out


def _sharded(dtensor, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    from torch.distributed.tensor import Replicate

    mesh = next(t for t in (query, key, value, attn_mask) if isinstance(t, dtensor)).device_mesh

    def as_dtensor(t):
        if t is None or isinstance(t, dtensor):
            return t
        return dtensor.from_local(t, mesh, [Replicate()] * mesh.ndim, run_check=False)

    q, k, v, m = (as_dtensor(t) for t in (query, key, value, attn_mask))
    placements = layout(q.placements, q.dim(), dropout_p)
    q, k, v = (t.redistribute(mesh, placements) for t in (q, k, v))
    if m is not None:
        m = m.redistribute(mesh, mask_layout(placements, m.shape))
    local = _OP(q.to_local(), k.to_local(), v.to_local(), None if m is None else m.to_local(), dropout_p,
                is_causal, scale=scale, enable_gqa=enable_gqa)
    shape = torch.Size((*q.shape[:-1], v.shape[-1]))
    return dtensor.from_local(local, mesh, placements, run_check=False, shape=shape,
                              stride=torch.empty(shape, device="meta").stride())
