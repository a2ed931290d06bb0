"""npu_prompt_flash_attention / npu_incre_flash_attention / npu_fused_infer_attention_score vs an independent
reference (per-batch loops, explicit boolean masks, ``softmax(scale * QK^T + pse_shift)``), plus rejections."""
import importlib.util
from pathlib import Path

import pytest
import torch

_spec = importlib.util.spec_from_file_location("_ops_support", Path(__file__).with_name("_ops_support.py"))
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)

from ascend_shim.sim.ops import NotEmulatedError  # noqa: E402
from ascend_shim.sim.ops import infer_attention as IA  # noqa: E402

INT_MAX = 2147483647


def pfa():
    return S.op("npu_prompt_flash_attention", "infer_attention")


def ifa():
    return S.op("npu_incre_flash_attention", "infer_attention")


def fia():
    return S.op("npu_fused_infer_attention_score", "infer_attention")


def ref_infer(q, k, v, *, scale, mode=0, user=None, pre=INT_MAX, nxt=INT_MAX, q_lens=None, kv_lens=None, pse=None):
    """q (B,Nq,Sq,D), k/v (B,Nkv,Skv,*); user bool (B|1, 1, Sq, Skv) True = masked. Per-batch loops.

    Returns (out (B,Nq,Sq,Dv) fp32, lse (B,Nq,Sq) fp32 with -inf for empty rows)."""
    B, Nq, Sq, _ = q.shape
    Skv = k.shape[2]
    out = torch.zeros(B, Nq, Sq, v.shape[-1])
    lse = torch.full((B, Nq, Sq), float("-inf"))
    for b in range(B):
        ql = q_lens[b] if q_lens else Sq
        kl = kv_lens[b] if kv_lens else Skv
        allowed = torch.zeros(Sq, Skv, dtype=torch.bool)
        if mode in (2, 3, 4) or (mode == 0 and user is not None):
            rule = S.allowed_matrix(mode, ql, kl, pre, nxt)
        else:
            rule = torch.ones(ql, kl, dtype=torch.bool)
        allowed[:ql, :kl] = rule
        if user is not None and mode in (0, 1):
            allowed &= ~user[b if user.shape[0] > 1 else 0, 0]
        g = Nq // k.shape[1]
        kk = k[b].float().repeat_interleave(g, 0)
        vv = v[b].float().repeat_interleave(g, 0)
        s = q[b].float() @ kk.transpose(-1, -2) * scale
        if pse is not None:
            s = s + pse[b if pse.shape[0] > 1 else 0].float()
        s = s.masked_fill(~allowed, float("-inf"))
        has = allowed.any(-1)
        p = torch.softmax(torch.where(has[:, None], s, torch.zeros_like(s)), -1) * has[:, None]
        p = torch.where(allowed, p, torch.zeros_like(p))
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-30)
        out[b] = p @ vv
        lse[b] = torch.where(has, torch.logsumexp(s, -1), torch.full_like(lse[b], float("-inf")))
    return out, lse


def _data(B, Nq, Nkv, Sq, Skv, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, Nq, Sq, D, generator=g).to(dtype), torch.randn(B, Nkv, Skv, D, generator=g).to(dtype),
            torch.randn(B, Nkv, Skv, D, generator=g).to(dtype))


def _layout_in(t, layout):
    return S.make_layout(t, "BNSD" if layout == "BNSD_BSND" else layout)


def _layout_out(o, layout, n):
    return S.split_heads(o, "BSND" if layout == "BNSD_BSND" else layout, n)


PFA_CASES = [
    ("nomask", 0, None, INT_MAX, 0),
    ("m0_mask_default_tokens_is_causal", 0, "mask", INT_MAX, 0),
    ("m0_band", 0, "mask", 2, 1),
    ("m1", 1, "mask", INT_MAX, INT_MAX),
    ("m2", 2, "compressed", INT_MAX, INT_MAX),
    ("m3", 3, "compressed", INT_MAX, INT_MAX),
    ("m4", 4, "compressed", 3, 1),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "BNSD_BSND"])
