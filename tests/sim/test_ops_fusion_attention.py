"""npu_fusion_attention / npu_fusion_attention_grad against an independent matmul+softmax reference.

Forward outputs, softmax statistics and dq/dk/dv/dpse (autograd of the op vs autograd of the reference) over all
layouts, sparse modes 0-4, bands, GQA/MQA, varlen with uneven lengths and fp32/fp16/bf16; dropout reproduced from
(seed, offset); and every documented rejection.
"""
import importlib.util
from pathlib import Path

import pytest
import torch

_spec = importlib.util.spec_from_file_location("_ops_support", Path(__file__).with_name("_ops_support.py"))
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)

from ascend_shim.sim import counters  # noqa: E402
from ascend_shim.sim.ops import NotEmulatedError  # noqa: E402
from ascend_shim.sim.ops import fusion_attention as FA  # noqa: E402

FLT_MAX = 3.4028234663852886e38


def fa():
    return S.op("npu_fusion_attention", "fusion_attention")


def fa_grad():
    return S.op("npu_fusion_attention_grad", "fusion_attention")


def _inputs(B, Nq, Nkv, Sq, Skv, D, Dv, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Nq, Sq, D, generator=g).to(dtype)
    k = torch.randn(B, Nkv, Skv, D, generator=g).to(dtype)
    v = torch.randn(B, Nkv, Skv, Dv, generator=g).to(dtype)
    return q, k, v


def _run_and_compare(layout, dtype, *, Nq=4, Nkv=2, Sq=7, Skv=9, D=16, Dv=16, B=2, mode=0, mask_kind=None,
                     pre=2147483647, nxt=2147483647, pse_shape=None, inner_precise=0, seed=0):
    """Run the op (fwd+bwd) and the reference on the same data, compare out, stats and grads."""
    q, k, v = _inputs(B, Nq, Nkv, Sq, Skv, D, Dv, dtype, seed)
    scale = S.default_scale(D)
    allowed = torch.ones(Sq, Skv, dtype=torch.bool)
    atten_mask = None
    if mask_kind == "compressed":
        atten_mask = S.compressed_mask()
        allowed = S.allowed_matrix(mode, Sq, Skv, pre, nxt)
    elif mask_kind in ("SS", "B1SS", "BNSS", "11SS"):
        gen = torch.Generator().manual_seed(seed + 1)
        user = torch.rand(B, Nq, Sq, Skv, generator=gen) < 0.3  # True = masked
        user[..., 0] = False  # keep every row non-empty
        if mask_kind == "SS":
            user = user[0, 0]
        elif mask_kind == "11SS":
            user = user[:1, :1]
        elif mask_kind == "B1SS":
            user = user[:, :1]
        atten_mask = user
        band = S.allowed_matrix(0, Sq, Skv, pre, nxt) if mode == 0 else torch.ones(Sq, Skv, dtype=torch.bool)
        allowed = (~user) & band
    pse = None
    if pse_shape is not None:
        pse = (torch.randn(*pse_shape, generator=torch.Generator().manual_seed(seed + 2)) * 0.5).to(dtype)

    # reference (fp32 math on the same low-precision inputs)
    qr, kr, vr = (t.detach().float().clone().requires_grad_() for t in (q, k, v))
    pr = pse.detach().float().clone().requires_grad_() if pse is not None else None
    out_r, m_r, l_r = S.ref_attention_bnsd(qr, kr, vr, allowed, scale, pse=pr)
    gen = torch.Generator().manual_seed(seed + 3)
    dy_bnsd = torch.randn(out_r.shape, generator=gen).to(dtype)
    (out_r * dy_bnsd.float()).sum().backward()

    # op on the layout
    ql, kl, vl = (S.make_layout(t, layout) for t in (q, k, v))
    ql, kl, vl = S.to_dev(ql, kl, vl)
    ql.requires_grad_(), kl.requires_grad_(), vl.requires_grad_()
    pse_d = S.to_dev(pse).requires_grad_() if pse is not None else None
    mask_d = S.to_dev(atten_mask) if atten_mask is not None else None
    res = fa()(ql, kl, vl, Nq, layout, pse=pse_d, atten_mask=mask_d, scale=scale, pre_tockens=pre,
               next_tockens=nxt, sparse_mode=mode, inner_precise=inner_precise)
    assert len(res) == 7
    out, smax, ssum, sout, rseed, roff, numels = res
    assert out.dtype == dtype and out.device.type == S.device()
    assert smax.dtype == torch.float32 and smax.shape == (B, Nq, Sq, 8)
    assert ssum.shape == (B, Nq, Sq, 8) and sout.numel() == 0
    assert numels == B * Nq * Sq * Skv and (rseed, roff) == (0, 0)
    out_bnsd = S.split_heads(out, layout, Nq)
    S.close(out_bnsd, out_r, dtype)
    # statistics: max of the masked scaled scores and the exp-sum, replicated over the last dim of 8
    assert torch.equal(smax[..., :1].expand_as(smax), smax)
    S.close(smax[..., 0], m_r, torch.float32 if dtype == torch.float32 else dtype, scale=10)
    torch.testing.assert_close(ssum[..., 0].cpu(), l_r.detach(), rtol=2e-2 if dtype != torch.float32 else 1e-5,
                               atol=2e-2 if dtype != torch.float32 else 1e-5)
    # backward
    dy = S.to_dev(S.make_layout(dy_bnsd, layout))
    out.backward(dy)
    S.close(S.split_heads(ql.grad, layout, Nq), qr.grad, dtype, scale=2)
    S.close(S.split_heads(kl.grad, layout, Nkv), kr.grad, dtype, scale=2)
    S.close(S.split_heads(vl.grad, layout, Nkv), vr.grad, dtype, scale=2)
    if pse is not None:
        S.close(pse_d.grad, pr.grad, dtype, scale=2)
    # the explicit grad op gives the same gradients as autograd
    g = fa_grad()(ql.detach(), kl.detach(), vl.detach(), dy, Nq, layout, pse=pse_d.detach() if pse is not None
                  else None, atten_mask=mask_d, softmax_max=smax, softmax_sum=ssum, attention_in=out.detach(),
                  scale_value=scale, pre_tockens=pre, next_tockens=nxt, sparse_mode=mode,
                  inner_precise=inner_precise)
    assert len(g) == 5
    torch.testing.assert_close(g[0], ql.grad)
    torch.testing.assert_close(g[1], kl.grad)
    torch.testing.assert_close(g[2], vl.grad)
    if pse is None:
        assert g[3] is None
    else:
        torch.testing.assert_close(g[3], pse_d.grad)
    assert g[4].numel() == 0 and g[4].dtype == torch.float32


