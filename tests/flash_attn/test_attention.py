"""FA2 training API (flash_attn_func / varlen / packed / private) against the independent reference, on npu."""
import inspect
import itertools

import pytest
import torch

from .conftest import assert_close_fa, fallbacks, ref_attention

DT = {"fp16": torch.float16, "bf16": torch.bfloat16}
# (Sq, Sk, Hq, Hk, causal, window): seqlen_q != seqlen_k both ways, windows, GQA and MQA
CASES = [
    (9, 9, 4, 4, False, (-1, -1)),
    (9, 9, 4, 2, True, (-1, -1)),
    (5, 12, 4, 1, True, (-1, -1)),
    (12, 5, 4, 2, True, (-1, -1)),
    (10, 13, 2, 2, False, (3, 2)),
    (11, 11, 4, 2, True, (4, 0)),
]


def _inputs(B, Sq, Sk, Hq, Hk, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    return mk(B, Sq, Hq, D), mk(B, Sk, Hk, D), mk(B, Sk, Hk, D), mk(B, Sq, Hq, D)


def _fwd_bwd(fn, q, k, v, dout):
    leaves = [t.npu().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    out.backward(dout.npu())
    return out, [t.grad for t in leaves]


def _ref_fwd_bwd(q, k, v, dout, upcast, **kw):
    leaves = [(t.float() if upcast else t).clone().requires_grad_() for t in (q, k, v)]
    out, _ = ref_attention(*leaves, upcast=upcast, **kw)
    out.backward(dout.to(out.dtype))
    return out, [t.grad for t in leaves]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"q{c[0]}k{c[1]}h{c[2]}-{c[3]}{'c' if c[4] else ''}w{c[5]}")
def test_flash_attn_func_matches_reference(fa, dtype, case):
    Sq, Sk, Hq, Hk, causal, window = case
    q, k, v, dout = _inputs(2, Sq, Sk, Hq, Hk, 32, DT[dtype])
    out, grads = _fwd_bwd(lambda a, b, c: fa.flash_attn_func(a, b, c, causal=causal, window_size=window),
                          q, k, v, dout)
    ref32, g32 = _ref_fwd_bwd(q, k, v, dout, True, causal=causal, window=window)
    reflp, glp = _ref_fwd_bwd(q, k, v, dout, False, causal=causal, window=window)
    assert out.shape == q.shape and out.dtype == q.dtype and out.device.type == "npu"
    assert_close_fa(out, ref32, reflp, "out")
    for name, g, r32, rlp in zip(("dq", "dk", "dv"), grads, g32, glp, strict=True):
        assert_close_fa(g, r32, rlp, name)


def test_softmax_lse_and_scale(fa):
    q, k, v, _ = _inputs(2, 6, 9, 4, 2, 32, torch.float16, seed=1)
    out, lse, s_dmask = fa.flash_attn_func(q.npu(), k.npu(), v.npu(), softmax_scale=0.3, causal=True,
                                           return_attn_probs=True)
    ref, ref_lse = ref_attention(q, k, v, causal=True, scale=0.3)
    assert s_dmask is None and lse.dtype == torch.float32 and lse.shape == (2, 4, 6)
    torch.testing.assert_close(lse.cpu(), ref_lse, atol=2e-3, rtol=1e-3)
    assert (out.float().cpu() - ref).abs().max() < 5e-3


def test_rows_with_no_key_are_zero_with_inf_lse(fa):
    q, k, v, _ = _inputs(1, 6, 3, 2, 2, 16, torch.float16, seed=2)
    out, lse, _ = fa.flash_attn_func(q.npu(), k.npu(), v.npu(), causal=True, return_attn_probs=True)
    assert torch.all(out[:, :3].cpu() == 0)  # Sq > Sk: the first Sq - Sk rows see nothing (bottom-right causal)
    assert torch.isinf(lse[:, :, :3].cpu()).all() and torch.isfinite(lse[:, :, 3:].cpu()).all()


def test_packed_variants(fa):
    q, k, v, dout = _inputs(2, 8, 8, 4, 4, 32, torch.bfloat16, seed=3)
    ref32, _ = ref_attention(q, k, v, causal=True)
    reflp, _ = ref_attention(q, k, v, causal=True, upcast=False)
    qkv = torch.stack([q, k, v], dim=2).npu().requires_grad_()
    out = fa.flash_attn_qkvpacked_func(qkv, causal=True)
    out.backward(dout.npu())
    assert_close_fa(out, ref32, reflp, "qkvpacked")
    assert qkv.grad.shape == qkv.shape and torch.isfinite(qkv.grad.float().cpu()).all()
    out = fa.flash_attn_kvpacked_func(q.npu(), torch.stack([k, v], dim=2).npu(), causal=True)
    assert_close_fa(out, ref32, reflp, "kvpacked")


def test_dropout_is_keep_prob_and_eval_is_exact(fa, monkeypatch):
    import torch_npu

    seen = []
    real = torch_npu.npu_fusion_attention
    monkeypatch.setattr(torch_npu, "npu_fusion_attention",
                        lambda *a, **kw: seen.append(kw["keep_prob"]) or real(*a, **kw))
    q, k, v, _ = _inputs(1, 8, 8, 2, 2, 16, torch.float16, seed=4)
    drop = fa.flash_attn_func(q.npu(), k.npu(), v.npu(), dropout_p=0.25)
    exact = fa.flash_attn_func(q.npu(), k.npu(), v.npu(), dropout_p=0.0)
    assert seen == [0.75, 1.0]
    assert not torch.equal(drop.cpu(), exact.cpu())
    assert_close_fa(exact, ref_attention(q, k, v)[0], ref_attention(q, k, v, upcast=False)[0])


def test_softcap_falls_back_exactly_and_is_reported(fa):
    q, k, v, dout = _inputs(2, 7, 7, 2, 1, 16, torch.float16, seed=5)
    out, grads = _fwd_bwd(lambda a, b, c: fa.flash_attn_func(a, b, c, causal=True, softcap=2.0), q, k, v, dout)
    ref32, g32 = _ref_fwd_bwd(q, k, v, dout, True, causal=True, softcap=2.0)
    reflp, glp = _ref_fwd_bwd(q, k, v, dout, False, causal=True, softcap=2.0)
    assert_close_fa(out, ref32, reflp, "softcap out")
    for g, r32, rlp in zip(grads, g32, glp, strict=True):
        assert_close_fa(g, r32, rlp, "softcap grad")
    assert any("softcap" in e["detail"] for e in fallbacks("flash_attn_func"))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_alibi(fa, dtype):
    q, k, v, dout = _inputs(2, 6, 10, 4, 2, 32, DT[dtype], seed=6)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    out, grads = _fwd_bwd(lambda a, b, c: fa.flash_attn_func(a, b, c, causal=True, alibi_slopes=slopes.npu()),
                          q, k, v, dout)
    ref32, g32 = _ref_fwd_bwd(q, k, v, dout, True, causal=True, alibi=slopes)
    reflp, glp = _ref_fwd_bwd(q, k, v, dout, False, causal=True, alibi=slopes)
    assert_close_fa(out, ref32, reflp, "alibi out", atol=3e-3)
    for g, r32, rlp in zip(grads, g32, glp, strict=True):
        assert_close_fa(g, r32, rlp, "alibi grad", atol=3e-3)


def _varlen_data(lens_q, lens_k, Hq, Hk, D, dtype, seed=7):
    g = torch.Generator().manual_seed(seed)
    tq, tk = sum(lens_q), sum(lens_k)
    mk = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    cu = lambda ls: torch.tensor([0] + list(torch.tensor(ls).cumsum(0)), dtype=torch.int32)  # noqa: E731
    return mk(tq, Hq, D), mk(tk, Hk, D), mk(tk, Hk, D), mk(tq, Hq, D), cu(lens_q), cu(lens_k)


def _varlen_ref(q, k, v, dout, cq, ck, upcast, **kw):
    outs, grads = [], [torch.zeros_like(t, dtype=torch.float32) for t in (q, k, v)]
    for b in range(len(cq) - 1):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        o, g = _ref_fwd_bwd(q[qs][None], k[ks][None], v[ks][None], dout[qs][None], upcast, **kw)
        outs.append(o[0])
        for acc, part, s in zip(grads, g, (qs, ks, ks), strict=True):
            acc[s] = part[0].float()
    return torch.cat(outs), grads


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (2, 3)), (True, (3, 0))])
def test_varlen_uneven_lengths(fa, dtype, causal, window):
    lens_q, lens_k = [5, 1, 9, 3], [7, 4, 9, 6]  # seqlen_q <= seqlen_k per sequence, uneven
    q, k, v, dout, cq, ck = _varlen_data(lens_q, lens_k, 4, 2, 32, DT[dtype])
    leaves = [t.npu().requires_grad_() for t in (q, k, v)]
    out = fa.flash_attn_varlen_func(*leaves, cq.npu(), ck.npu(), max(lens_q), max(lens_k), causal=causal,
                                    window_size=window)
    out.backward(dout.npu())
    cql, ckl = cq.tolist(), ck.tolist()
    ref32, g32 = _varlen_ref(q, k, v, dout, cql, ckl, True, causal=causal, window=window)
    reflp, glp = _varlen_ref(q, k, v, dout, cql, ckl, False, causal=causal, window=window)
    assert_close_fa(out, ref32, reflp, "varlen out")
    for name, t, r32, rlp in zip(("dq", "dk", "dv"), leaves, g32, glp, strict=True):
        assert_close_fa(t.grad, r32, rlp, name)