@pytest.mark.parametrize("case", PFA_CASES, ids=[c[0] for c in PFA_CASES])
def test_pfa_matches_reference(layout, dtype, case):
    _, mode, mask_kind, pre, nxt = case
    B, Nq, Nkv, Sq, Skv, D = 3, 4, 2, 7, 9, 16
    q, k, v = _data(B, Nq, Nkv, Sq, Skv, D, dtype)
    q_lens, kv_lens = [7, 5, 3], [9, 6, 8]
    user = None
    mask = None
    if mask_kind == "mask":
        user = torch.rand(B, 1, Sq, Skv, generator=torch.Generator().manual_seed(5)) < 0.25
        user[..., 0] = False
        mask = user
    elif mask_kind == "compressed":
        mask = S.compressed_mask()
    scale = S.default_scale(D)
    out = pfa()(*S.to_dev(_layout_in(q, layout), _layout_in(k, layout), _layout_in(v, layout)),
                atten_mask=S.to_dev(mask) if mask is not None else None, actual_seq_lengths=q_lens,
                actual_seq_lengths_kv=kv_lens, num_heads=Nq, num_key_value_heads=Nkv, scale_value=scale,
                pre_tokens=pre, next_tokens=nxt, input_layout=layout, sparse_mode=mode)
    assert out.dtype == dtype
    ref, _ = ref_infer(q, k, v, scale=scale, mode=mode, user=user, pre=pre, nxt=nxt, q_lens=q_lens,
                       kv_lens=kv_lens)
    S.close(_layout_out(out, layout, Nq), ref, dtype)


def test_pfa_pse_shift_added_after_scale_and_high_precision_modes():
    q, k, v = _data(2, 2, 2, 6, 6, 16, torch.float16)
    pse = (torch.randn(1, 2, 6, 6) * 2).half()
    out = pfa()(*S.to_dev(q, k, v), pse_shift=S.to_dev(pse), num_heads=2, scale_value=0.25, input_layout="BNSD")
    ref, _ = ref_infer(q, k, v, scale=0.25, pse=pse)
    S.close(out, ref, torch.float16)
    wrong, _ = ref_infer(q, k, v, scale=0.25, pse=pse * 4)  # = (QK^T + pse) * scale would differ
    assert (out.float().cpu() - wrong).abs().max() > 1e-2
    # sparse_mode 10..14 = modes 0..4 in high-precision mode
    m = S.to_dev(S.compressed_mask())
    a = pfa()(*S.to_dev(q, k, v), atten_mask=m, num_heads=2, input_layout="BNSD", sparse_mode=3)
    b = pfa()(*S.to_dev(q, k, v), atten_mask=m, num_heads=2, input_layout="BNSD", sparse_mode=13)
    torch.testing.assert_close(a, b)


def test_pfa_tnd_varlen():
    qlens, kvlens = [3, 6, 2], [5, 6, 4]
    g = torch.Generator().manual_seed(2)
    q = torch.randn(sum(qlens), 4, 16, generator=g).half()
    k = torch.randn(sum(kvlens), 2, 16, generator=g).half()
    v = torch.randn(sum(kvlens), 2, 16, generator=g).half()
    cq = [3, 9, 11]
    ck = [5, 11, 15]
    out = pfa()(*S.to_dev(q, k, v), atten_mask=S.to_dev(S.compressed_mask()), actual_seq_lengths=cq,
                actual_seq_lengths_kv=ck, num_heads=4, num_key_value_heads=2, scale_value=0.25, input_layout="TND",
                sparse_mode=3)
    q0 = k0 = 0
    for a, c in zip(qlens, kvlens, strict=True):
        r, _ = ref_infer(q[q0:q0 + a].transpose(0, 1)[None], k[k0:k0 + c].transpose(0, 1)[None],
                         v[k0:k0 + c].transpose(0, 1)[None], scale=0.25, mode=3)
        S.close(out[q0:q0 + a].transpose(0, 1)[None], r, torch.float16)
        q0, k0 = q0 + a, k0 + c
    with pytest.raises(RuntimeError, match="WITHOUT a leading 0"):
        pfa()(*S.to_dev(q, k, v), actual_seq_lengths=[0] + cq, actual_seq_lengths_kv=[0] + ck, num_heads=4,
              num_key_value_heads=2, input_layout="TND")


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD"])
def test_ifa_decode_matches_reference(layout):
    B, Nq, Nkv, Skv, D = 3, 8, 2, 20, 32
    q, k, v = _data(B, Nq, Nkv, 1, Skv, D, torch.float16)
    kv_lens = [20, 7, 13]  # per-batch valid KV lengths, NOT cumulative
    mask = torch.zeros(B, Skv, dtype=torch.bool)
    mask[1, 2] = True
    out = ifa()(*S.to_dev(*(S.make_layout(t, layout) for t in (q, k, v))), atten_mask=S.to_dev(mask),
                actual_seq_lengths=kv_lens, num_heads=Nq, num_key_value_heads=Nkv, scale_value=0.2,
                input_layout=layout)
    ref, _ = ref_infer(q, k, v, scale=0.2, mode=1, user=mask[:, None, None, :], kv_lens=kv_lens)
    S.close(S.split_heads(out, layout, Nq), ref, torch.float16)