DTYPES = [torch.float32, torch.float16, torch.bfloat16]
LAYOUTS = ["BSH", "SBH", "BSND", "BNSD"]

# (mode, mask_kind, pre, nxt, Sq, Skv) -- every sparse mode, several bands, Sq != Skv both ways
CASES = [
    ("nomask", None, 2147483647, 2147483647, 7, 9),
    ("m0_mask", "SS", 2147483647, 2147483647, 7, 9),
    ("m0_band", "BNSS", 3, 1, 9, 9),
    ("m0_causal_tokens", "B1SS", 65536, 0, 8, 8),
    ("m0_neg_next", "11SS", 6, -1, 8, 10),
    ("m1", "B1SS", 0, 0, 7, 9),
    ("m2", "compressed", 0, 0, 9, 7),
    ("m3", "compressed", 0, 0, 7, 9),
    ("m4", "compressed", 3, 2, 8, 11),
]
_MODE = {"nomask": 0, "m0_mask": 0, "m0_band": 0, "m0_causal_tokens": 0, "m0_neg_next": 0, "m1": 1, "m2": 2,
         "m3": 3, "m4": 4}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fa_matches_reference(layout, dtype, case):
    name, mask_kind, pre, nxt, sq, skv = case
    _run_and_compare(layout, dtype, mode=_MODE[name], mask_kind=mask_kind, pre=pre, nxt=nxt, Sq=sq, Skv=skv)


@pytest.mark.parametrize("nq,nkv", [(4, 4), (4, 1), (6, 2), (8, 4)])
def test_fa_gqa_mqa(nq, nkv):
    _run_and_compare("BSND", torch.float32, Nq=nq, Nkv=nkv, mode=3, mask_kind="compressed")


def test_fa_dv_smaller_than_dk():
    _run_and_compare("BNSD", torch.float32, D=16, Dv=8, mode=2, mask_kind="compressed", Sq=8, Skv=8)
    _run_and_compare("BSH", torch.float16, D=16, Dv=8)


@pytest.mark.parametrize("pse_shape", [(2, 4, 7, 9), (1, 4, 7, 9), (2, 4, 1, 9), (1, 4, 1, 9)])
def test_fa_pse_added_before_scale(pse_shape):
    _run_and_compare("BSND", torch.float32, pse_shape=pse_shape, mode=0)
    _run_and_compare("BNSD", torch.float16, pse_shape=pse_shape, mode=3, mask_kind="compressed")


def test_fa_pse_formula_is_scale_times_sum():
    """Softmax(scale*(pse + QK^T)) -- a pse added after scaling must NOT match."""
    q, k, v = _inputs(1, 2, 2, 5, 5, 8, 8, torch.float32)
    pse = torch.randn(1, 2, 5, 5) * 3
    out = fa()(*S.to_dev(q, k, v), 2, "BNSD", pse=S.to_dev(pse), scale=0.25)[0].cpu()
    before, _, _ = S.ref_attention_bnsd(q, k, v, torch.ones(5, 5, dtype=torch.bool), 0.25, pse=pse, pse_first=True)
    after, _, _ = S.ref_attention_bnsd(q, k, v, torch.ones(5, 5, dtype=torch.bool), 0.25, pse=pse, pse_first=False)
    torch.testing.assert_close(out, before)
    assert (out - after).abs().max() > 1e-2