def test_varlen_causal_with_longer_queries_falls_back(fa):
    lens_q, lens_k = [6, 2], [3, 5]  # sequence 0 has seqlen_q > seqlen_k: the op rejects it in TND
    q, k, v, dout, cq, ck = _varlen_data(lens_q, lens_k, 2, 2, 16, torch.float16, seed=8)
    out, lse, _ = fa.flash_attn_varlen_func(q.npu(), k.npu(), v.npu(), cq.npu(), ck.npu(), 6, 5, causal=True,
                                            return_attn_probs=True)
    ref32, _ = _varlen_ref(q, k, v, dout, cq.tolist(), ck.tolist(), True, causal=True)
    reflp, _ = _varlen_ref(q, k, v, dout, cq.tolist(), ck.tolist(), False, causal=True)
    assert_close_fa(out, ref32, reflp)
    assert lse.shape == (2, 8) and torch.isinf(lse[:, :3].cpu()).all()
    assert fallbacks("flash_attn_varlen_func")


def test_varlen_packed_and_lse(fa):
    lens = [4, 7, 2]
    q, k, v, dout, cu, _ = _varlen_data(lens, lens, 2, 2, 16, torch.bfloat16, seed=9)
    qkv = torch.stack([q, k, v], dim=1).npu()
    out, lse, _ = fa.flash_attn_varlen_qkvpacked_func(qkv, cu.npu(), 7, causal=True, return_attn_probs=True)
    ref_lse = torch.cat([ref_attention(q[a:b][None], k[a:b][None], v[a:b][None], causal=True)[1][0]
                         for a, b in itertools.pairwise(cu.tolist())], dim=1)
    torch.testing.assert_close(lse.cpu(), ref_lse, atol=2e-3, rtol=1e-3)
    out2 = fa.flash_attn_varlen_kvpacked_func(q.npu(), torch.stack([k, v], 1).npu(), cu.npu(), cu.npu(), 7, 7,
                                              causal=True)
    torch.testing.assert_close(out.cpu(), out2.cpu())


