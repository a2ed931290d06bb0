"""Meta kernels of the emulated ``npu::`` ops: output shapes and dtypes, for FakeTensor and torch.compile.

torch_npu ships its own Meta registrations in Python (the real layer keeps those); the builtin layer registers
these. They follow the emulated kernels' outputs exactly (the tests compare them), read no tensor data and
validate nothing: a call the NPU rejects fails when the compiled graph runs, as on hardware.
``npu_fusion_attention`` answers its ``seed``/``offset`` arguments and the shape-derived ``numels``: under
torch.compile the traced graph keeps these values, as it keeps those of torch_npu's Meta kernel.
"""
from __future__ import annotations

import torch


def _empty(shape, dtype, like):
    return torch.empty(tuple(shape), dtype=dtype, device=like.device)


def npu_rms_norm(input, gamma, epsilon=1e-06):  # noqa: A002 - the op's argument name
    kept = input.dim() - gamma.dim()
    rstd = [*input.shape[:kept], *([1] * gamma.dim())]
    return torch.empty_like(input), _empty(rstd, torch.float32, input)


def npu_rms_norm_backward(dy, input, gamma, rstd):  # noqa: A002
    return torch.empty_like(input), _empty(gamma.shape, torch.float32, gamma)


def npu_swiglu(input, dim=-1):  # noqa: A002
    shape = list(input.shape)
    shape[dim] = shape[dim] // 2
    return _empty(shape, input.dtype, input)


def npu_swiglu_backward(grad_output, input, dim=-1):  # noqa: A002
    return torch.empty_like(input)


def npu_geglu(input, dim=-1, approximate=1, activate_left=False):  # noqa: A002
    shape = list(input.shape)
    shape[dim] = shape[dim] // 2
    return _empty(shape, input.dtype, input), _empty(shape, input.dtype, input)


def npu_geglu_grad(grad_output, input, gelu, dim=-1, approximate=1, activate_left=False):  # noqa: A002
    return torch.empty_like(input)


def npu_rotary_mul(input, r1, r2, rotary_mode="half", rotate=None):  # noqa: A002
    return torch.empty_like(input)


def npu_rotary_mul_backward(grad, input, r1, r2, rotary_mode="half"):  # noqa: A002
    return torch.empty_like(input), torch.empty_like(r1), torch.empty_like(r2)


def _fa_sizes(query, key, value, head_num, layout):
    """(B, Sq, Skv, Dv) of npu_fusion_attention (B, Sq, Skv None for TND)."""
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


def _fa_out_shape(query, head_num, layout, dv):
    if layout == "BSH":
        return (query.shape[0], query.shape[1], head_num * dv)
    if layout == "SBH":
        return (query.shape[0], query.shape[1], head_num * dv)
    if layout == "TND":
        return (query.shape[0], query.shape[1], dv)
    return (*query.shape[:3], dv)


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None, atten_mask=None,
                         scale=1., keep_prob=1., pre_tockens=2147483647, next_tockens=2147483647, inner_precise=0,
                         prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                         gen_mask_parallel=True, sync=False, softmax_layout="", sink=None, dropout_mask=None,
                         seed=0, offset=0):
    b, sq, skv, dv = _fa_sizes(query, key, value, head_num, input_layout)
    out = _empty(_fa_out_shape(query, head_num, input_layout, dv), query.dtype, query)
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
    softmax_max, softmax_sum = _empty(stats, torch.float32, query), _empty(stats, torch.float32, query)
    return out, softmax_max, softmax_sum, _empty((0,), query.dtype, query), seed, offset, numels


def npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, *, pse=None, padding_mask=None,
                              atten_mask=None, softmax_max=None, softmax_sum=None, softmax_in=None,
                              attention_in=None, scale_value=1., keep_prob=1., pre_tockens=2147483647,
                              next_tockens=2147483647, inner_precise=0, seed=0, offset=0, numels=0, prefix=None,
                              actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True,
                              sync=False, softmax_layout="", sink=None):
    from . import _release

    grads = (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value),
             None if pse is None else torch.empty_like(pse), _empty((0,), torch.float32, key))
    return grads if _release.at_least(_release.GRAD_RETURNS_DSINK_SINCE) else grads[:4]


def _infer_out(query, value, layout, num_heads, num_key_value_heads, paged):
    """The inference ops' attention_out: the query's layout (BNSD_BSND: BSND) with the value's head dim."""
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


def _kv(tensor_or_list):
    return tensor_or_list[0] if isinstance(tensor_or_list, (list, tuple)) else tensor_or_list


def npu_prompt_flash_attention(query, key, value, *, num_heads=1, input_layout="BSH", num_key_value_heads=0,
                               **_):
    return _empty(_infer_out(query, value, input_layout, num_heads, num_key_value_heads, False), query.dtype, query)


def npu_incre_flash_attention(query, key, value, *, block_table=None, num_heads=1, input_layout="BSH",
                              num_key_value_heads=0, **_):
    return _empty(_infer_out(query, _kv(value), input_layout, num_heads, num_key_value_heads,
                             block_table is not None), query.dtype, query)


def npu_fused_infer_attention_score(query, key, value, *, block_table=None, num_heads=1, input_layout="BSH",
                                    num_key_value_heads=0, softmax_lse_flag=False, **_):
    out = _infer_out(query, _kv(value), input_layout, num_heads, num_key_value_heads, block_table is not None)
    lse: tuple[int, ...]
    if not softmax_lse_flag:
        lse = (1,)
    elif input_layout == "TND":
        lse = (query.shape[0], num_heads, 1)
    else:
        q_layout = "BNSD" if input_layout == "BNSD_BSND" else input_layout
        sq = query.shape[2] if q_layout == "BNSD" else query.shape[1]
        lse = (query.shape[0], num_heads, sq, 1)
    return _empty(out, query.dtype, query), _empty(lse, torch.float32, query)


#: op name -> Meta kernel
KERNELS = {name: fn for name, fn in globals().items() if name.startswith("npu_") and callable(fn)}