def test_fa_scale_defaults_to_one():
    q, k, v = _inputs(1, 2, 2, 6, 6, 16, 16, torch.float32)
    out = fa()(*S.to_dev(q, k, v), 2, "BNSD")[0].cpu()
    ref1, _, _ = S.ref_attention_bnsd(q, k, v, torch.ones(6, 6, dtype=torch.bool), 1.0)
    refd, _, _ = S.ref_attention_bnsd(q, k, v, torch.ones(6, 6, dtype=torch.bool), 0.25)
    torch.testing.assert_close(out, ref1)
    assert (out - refd).abs().max() > 1e-2


@pytest.mark.parametrize("mode", [0, 1])
def test_fa_no_mask_is_full_attention_whatever_tokens_say(mode):
    """Documented: without atten_mask, sparse_mode/pre/next have no effect; next_tockens=0 alone is NOT causal."""
    q, k, v = _inputs(2, 2, 2, 6, 6, 8, 8, torch.float32)
    out = fa()(*S.to_dev(q, k, v), 2, "BNSD", scale=0.3, pre_tockens=65536, next_tockens=0, sparse_mode=mode)[0]
    full, _, _ = S.ref_attention_bnsd(q, k, v, torch.ones(6, 6, dtype=torch.bool), 0.3)
    causal, _, _ = S.ref_attention_bnsd(q, k, v, S.allowed_matrix(2, 6, 6), 0.3)
    torch.testing.assert_close(out.cpu(), full)
    assert (out.cpu() - causal).abs().max() > 1e-2


def test_fa_mode3_sq_gt_skv_invalid_rows_are_zero():
    """Mode 3 with Sq > Skv leaves the first Sq-Skv rows with nothing to attend: the hardware's (automatic)
    invalid-row correction outputs 0 there, softmax_max=-FLT_MAX, softmax_sum=FLT_MAX, and zero gradients."""
    Sq, Skv = 9, 5
    _run_and_compare("BSND", torch.float32, Sq=Sq, Skv=Skv, mode=3, mask_kind="compressed")
    q, k, v = (S.to_dev(t).requires_grad_() for t in _inputs(1, 2, 2, Sq, Skv, 8, 8, torch.float16))
    out, smax, ssum = fa()(q, k, v, 2, "BNSD", atten_mask=S.to_dev(S.compressed_mask()), sparse_mode=3,
                           scale=0.3)[:3]
    empty = Sq - Skv
    assert torch.count_nonzero(out[:, :, :empty].cpu()) == 0
    assert torch.count_nonzero(out[:, :, empty:].cpu()) > 0
    assert torch.all(smax[:, :, :empty].cpu() == -FLT_MAX) and torch.all(ssum[:, :, :empty].cpu() == FLT_MAX)
    out.float().sum().backward()
    assert torch.count_nonzero(q.grad[:, :, :empty].cpu()) == 0
    assert torch.isfinite(q.grad.float().cpu()).all() and torch.isfinite(k.grad.float().cpu()).all()


def test_fa_fully_masked_user_row_inner_precise():
    """A user mask that masks a whole row: inner_precise=2 (invalid-row correction) -> 0; the default (0) gives what
    the select-to-(-FLT_MAX)-then-softmax formula gives, the uniform average of V (documented as imprecise)."""
    q, k, v = _inputs(1, 1, 1, 4, 6, 8, 8, torch.float32)
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[2] = True
    out2 = fa()(*S.to_dev(q, k, v), 1, "BNSD", atten_mask=S.to_dev(mask), inner_precise=2)[0].cpu()
    out0 = fa()(*S.to_dev(q, k, v), 1, "BNSD", atten_mask=S.to_dev(mask), inner_precise=0)[0].cpu()
    assert torch.count_nonzero(out2[0, 0, 2]) == 0
    torch.testing.assert_close(out0[0, 0, 2], v[0, 0].mean(0))
    torch.testing.assert_close(out0[0, 0, [0, 1, 3]], out2[0, 0, [0, 1, 3]])


# ------------------------------------------------------------------------------------------------------ varlen