UPSTREAM_PRIVATE = {  # flash-attention 2.8.4 (0251105), parameter names in order and defaults
    "_flash_attn_forward": ("q k v dropout_p softmax_scale causal window_size_left window_size_right softcap "
                            "alibi_slopes return_softmax", {}),
    "_flash_attn_varlen_forward": ("q k v cu_seqlens_q cu_seqlens_k max_seqlen_q max_seqlen_k dropout_p "
                                   "softmax_scale causal window_size_left window_size_right softcap alibi_slopes "
                                   "return_softmax block_table leftpad_k seqused_k zero_tensors num_splits",
                                   {"window_size_left": -1, "window_size_right": -1, "softcap": 0.0,
                                    "alibi_slopes": None, "return_softmax": False, "block_table": None,
                                    "zero_tensors": False, "num_splits": 0}),
    "_flash_attn_backward": ("dout q k v out softmax_lse dq dk dv dropout_p softmax_scale causal window_size_left "
                             "window_size_right softcap alibi_slopes deterministic rng_state", {"rng_state": None}),
    "_flash_attn_varlen_backward": ("dout q k v out softmax_lse dq dk dv cu_seqlens_q cu_seqlens_k max_seqlen_q "
                                    "max_seqlen_k dropout_p softmax_scale causal window_size_left window_size_right "
                                    "softcap alibi_slopes deterministic rng_state zero_tensors",
                                    {"rng_state": None, "zero_tensors": False}),
}