@pytest.mark.parametrize("cache_layout", ["BnBsH", "BnNBsD"])
def test_ifa_paged_kv_matches_contiguous(cache_layout):
    B, Nq, Nkv, D, bs = 2, 4, 2, 16, 16
    kv_lens = [37, 20]
    g = torch.Generator().manual_seed(9)
    q = torch.randn(B, Nq, 1, D, generator=g).bfloat16()
    k = torch.randn(B, Nkv, 48, D, generator=g).bfloat16()
    v = torch.randn(B, Nkv, 48, D, generator=g).bfloat16()
    # scatter the per-batch sequences into a shuffled pool of blocks
    nblocks = 8
    perm = torch.randperm(nblocks, generator=g)
    table = torch.full((B, 3), -1, dtype=torch.int32)
    kc = torch.zeros(nblocks, Nkv, bs, D).bfloat16()
    vc = torch.zeros(nblocks, Nkv, bs, D).bfloat16()
    nxt = 0
    for b in range(B):
        for j in range((kv_lens[b] + bs - 1) // bs):
            blk = int(perm[nxt])
            nxt += 1
            table[b, j] = blk
            kc[blk] = k[b, :, j * bs:(j + 1) * bs]
            vc[blk] = v[b, :, j * bs:(j + 1) * bs]
    if cache_layout == "BnBsH":
        kc = kc.permute(0, 2, 1, 3).reshape(nblocks, bs, Nkv * D)
        vc = vc.permute(0, 2, 1, 3).reshape(nblocks, bs, Nkv * D)
    out = ifa()(*S.to_dev(q, kc, vc), block_table=S.to_dev(table), block_size=bs, actual_seq_lengths=kv_lens,
                num_heads=Nq, num_key_value_heads=Nkv, scale_value=0.25, input_layout="BNSD")
    ref, _ = ref_infer(q, k, v, scale=0.25, kv_lens=kv_lens)
    S.close(out, ref, torch.bfloat16)


def test_fia_routes_and_lse():
    B, Nq, Nkv, D = 2, 4, 2, 16
    # S == 1 -> IFA path: same numbers as npu_incre_flash_attention; lse = logsumexp of the scaled scores
    q, k, v = _data(B, Nq, Nkv, 1, 10, D, torch.float16)
    out, lse = fia()(*S.to_dev(q, k, v), actual_seq_lengths_kv=[10, 6], num_heads=Nq, num_key_value_heads=Nkv,
                     scale=0.25, input_layout="BNSD", softmax_lse_flag=True)
    out_i = ifa()(*S.to_dev(q, k, v), actual_seq_lengths=[10, 6], num_heads=Nq, num_key_value_heads=Nkv,
                  scale_value=0.25, input_layout="BNSD")
    torch.testing.assert_close(out, out_i)
    ref, ref_lse = ref_infer(q, k, v, scale=0.25, kv_lens=[10, 6])
    S.close(out, ref, torch.float16)
    assert lse.shape == (B, Nq, 1, 1) and lse.dtype == torch.float32
    torch.testing.assert_close(lse[..., 0].cpu(), ref_lse, atol=2e-3, rtol=2e-3)
    # S > 1 -> PFA path (note FIA's next_tokens default is INT_MAX, PFA's is 0)
    q, k, v = _data(B, Nq, Nkv, 6, 6, D, torch.float16, seed=3)
    m = S.to_dev(S.compressed_mask())
    out, lse = fia()(*S.to_dev(q, k, v), atten_mask=m, num_heads=Nq, num_key_value_heads=Nkv, scale=0.25,
                     input_layout="BNSD", sparse_mode=3, inner_precise=1)
    out_p = pfa()(*S.to_dev(q, k, v), atten_mask=m, num_heads=Nq, num_key_value_heads=Nkv, scale_value=0.25,
                  input_layout="BNSD", sparse_mode=3)
    torch.testing.assert_close(out, out_p)  # the high-performance mode is the prompt kernel's: QK^T kept in fp16
    precise = fia()(*S.to_dev(q, k, v), atten_mask=m, num_heads=Nq, num_key_value_heads=Nkv, scale=0.25,
                    input_layout="BNSD", sparse_mode=3)[0]
    assert not torch.equal(precise, out_p)
    assert lse.shape == (1,) and lse.dtype == torch.float32 and float(lse.cpu()[0]) == 0.0
    user = torch.zeros(1, 1, 6, 6, dtype=torch.bool)
    user[..., 5] = True
    out_f = fia()(*S.to_dev(q, k, v), atten_mask=S.to_dev(user), num_heads=Nq, num_key_value_heads=Nkv,
                  scale=0.25, input_layout="BNSD")[0]
    ref_f, _ = ref_infer(q, k, v, scale=0.25, mode=0, user=user, pre=INT_MAX, nxt=INT_MAX)
    S.close(out_f, ref_f, torch.float16)


def test_fia_prefill_paged_kv():
    """FIA Q_S > 1 with a paged KV cache (block_size must be a multiple of 128 in [128, 512])."""
    B, Nq, Nkv, D, bs = 2, 2, 1, 16, 128
    kv_lens = [130, 100]
    g = torch.Generator().manual_seed(4)
    q = torch.randn(B, Nq, 4, D, generator=g).half()
    k = torch.randn(B, Nkv, 256, D, generator=g).half()
    v = torch.randn(B, Nkv, 256, D, generator=g).half()
    table = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)  # block 3 is unused (batch 1 needs one block)
    kc = torch.zeros(4, bs, Nkv * D).half()
    vc = torch.zeros(4, bs, Nkv * D).half()
    for b in range(B):
        for j in range(2):
            kc[table[b, j]] = k[b, :, j * bs:(j + 1) * bs].transpose(0, 1).reshape(bs, -1)
            vc[table[b, j]] = v[b, :, j * bs:(j + 1) * bs].transpose(0, 1).reshape(bs, -1)
    out, _ = fia()(*S.to_dev(q, kc, vc), block_table=S.to_dev(table), block_size=bs, actual_seq_lengths_kv=kv_lens,
                   num_heads=Nq, num_key_value_heads=Nkv, scale=0.25, input_layout="BNSD")
    ref, _ = ref_infer(q, k, v, scale=0.25, kv_lens=kv_lens)
    S.close(out, ref, torch.float16)
    with pytest.raises(RuntimeError, match="multiple of 128"):
        fia()(*S.to_dev(q, kc, vc), block_table=S.to_dev(table), block_size=64, actual_seq_lengths_kv=kv_lens,
              num_heads=Nq, num_key_value_heads=Nkv, input_layout="BNSD")