def _varlen_case(dtype, qlens, kvlens, mode, mask_kind=None, pre=2147483647, nxt=2147483647, Nq=4, Nkv=2, D=16,
                 softmax_layout=""):
    gen = torch.Generator().manual_seed(7)
    T, Tk = sum(qlens), sum(kvlens)
    q = torch.randn(T, Nq, D, generator=gen).to(dtype)
    k = torch.randn(Tk, Nkv, D, generator=gen).to(dtype)
    v = torch.randn(Tk, Nkv, D, generator=gen).to(dtype)
    dy = torch.randn(T, Nq, D, generator=gen).to(dtype)
    scale = S.default_scale(D)
    mq, mk = max(qlens), max(kvlens)
    user = None
    if mask_kind == "SS":
        user = torch.rand(mq, mk, generator=gen) < 0.3
        user[:, 0] = False
    mask = S.compressed_mask() if mask_kind == "compressed" else user
    cq = [sum(qlens[: i + 1]) for i in range(len(qlens))]
    ck = [sum(kvlens[: i + 1]) for i in range(len(kvlens))]

    qd, kd, vd = (S.to_dev(t).requires_grad_() for t in (q, k, v))
    out, smax, ssum, _, _, _, numels = fa()(qd, kd, vd, Nq, "TND", atten_mask=S.to_dev(mask) if mask is not None
                                            else None, scale=scale, sparse_mode=mode, pre_tockens=pre,
                                            next_tockens=nxt, actual_seq_qlen=cq, actual_seq_kvlen=ck,
                                            softmax_layout=softmax_layout)
    assert smax.shape == (T, Nq, 8)
    out.backward(S.to_dev(dy))
    stats = smax[..., 0].cpu() if softmax_layout == "TND" else smax.cpu().reshape(Nq, T, 8)[..., 0].t()
    q0 = k0 = 0
    for sq, skv in zip(qlens, kvlens, strict=True):
        qs, ks, vs = (t.float().clone().requires_grad_() for t in (q[q0:q0 + sq], k[k0:k0 + skv], v[k0:k0 + skv]))
        if mask_kind == "compressed":
            allowed = S.allowed_matrix(mode, sq, skv, pre, nxt)
        elif mask_kind == "SS":
            allowed = ~user[:sq, :skv] & (S.allowed_matrix(0, sq, skv, pre, nxt) if mode == 0 else True)
        else:
            allowed = torch.ones(sq, skv, dtype=torch.bool)
        o, m, _ = S.ref_attention_bnsd(qs.transpose(0, 1)[None], ks.transpose(0, 1)[None], vs.transpose(0, 1)[None],
                                       allowed, scale)
        (o * dy[q0:q0 + sq].float().transpose(0, 1)[None]).sum().backward()
        S.close(out[q0:q0 + sq].transpose(0, 1)[None], o, dtype)
        S.close(stats[q0:q0 + sq].t()[None], m, dtype, scale=10)
        S.close(qd.grad[q0:q0 + sq], qs.grad, dtype, scale=2)
        S.close(kd.grad[k0:k0 + skv], ks.grad, dtype, scale=2)
        S.close(vd.grad[k0:k0 + skv], vs.grad, dtype, scale=2)
        q0, k0 = q0 + sq, k0 + skv
    return numels


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("mode,mask_kind,pre,nxt", [
    (0, None, 2147483647, 2147483647), (0, "SS", 2147483647, 2147483647), (0, "SS", 3, 1), (1, "SS", 0, 0),
    (2, "compressed", 0, 0), (3, "compressed", 0, 0), (4, "compressed", 4, 1),
], ids=["nomask", "m0_mask", "m0_band", "m1", "m2", "m3", "m4"])
def test_fa_varlen_uneven(dtype, mode, mask_kind, pre, nxt):
    qlens, kvlens = [3, 7, 1, 5], [4, 7, 2, 6]
    numels = _varlen_case(dtype, qlens, kvlens, mode, mask_kind, pre, nxt)
    assert numels == 4 * sum(a * b for a, b in zip(qlens, kvlens, strict=True))


def test_fa_varlen_softmax_layout_tnd_and_gqa_mqa():
    _varlen_case(torch.float32, [5, 2, 6], [5, 2, 6], 3, "compressed", softmax_layout="TND")
    _varlen_case(torch.float32, [5, 2, 6], [5, 3, 6], 2, "compressed", Nq=4, Nkv=1)


