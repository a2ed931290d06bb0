"""``flash_attn.bert_padding`` (2.8.4): padding helpers, plain torch (no NPU op involved, no einops needed).

``unpad_input`` returns upstream's current 5-tuple ``(hidden (nnz, ...), indices, cu_seqlens int32 (B + 1),
max_seqlen_in_batch (int), seqused (B,) int32)``; ``max_seqlen_in_batch`` is a python int as upstream, which is one
device-to-host read.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


class IndexFirstAxis(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, indices):  # noqa: A002 - upstream's names
        ctx.save_for_backward(indices)
        assert input.ndim >= 2
        ctx.first_axis_dim, other_shape = input.shape[0], input.shape[1:]
        flat = input.reshape(input.shape[0], -1)
        return torch.gather(flat, 0, indices.view(-1, 1).expand(-1, flat.shape[1])).reshape(-1, *other_shape)

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        other_shape = grad_output.shape[1:]
        g = grad_output.reshape(grad_output.shape[0], -1)
        grad_input = torch.zeros(ctx.first_axis_dim, g.shape[1], device=g.device, dtype=g.dtype)
        grad_input.scatter_(0, indices.view(-1, 1).expand(-1, g.shape[1]), g)
        return grad_input.reshape(ctx.first_axis_dim, *other_shape), None


index_first_axis = IndexFirstAxis.apply


class IndexPutFirstAxis(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, indices, first_axis_dim):
        ctx.save_for_backward(indices)
        assert indices.ndim == 1
        assert values.ndim >= 2
        output = torch.zeros(first_axis_dim, *values.shape[1:], device=values.device, dtype=values.dtype)
        output[indices] = values
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        return grad_output[indices], None, None


index_put_first_axis = IndexPutFirstAxis.apply


class IndexFirstAxisResidual(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, indices):  # noqa: A002
        ctx.save_for_backward(indices)
        assert input.ndim >= 2
        ctx.first_axis_dim = input.shape[0]
        return input[indices], input.detach()

    @staticmethod
    def backward(ctx, grad_output, grad_residual):
        (indices,) = ctx.saved_tensors
        other_shape = grad_output.shape[1:]
        grad_input = grad_residual
        idx = indices.reshape(indices.shape[0], *((1,) * (grad_output.ndim - 1))).expand_as(grad_output)
        grad_input.scatter_add_(0, idx, grad_output)
        return grad_input.reshape(ctx.first_axis_dim, *other_shape), None


index_first_axis_residual = IndexFirstAxisResidual.apply


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """(B, S, ...) + mask (B, S) -> (hidden (nnz, ...), indices, cu_seqlens, max_seqlen_in_batch, seqused)."""
    all_masks = (attention_mask + unused_mask) if unused_mask is not None else attention_mask
    seqlens_in_batch = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = seqlens_in_batch.max().item()
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen_in_batch, used_seqlens_in_batch


def unpad_input_for_concatenated_sequences(hidden_states, attention_mask_in_length):
    """Packed short samples per row (``attention_mask_in_length`` holds their lengths) -> 4-tuple as upstream."""
    length = attention_mask_in_length.sum(dim=-1)
    seqlen = attention_mask_in_length.size(-1)
    mask_2d = torch.arange(seqlen, device=length.device, dtype=length.dtype).expand(len(length), seqlen) \
        < length.unsqueeze(1)
    real_indices_idx = torch.nonzero(attention_mask_in_length.flatten(), as_tuple=False).flatten()
    seqlens_in_batch = attention_mask_in_length.flatten()[real_indices_idx]
    indices = torch.nonzero(mask_2d.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = seqlens_in_batch.max().item()
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen_in_batch


def pad_input(hidden_states, indices, batch, seqlen):
    """(nnz, ...) -> (batch, seqlen, ...), zeros where nothing was selected."""
    output = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return output.reshape(batch, seqlen, *output.shape[1:])