def test_fia_tnd():
    qlens, kvlens = [3, 5], [4, 5]
    g = torch.Generator().manual_seed(1)
    q = torch.randn(8, 2, 192, generator=g).bfloat16()
    k = torch.randn(9, 2, 192, generator=g).bfloat16()
    v = torch.randn(9, 2, 128, generator=g).bfloat16()
    out, lse = fia()(*S.to_dev(q, k, v), atten_mask=S.to_dev(S.compressed_mask()), actual_seq_lengths=[3, 8],
                     actual_seq_lengths_kv=[4, 9], num_heads=2, num_key_value_heads=2, scale=0.1, input_layout="TND",
                     sparse_mode=3, softmax_lse_flag=True)
    assert out.shape == (8, 2, 128) and lse.shape == (8, 2, 1)
    q0 = k0 = 0
    for a, c in zip(qlens, kvlens, strict=True):
        r, rl = ref_infer(q[q0:q0 + a].transpose(0, 1)[None], k[k0:k0 + c].transpose(0, 1)[None],
                          v[k0:k0 + c].transpose(0, 1)[None], scale=0.1, mode=3)
        S.close(out[q0:q0 + a].transpose(0, 1)[None], r, torch.bfloat16)
        torch.testing.assert_close(lse[q0:q0 + a, :, 0].t()[None].cpu(), rl, atol=2e-2, rtol=2e-2)
        q0, k0 = q0 + a, k0 + c
    with pytest.raises(RuntimeError, match="192"):
        fia()(*S.to_dev(q[..., :64], k[..., :64], v[..., :64]), actual_seq_lengths=[3, 8],
              actual_seq_lengths_kv=[4, 9], num_heads=2, input_layout="TND")


# ------------------------------------------------------------------------------------------------- rejections