@pytest.mark.parametrize("kind", ["bnss", "bn1s"])
def test_fa_varlen_pse_flattened(kind):
    """TND pse: the per-batch [N, Sq_i|1, Skv_i] blocks flattened in batch order (first dim N * sum(...))."""
    qlens, kvlens, N = [3, 5], [4, 6], 2
    g = torch.Generator().manual_seed(21)
    q = torch.randn(8, N, 8, generator=g)
    k = torch.randn(10, N, 8, generator=g)
    v = torch.randn(10, N, 8, generator=g)
    blocks = [torch.randn(N, a if kind == "bnss" else 1, b, generator=g) for a, b in zip(qlens, kvlens, strict=True)]
    pse = torch.cat([b.reshape(-1) for b in blocks])
    qd, kd, vd, pd = (S.to_dev(t).requires_grad_() for t in (q, k, v, pse))
    out = fa()(qd, kd, vd, N, "TND", pse=pd, scale=0.5, actual_seq_qlen=[3, 8], actual_seq_kvlen=[4, 10])[0]
    out.sum().backward()
    q0 = k0 = 0
    for i, (a, b) in enumerate(zip(qlens, kvlens, strict=True)):
        blk = blocks[i].clone().requires_grad_()
        o, _, _ = S.ref_attention_bnsd(q[q0:q0 + a].transpose(0, 1)[None], k[k0:k0 + b].transpose(0, 1)[None],
                                       v[k0:k0 + b].transpose(0, 1)[None], torch.ones(a, b, dtype=torch.bool), 0.5,
                                       pse=blk[None])
        o.sum().backward()
        torch.testing.assert_close(out[q0:q0 + a].transpose(0, 1)[None].detach().cpu(), o.detach())
        off = sum(x.numel() for x in blocks[:i])
        torch.testing.assert_close(pd.grad[off:off + blk.numel()].cpu().reshape(blk.shape), blk.grad)
        q0, k0 = q0 + a, k0 + b


def test_fa_varlen_trailing_zero_batches_are_skipped():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(9, 2, 8, generator=gen) for _ in range(3))
    full = fa()(*S.to_dev(q, k, v), 2, "TND", actual_seq_qlen=[2, 5, 9], actual_seq_kvlen=[2, 5, 9])[0]
    skip = fa()(*S.to_dev(q, k, v), 2, "TND", actual_seq_qlen=[2, 5, 0, 0], actual_seq_kvlen=[2, 5, 0, 0])[0]
    torch.testing.assert_close(skip[:5], full[:5])
    # the skipped rows are not computed; we return zeros there (uninitialised memory on hardware)
    assert torch.count_nonzero(skip[5:].cpu()) == 0


def test_fa_varlen_zero_length_batch():
    """A zero-length batch repeats the previous cumulative value ([2, 4, 4, 6])."""
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(6, 2, 8, generator=gen) for _ in range(3))
    a = fa()(*S.to_dev(q, k, v), 2, "TND", actual_seq_qlen=[2, 4, 4, 6], actual_seq_kvlen=[2, 4, 4, 6])[0].cpu()
    b = fa()(*S.to_dev(q, k, v), 2, "TND", actual_seq_qlen=[2, 4, 6], actual_seq_kvlen=[2, 4, 6])[0].cpu()
    torch.testing.assert_close(a, b)


# ----------------------------------------------------------------------------------------------------- dropout

def test_fa_dropout_mask_reproduced_by_grad_op():
    """keep_prob < 1: recover the dropout mask with V = I (out = P*Z/keep_prob), build an independent reference
    with that mask and a different V, and check that npu_fusion_attention_grad -- given only (seed, offset,
    numels) -- reproduces the reference gradients. Also: fwd autograd == grad op, and the statistics."""
    B, N, Sq, Skv, D = 2, 2, 8, 8, 8
    keep_prob = 0.7
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(B, N, Sq, D, generator=gen)
    k = torch.randn(B, N, Skv, D, generator=gen)
    eye = torch.eye(Skv).expand(B, N, Skv, Skv).contiguous()
    scale = 0.3
    out, smax, ssum, _, seed, offset, numels = fa()(*S.to_dev(q, k, eye), N, "BNSD", scale=scale,
                                                    keep_prob=keep_prob)
    assert numels == B * N * Sq * Skv
    dropped = out.cpu() * keep_prob  # = P * Z
    keep = dropped != 0
    frac = keep.float().mean().item()
    assert 0.55 < frac < 0.85, frac  # ~keep_prob of 256 Bernoulli draws
    p_ref, _, _ = S.ref_attention_bnsd(q, k, eye, torch.ones(Sq, Skv, dtype=torch.bool), scale)
    torch.testing.assert_close(dropped, p_ref * keep)

    v2 = torch.randn(B, N, Skv, D, generator=gen)
    dy = torch.randn(B, N, Sq, D, generator=gen)
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v2))
    o_ref, _, _ = S.ref_attention_bnsd(qr, kr, vr, torch.ones(Sq, Skv, dtype=torch.bool), scale, keep=keep,
                                       keep_prob=keep_prob)
    (o_ref * dy).sum().backward()
    g = fa_grad()(*S.to_dev(q, k, v2, dy), N, "BNSD", softmax_max=smax, softmax_sum=ssum,
                  attention_in=S.to_dev(o_ref.detach()), scale_value=scale, keep_prob=keep_prob, seed=seed,
                  offset=offset, numels=numels)
    torch.testing.assert_close(g[0].cpu(), qr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g[1].cpu(), kr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g[2].cpu(), vr.grad, atol=1e-5, rtol=1e-5)

    # autograd through the forward uses the same mask as the grad op
    qa, ka, va = (S.to_dev(t).requires_grad_() for t in (q, k, v2))
    res = fa()(qa, ka, va, N, "BNSD", scale=scale, keep_prob=keep_prob)
    res[0].backward(S.to_dev(dy))
    g2 = fa_grad()(*S.to_dev(q, k, v2, dy), N, "BNSD", softmax_max=res[1], softmax_sum=res[2],
                   attention_in=res[0].detach(), scale_value=scale, keep_prob=keep_prob, seed=res[4],
                   offset=res[5], numels=res[6])
    torch.testing.assert_close(g2[0], qa.grad)
    torch.testing.assert_close(g2[2], va.grad)
    assert (res[4], res[5]) != (seed, offset)  # a new offset per call, so a new mask