def test_private_functions_keep_upstream_signatures(fa):
    from flash_attn import flash_attn_interface as fai

    for name, (params, defaults) in UPSTREAM_PRIVATE.items():
        sig = inspect.signature(getattr(fai, name))
        assert list(sig.parameters) == params.split(), name
        for p, d in defaults.items():
            assert sig.parameters[p].default == d, (name, p)


@pytest.mark.parametrize("causal", [False, True])
def test_private_varlen_forward_backward(fa, causal):
    from flash_attn.flash_attn_interface import _flash_attn_varlen_backward, _flash_attn_varlen_forward

    lens_q, lens_k = [3, 6, 2], [5, 6, 4]
    q, k, v, dout, cq, ck = _varlen_data(lens_q, lens_k, 4, 2, 32, torch.float16, seed=10)
    qn, kn, vn = q.npu(), k.npu(), v.npu()
    out, lse, s_dmask, rng_state = _flash_attn_varlen_forward(qn, kn, vn, cq.npu(), ck.npu(), 6, 6, 0.0,
                                                              32 ** -0.5, causal)
    dq, dk, dv = torch.empty_like(qn), torch.empty_like(kn), torch.empty_like(vn)
    softmax_d = _flash_attn_varlen_backward(dout.npu(), qn, kn, vn, out, lse, dq, dk, dv, cq.npu(), ck.npu(), 6, 6,
                                            0.0, 32 ** -0.5, causal, -1, -1, 0.0, None, False, rng_state)
    ref32, g32 = _varlen_ref(q, k, v, dout, cq.tolist(), ck.tolist(), True, causal=causal)
    reflp, glp = _varlen_ref(q, k, v, dout, cq.tolist(), ck.tolist(), False, causal=causal)
    assert s_dmask is None and lse.shape == (4, 11) and softmax_d.shape == (4, 11)
    assert_close_fa(out, ref32, reflp)
    for g, r32, rlp in zip((dq, dk, dv), g32, glp, strict=True):  # written in place
        assert_close_fa(g, r32, rlp)


def test_private_dense_forward_backward(fa):
    from flash_attn.flash_attn_interface import _flash_attn_backward, _flash_attn_forward

    q, k, v, dout = _inputs(2, 5, 8, 4, 2, 32, torch.bfloat16, seed=11)
    qn, kn, vn = q.npu(), k.npu(), v.npu()
    out, lse, _, rng = _flash_attn_forward(qn, kn, vn, 0.0, 0.2, True, -1, -1, 0.0, None, False)
    dq, dk, dv = torch.empty_like(qn), torch.empty_like(kn), torch.empty_like(vn)
    _flash_attn_backward(dout.npu(), qn, kn, vn, out, lse, dq, dk, dv, 0.0, 0.2, True, -1, -1, 0.0, None, False, rng)
    ref32, g32 = _ref_fwd_bwd(q, k, v, dout, True, causal=True, scale=0.2)
    reflp, glp = _ref_fwd_bwd(q, k, v, dout, False, causal=True, scale=0.2)
    assert_close_fa(out, ref32, reflp)
    for g, r32, rlp in zip((dq, dk, dv), g32, glp, strict=True):
        assert_close_fa(g, r32, rlp)


def test_fp32_and_cpu_inputs_are_rejected_like_flash_attn(fa):
    q = torch.randn(1, 4, 2, 16)
    with pytest.raises(RuntimeError, match="fp16 and bf16"):
        fa.flash_attn_func(q.npu(), q.npu(), q.npu())
    with pytest.raises(RuntimeError, match="npu"):
        fa.flash_attn_func(q.half(), q.half(), q.half())