def test_reject_cpu_tensors():
    q, k, v = _data(1, 2, 2, 4, 4, 16, torch.float16)
    for fn, kw in ((IA.npu_prompt_flash_attention, dict(num_heads=2, input_layout="BNSD")),
                   (IA.npu_incre_flash_attention, dict(num_heads=2, input_layout="BNSD")),
                   (IA.npu_fused_infer_attention_score, dict(num_heads=2, input_layout="BNSD"))):
        with pytest.raises(NotImplementedError, match="Could not run 'npu::npu_.*'CPU' backend"):
            fn(q, k, v, **kw)


def test_reject_dtypes_and_heads():
    q, k, v = _data(1, 4, 2, 4, 4, 16, torch.float32)
    with pytest.raises(RuntimeError, match="dtype must be one of \\[float16, bfloat16\\]"):
        pfa()(*S.to_dev(q, k, v), num_heads=4, num_key_value_heads=2, input_layout="BNSD")
    with pytest.raises(RuntimeError, match="dtype must be one of"):
        fia()(*S.to_dev(q, k, v), num_heads=4, num_key_value_heads=2, input_layout="BNSD")
    qh, kh, vh = (t.half() for t in (q, k, v))
    with pytest.raises(RuntimeError, match="must be the same"):
        pfa()(*S.to_dev(qh, kh.bfloat16(), vh), num_heads=4, num_key_value_heads=2, input_layout="BNSD")
    with pytest.raises(RuntimeError, match="num_key_value_heads is invalid"):
        pfa()(*S.to_dev(qh, kh, vh), num_heads=4, num_key_value_heads=3, input_layout="BNSD")
    q2, k2, v2 = _data(1, 130, 2, 1, 4, 16, torch.float16)
    with pytest.raises(RuntimeError, match="must not exceed 64"):
        ifa()(*S.to_dev(q2, k2, v2), num_heads=130, num_key_value_heads=2, input_layout="BNSD")
    q3, k3, v3 = _data(1, 258, 258, 1, 4, 16, torch.float16)
    with pytest.raises(RuntimeError, match="N must be <= 256"):
        ifa()(*S.to_dev(q3, k3, v3), num_heads=258, input_layout="BNSD")
    q4, k4, v4 = _data(1, 2, 2, 4, 4, 520, torch.float16)
    with pytest.raises(RuntimeError, match="D must be in range \\[1, 512\\]"):
        pfa()(*S.to_dev(q4, k4, v4), num_heads=2, input_layout="BNSD")
    q5, k5, v5 = _data(1, 2, 2, 4, 4, 136, torch.float16)
    with pytest.raises(RuntimeError, match="not 32-byte aligned"):
        pfa()(*S.to_dev(q5, k5, v5), num_heads=2, input_layout="BNSD")


def test_reject_sparse_modes_and_masks():
    q, k, v = S.to_dev(*_data(1, 2, 2, 6, 6, 16, torch.float16))
    for mode in (5, 6, 7, 8):
        with pytest.raises(RuntimeError, match="not supported"):
            pfa()(q, k, v, num_heads=2, input_layout="BNSD", sparse_mode=mode)
    with pytest.raises(RuntimeError, match="only supports 0/1/2/3/4"):
        pfa()(q, k, v, num_heads=2, input_layout="BNSD", sparse_mode=15)
    with pytest.raises(NotEmulatedError, match="not emulated by ascend_shim's sim backend"):
        fia()(q, k, v, num_heads=2, input_layout="BNSD", sparse_mode=9)
    with pytest.raises(RuntimeError, match="SparseMode only supports 0/1/2/3/4/9"):
        fia()(q, k, v, num_heads=2, input_layout="BNSD", sparse_mode=5)
    for mode in (2, 3, 4):
        with pytest.raises(RuntimeError, match="requires atten_mask"):
            pfa()(q, k, v, num_heads=2, input_layout="BNSD", sparse_mode=mode)
        with pytest.raises(RuntimeError, match="2048"):
            fia()(q, k, v, atten_mask=S.to_dev(torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)), num_heads=2,
                  input_layout="BNSD", sparse_mode=mode)
    with pytest.raises(RuntimeError, match="atten_mask dtype must be bool, int8 or uint8"):
        pfa()(q, k, v, atten_mask=S.to_dev(torch.zeros(6, 6)), num_heads=2, input_layout="BNSD")
    with pytest.raises(RuntimeError, match="unsupported atten_mask shape"):
        pfa()(q, k, v, atten_mask=S.to_dev(torch.zeros(6, 5, dtype=torch.bool)), num_heads=2, input_layout="BNSD")