def test_fa_dropout_reproducible_after_reseed_and_varlen():
    q, k, v = (torch.randn(10, 2, 8) for _ in range(3))
    kw = dict(keep_prob=0.5, actual_seq_qlen=[4, 10], actual_seq_kvlen=[4, 10])
    torch.manual_seed(123)
    a = fa()(*S.to_dev(q, k, v), 2, "TND", **kw)
    torch.manual_seed(123)
    b = fa()(*S.to_dev(q, k, v), 2, "TND", **kw)
    assert (a[4], a[5]) == (b[4], b[5])
    torch.testing.assert_close(a[0], b[0])
    c = fa()(*S.to_dev(q, k, v), 2, "TND", **kw)
    assert c[5] != b[5] and not torch.equal(c[0].cpu(), b[0].cpu())
    assert a[6] == 2 * (4 * 4 + 6 * 6)


# ------------------------------------------------------------------------------------------------- rejections

def _qkv(layout="BNSD", dtype=torch.float16, B=1, N=2, S_=8, D=16, Nkv=None):
    q, k, v = _inputs(B, N, Nkv or N, S_, S_, D, D, dtype)
    return tuple(S.to_dev(S.make_layout(t, layout)) for t in (q, k, v))


def _raises(exc, match, *args, **kw):
    with pytest.raises(exc, match=match):
        fa()(*args, **kw)


def test_reject_cpu_tensors_in_public_op():
    q, k, v = (t.cpu() for t in _qkv())
    with pytest.raises(NotImplementedError, match="Could not run 'npu::npu_fusion_attention'.*'CPU' backend"):
        FA.npu_fusion_attention(q, k, v, 2, "BNSD")
    with pytest.raises(NotImplementedError, match="npu_fusion_attention_grad"):
        FA.npu_fusion_attention_grad(q, k, v, q, 2, "BNSD")


def test_reject_mixed_devices():
    q, k, v = _qkv()
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        FA.npu_fusion_attention(q, k.cpu(), v, 2, "BNSD")
    with pytest.raises(RuntimeError, match="same device.*atten_mask"):
        FA.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=S.compressed_mask(), sparse_mode=2)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
def test_reject_unsupported_dtype(dtype):
    q, k, v = (t.to(dtype) for t in _qkv(dtype=torch.float32))
    _raises(RuntimeError, "dtype must be one of \\[float16, bfloat16, float32\\]", q, k, v, 2, "BNSD")


def test_reject_mixed_dtypes():
    q, k, v = _qkv(dtype=torch.float16)
    _raises(RuntimeError, "must be the same", q, k.to(torch.bfloat16), v, 2, "BNSD")
    _raises(RuntimeError, "must be the same", q, k, v, 2, "BNSD", pse=S.to_dev(torch.zeros(1, 2, 8, 8)))


@pytest.mark.parametrize("mode", [2, 3, 4])
def test_reject_wrong_mask_for_compressed_modes(mode):
    q, k, v = _qkv()
    causal_ss = S.to_dev(torch.triu(torch.ones(8, 8, dtype=torch.bool), 1))
    _raises(RuntimeError, "2048", q, k, v, 2, "BNSD", atten_mask=causal_ss, sparse_mode=mode)
    _raises(RuntimeError, "2048", q, k, v, 2, "BNSD", atten_mask=S.to_dev(torch.ones(1, 1, 2048, 2048,
                                                                                      dtype=torch.bool)),
            sparse_mode=mode)
    # right shape, wrong contents (tril, the classic inverted-mask bug)
    _raises(RuntimeError, "other contents", q, k, v, 2, "BNSD",
            atten_mask=S.to_dev(torch.tril(torch.ones(2048, 2048, dtype=torch.bool))), sparse_mode=mode)


@pytest.mark.parametrize("mode", [2, 3, 4])
def test_reject_missing_mask_for_compressed_modes(mode):
    q, k, v = _qkv()
    _raises(RuntimeError, "needs atten_mask", q, k, v, 2, "BNSD", sparse_mode=mode)


@pytest.mark.parametrize("mode", [5, 6])
def test_sparse_mode_5_6_not_emulated(mode):
    q, k, v = _qkv()
    with pytest.raises(NotEmulatedError, match="not emulated by ascend_shim's sim backend"):
        fa()(q, k, v, 2, "BNSD", atten_mask=S.to_dev(torch.zeros(1, 1, 8, 8, dtype=torch.bool)), sparse_mode=mode)


@pytest.mark.parametrize("mode", [7, 8])
def test_sparse_mode_7_8(mode):
    q, k, v = _qkv()
    # not TND: out of the hardware's range, rejected as torch_npu does
    _raises(RuntimeError, "must be in range of \\[0,6\\]", q, k, v, 2, "BNSD", sparse_mode=mode)
    # TND: valid on hardware, not emulated
    t = S.to_dev(torch.randn(8, 2, 16))
    with pytest.raises(NotEmulatedError, match="not emulated by ascend_shim's sim backend"):
        fa()(t, t, t, 2, "TND", atten_mask=S.to_dev(S.compressed_mask()), sparse_mode=mode, actual_seq_qlen=[8],
             actual_seq_kvlen=[8])


def test_reject_sparse_mode_out_of_range():
    q, k, v = _qkv()
    _raises(RuntimeError, "range of \\[0,6\\]", q, k, v, 2, "BNSD", sparse_mode=9)
    t = S.to_dev(torch.randn(8, 2, 16))
    _raises(RuntimeError, "\\[0,5\\) or \\(5,8\\]", t, t, t, 2, "TND", sparse_mode=5, actual_seq_qlen=[8],
            actual_seq_kvlen=[8])


@pytest.mark.parametrize("nq,nkv", [(4, 3), (6, 4)])
def test_reject_bad_head_ratio(nq, nkv):
    q, k, v = _inputs(1, nq, nkv, 8, 8, 16, 16, torch.float16)
    _raises(RuntimeError, "multiple of n2Size", *S.to_dev(q, k, v), nq, "BNSD")
    _raises(RuntimeError, "multiple", *S.to_dev(*(S.make_layout(t, "BSH") for t in (q, k, v))), nq, "BSH")


def test_reject_head_limits_and_dims():
    q, k, v = _qkv()
    _raises(RuntimeError, "head_num must > 0", q, k, v, 0, "BNSD")
    _raises(RuntimeError, "head_num is \\[4\\]", q, k, v, 4, "BNSD")
    big = S.to_dev(torch.zeros(1, 257, 2, 8, dtype=torch.float16))
    _raises(RuntimeError, "Nq must be in range \\[1, 256\\]", big, big, big, 257, "BNSD")
    wide = S.to_dev(torch.zeros(1, 1, 2, 776, dtype=torch.float16))
    _raises(RuntimeError, "D must be in range \\[1, 768\\]", wide, wide, wide, 1, "BNSD")
    qq, kk, vv = _inputs(1, 2, 2, 4, 4, 8, 16, torch.float16)
    _raises(RuntimeError, "Dq == Dk >= Dv", *S.to_dev(qq, kk, vv), 2, "BNSD")
    _raises(RuntimeError, "3 or 4 dimensional", S.to_dev(torch.zeros(2, 2)), k, v, 2, "BNSD")
    _raises(RuntimeError, "input_layout should be BSH/SBH/BNSD/BSND/TND", q, k, v, 2, "NSD")
    _raises(RuntimeError, "Invalid layout", q, k, v, 2, "BSH")


def test_reject_misc_arguments():
    q, k, v = _qkv()
    _raises(RuntimeError, "keep_prob value must be in range of \\(0, 1\\]", q, k, v, 2, "BNSD", keep_prob=0.0)
    _raises(RuntimeError, "keep_prob", q, k, v, 2, "BNSD", keep_prob=1.5)
    _raises(RuntimeError, "padding_mask is not supported", q, k, v, 2, "BNSD", padding_mask=q)
    _raises(RuntimeError, "only support bool or uint8", q, k, v, 2, "BNSD",
            atten_mask=S.to_dev(torch.zeros(8, 8)))
    _raises(RuntimeError, "unsupported atten_mask shape", q, k, v, 2, "BNSD",
            atten_mask=S.to_dev(torch.zeros(1, 2, 8, 7, dtype=torch.bool)))
    _raises(RuntimeError, "unsupported pse shape", q, k, v, 2, "BNSD", pse=S.to_dev(torch.zeros(1, 1, 8, 8,
                                                                                                 dtype=torch.float16)))
    _raises(RuntimeError, "softmax_layout=TND only supported when input_layout_str=TND", q, k, v, 2, "BNSD",
            softmax_layout="TND")
    with pytest.raises(NotEmulatedError):
        fa()(q, k, v, 2, "BNSD", sink=S.to_dev(torch.zeros(2)))