def test_reject_decode_arguments():
    q, k, v = _data(2, 2, 2, 1, 32, 16, torch.float16)
    qd, kd, vd = S.to_dev(q, k, v)
    table = S.to_dev(torch.zeros(2, 2, dtype=torch.int32))
    kc = S.to_dev(torch.zeros(4, 2, 24, 16, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="16-aligned"):
        ifa()(qd, kc, kc, block_table=table, block_size=24, actual_seq_lengths=[10, 10], num_heads=2,
              input_layout="BNSD")
    with pytest.raises(RuntimeError, match="should be int32"):
        ifa()(qd, kc, kc, block_table=table.long(), block_size=16, actual_seq_lengths=[10, 10], num_heads=2,
              input_layout="BNSD")
    with pytest.raises(RuntimeError, match="needs actual_seq_lengths"):
        ifa()(qd, kc, kc, block_table=table, block_size=16, num_heads=2, input_layout="BNSD")
    with pytest.raises(RuntimeError, match="should be 0 or 1"):
        ifa()(qd, kd, vd, num_heads=2, input_layout="BNSD", inner_precise=2)
    with pytest.raises(RuntimeError, match="range \\[1, 16\\]"):
        q17 = S.to_dev(torch.zeros(2, 2, 17, 16, dtype=torch.float16))
        ifa()(q17, kd, vd, num_heads=2, input_layout="BNSD")
    with pytest.raises(RuntimeError, match="must be in range \\[0, 32\\]"):
        ifa()(qd, kd, vd, actual_seq_lengths=[40, 3], num_heads=2, input_layout="BNSD")
    with pytest.raises(NotEmulatedError, match="not emulated"):
        ifa()(qd, kd.to(torch.int8), vd.to(torch.int8), num_heads=2, input_layout="BNSD")
    with pytest.raises(NotEmulatedError, match="not emulated"):
        ifa()(qd, kd, vd, antiquant_scale=S.to_dev(torch.ones(2, 2, 1, 16, dtype=torch.float16)), num_heads=2,
              input_layout="BNSD")


def test_per_batch_lengths_broadcast_and_truncation():
    q, k, v = _data(3, 2, 2, 1, 8, 16, torch.float16)
    a = ifa()(*S.to_dev(q, k, v), actual_seq_lengths=[5], num_heads=2, input_layout="BNSD")
    b = ifa()(*S.to_dev(q, k, v), actual_seq_lengths=[5, 5, 5, 1], num_heads=2, input_layout="BNSD")
    torch.testing.assert_close(a, b)
    with pytest.raises(RuntimeError, match="length must be 1 or >= batch size"):
        ifa()(*S.to_dev(q, k, v), actual_seq_lengths=[5, 5], num_heads=2, input_layout="BNSD")


def test_signatures_keyword_only():
    import inspect

    for fn in (IA.npu_prompt_flash_attention, IA.npu_incre_flash_attention, IA.npu_fused_infer_attention_score):
        ps = list(inspect.signature(fn).parameters.values())
        assert [p.name for p in ps[:3]] == ["query", "key", "value"]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in ps[3:])
    sig = inspect.signature(IA.npu_prompt_flash_attention).parameters
    assert sig["scale_value"].default == 1.0 and sig["next_tokens"].default == 0
    assert sig["pre_tokens"].default == INT_MAX and sig["input_layout"].default == "BSH"
    sig = inspect.signature(IA.npu_fused_infer_attention_score).parameters
    assert sig["scale"].default == 1.0 and sig["next_tokens"].default == INT_MAX
    assert sig["softmax_lse_flag"].default is False
    assert inspect.signature(IA.npu_incre_flash_attention).parameters["inner_precise"].default == 1


def test_pfa_fp16_keeps_qk_in_fp16_before_the_scale_as_huaweis_test_of_it_expects():
    """Huawei's multi-device test compares fp16 PFA (scale 128) with an fp16 matmul, the scale, an fp32 softmax: the
    large scale makes the rounding of QK^T visible (0.08 in the output if the scores stayed in fp32)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 128, dtype=torch.float16) for _ in range(3))
    weights = torch.matmul(q, k.transpose(2, 3)) / 0.0078125
    weights = torch.max(weights, torch.full((1, 1), torch.finfo(weights.dtype).min))
    ref = torch.matmul(torch.softmax(weights, dim=-1, dtype=torch.float32).to(torch.float16), v)
    out = pfa()(*S.to_dev(q, k, v), num_heads=2, input_layout="BNSD", scale_value=128.0, pre_tokens=65535,
                next_tokens=65535, sparse_mode=0)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-3, atol=1e-3)