def test_reject_band_without_valid_block():
    q, k, v = _qkv()
    m = S.to_dev(torch.zeros(8, 8, dtype=torch.bool))
    _raises(RuntimeError, "no valid data block", q, k, v, 2, "BNSD", atten_mask=m, pre_tockens=-1, next_tockens=-1)
    _raises(RuntimeError, "no valid data block", q, k, v, 2, "BNSD", atten_mask=S.to_dev(S.compressed_mask()),
            sparse_mode=4, pre_tockens=-3, next_tockens=-2)


def test_reject_varlen_arguments():
    t = S.to_dev(torch.randn(10, 2, 16, dtype=torch.float16))
    _raises(RuntimeError, "WITHOUT a leading 0", t, t, t, 2, "TND", actual_seq_qlen=[0, 4, 10],
            actual_seq_kvlen=[0, 4, 10])
    with pytest.raises(TypeError, match="must be tuple of ints, not Tensor"):
        fa()(t, t, t, 2, "TND", actual_seq_qlen=torch.tensor([4, 10]), actual_seq_kvlen=[4, 10])
    _raises(RuntimeError, "cannot be empty", t, t, t, 2, "TND", actual_seq_qlen=[4, 10])
    _raises(RuntimeError, "non-decreasing", t, t, t, 2, "TND", actual_seq_qlen=[6, 4, 10],
            actual_seq_kvlen=[6, 4, 10])
    _raises(RuntimeError, "need larger", t, t, t, 2, "TND", actual_seq_qlen=[4, 12], actual_seq_kvlen=[4, 12])
    _raises(RuntimeError, "MaxSq", t, t, t, 2, "TND", actual_seq_qlen=[4, 10], actual_seq_kvlen=[4, 10],
            atten_mask=S.to_dev(torch.zeros(1, 1, 6, 6, dtype=torch.bool)))
    _raises(RuntimeError, "exist invalid row", t, t, t, 2, "TND", actual_seq_qlen=[4, 10], actual_seq_kvlen=[2, 10],
            atten_mask=S.to_dev(S.compressed_mask()), sparse_mode=3)
    full_row = torch.zeros(6, 6, dtype=torch.bool)
    full_row[1] = True
    _raises(RuntimeError, "must not mask a whole row", t, t, t, 2, "TND", actual_seq_qlen=[4, 10],
            actual_seq_kvlen=[4, 10], atten_mask=S.to_dev(full_row))


def test_grad_op_requires_forward_statistics():
    q, k, v = _qkv()
    with pytest.raises(RuntimeError, match="softmax_max is required"):
        fa_grad()(q, k, v, q, 2, "BNSD", attention_in=q)
    with pytest.raises(RuntimeError, match="attention_in"):
        fa_grad()(q, k, v, q, 2, "BNSD")


def test_signature_and_counter():
    import inspect

    sig = inspect.signature(FA.npu_fusion_attention)
    assert list(sig.parameters)[:5] == ["query", "key", "value", "head_num", "input_layout"]
    assert sig.parameters["scale"].default == 1.0 and sig.parameters["keep_prob"].default == 1.0
    assert sig.parameters["pre_tockens"].default == 2147483647 == sig.parameters["next_tockens"].default
    assert sig.parameters["sparse_mode"].default == 0 and sig.parameters["inner_precise"].default == 0
    gsig = inspect.signature(FA.npu_fusion_attention_grad)
    assert gsig.parameters["scale_value"].kind is inspect.Parameter.KEYWORD_ONLY
    assert gsig.parameters["pse"].kind is inspect.Parameter.KEYWORD_ONLY
    q, k, v = _qkv()
    before = counters.op_calls("npu_fusion_attention")
    FA.npu_fusion_attention(q, k, v, 2, "BNSD")
    assert counters.op_calls("npu_fusion_attention") == before + 1


def test_fa_accepts_a_compressed_mask_made_under_inference_mode():
    """Generation code builds its causal mask under torch.inference_mode; the hardware takes it (an inference
    tensor has no version counter, so the emulator cannot cache its check on it)."""
    q, k, v = (S.to_dev(t) for t in _inputs(1, 2, 2, 6, 6, 8, 8, torch.float16))
    with torch.inference_mode():
        mask = S.to_dev(S.compressed_mask())
        a = fa()(q, k, v, 2, "BNSD", atten_mask=mask, sparse_mode=3, scale=0.3)[0]
        b = fa()(q, k, v, 2, "BNSD", atten_mask=mask, sparse_mode=3, scale=0.3)[0]
        mask[0, 1] = False  # no longer the compressed mask: rejected, not served from a stale check
        with pytest.raises(RuntimeError):
            fa()(q, k, v, 2, "BNSD", atten_mask=mask, sparse_mode=3, scale=0.3)
    assert torch.equal(a.cpu(), b.cpu())
