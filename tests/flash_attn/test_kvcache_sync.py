"""flash_attn_with_kvcache (FA2 + FA3) decode vs re-attending the whole prefix; one D2H sync per forward."""
import pytest
import torch

from ascend_shim.sim import counters

from .conftest import ref_attention, rope_ref


@pytest.mark.parametrize("mode", ["dense", "paged", "batch_idx", "window_rotary"])
@pytest.mark.parametrize("api", ["fa2", "fa3"])
def test_decode_steps_match_full_prefix(fa, mode, api):
    import flash_attn_interface

    torch.manual_seed(0)
    B, H, Hk, D, cap, dt = 2, 4, 2, 64, 512, torch.float16
    prompt = [5]
    steps = 3
    window = (4, 0) if mode == "window_rotary" else (-1, -1)
    interleaved = True
    total = max(prompt) + steps + 1
    ks = torch.randn(B, total, Hk, D, dtype=dt)  # the keys/values every position gets
    vs = torch.randn(B, total, Hk, D, dtype=dt)
    qs = torch.randn(B, total, H, D, dtype=dt)
    cos = sin = None
    if mode == "window_rotary":
        ang = torch.arange(cap).float()[:, None] * torch.rand(D // 4)[None]  # rotary_dim = D / 2
        cos, sin = ang.cos().to(dt), ang.sin().to(dt)
    page = 256
    if mode == "paged":
        kc = torch.zeros(6, page, Hk, D, dtype=dt).npu()
        block_table = torch.tensor([[4, 1], [0, 5]], dtype=torch.int32).npu()
    else:
        kc = torch.zeros(B + 1, cap, Hk, D, dtype=dt).npu()
        block_table = None
    vc = torch.zeros_like(kc)
    batch_idx = torch.tensor([2, 0], dtype=torch.int32).npu() if mode == "batch_idx" else None
    rows = [2, 0] if mode == "batch_idx" else [0, 1]

    def call(q, k, v, seqlens):
        kw = dict(k=k, v=v, cache_seqlens=seqlens, causal=True, window_size=window, cache_batch_idx=batch_idx,
                  rotary_cos=cos.npu() if cos is not None else None, rotary_sin=sin.npu() if sin is not None else None)
        if api == "fa2":
            return fa.flash_attn_with_kvcache(q, kc, vc, block_table=block_table, rotary_interleaved=interleaved,
                                              **kw)
        return flash_attn_interface.flash_attn_with_kvcache(q, kc, vc, page_table=block_table, **kw)

    def cache_row(c, b, n):  # the first n cached positions of batch b
        if mode == "paged":
            tbl = block_table.cpu()[b]
            return torch.cat([c.cpu()[int(p)] for p in tbl])[:n]
        return c.cpu()[rows[b], :n]

    # a prefill of P tokens, then `steps` one-token decode steps
    outs = []
    seqlens = torch.zeros(B, dtype=torch.int32).npu()
    P = prompt[0]
    out = call(qs[:, :P].npu(), ks[:, :P].npu(), vs[:, :P].npu(), seqlens)
    outs.append((0, P, out))
    seqlens += P
    for t in range(P, P + steps):
        out = call(qs[:, t:t + 1].npu(), ks[:, t:t + 1].npu(), vs[:, t:t + 1].npu(), seqlens)
        outs.append((t, t + 1, out))
        seqlens += 1  # in place, as decoding loops do: invalidates the cached host list
    n = P + steps
    # reference: apply rotary at absolute positions, re-attend over the whole prefix with bottom-right causal
    pos = torch.arange(total).expand(B, total)
    kr = rope_ref(ks, cos, sin, pos, interleaved).to(ks.dtype) if cos is not None else ks
    qr = rope_ref(qs, cos, sin, pos, interleaved).to(qs.dtype) if cos is not None else qs
    for b in range(B):  # caches hold exactly the (rotated) keys/values, written in place
        torch.testing.assert_close(cache_row(kc, b, n), kr[b, :n], atol=2e-3, rtol=0)
        torch.testing.assert_close(cache_row(vc, b, n), vs[b, :n], atol=0, rtol=0)
        untouched = kc.cpu()[rows[b], n:] if mode != "paged" else cache_row(kc, b, 2 * page)[n:]
        assert untouched.abs().sum() == 0
    for t0, t1, out in outs:
        ref, _ = ref_attention(qr[:, t0:t1], kr[:, :t1], vs[:, :t1], causal=True, window=window)
        assert out.shape == (B, t1 - t0, H, D)
        assert (out.float().cpu() - ref).abs().max() < 1e-2, (mode, t0)


def test_kvcache_decode_returns_lse_and_reads_no_lengths(fa):
    B, H, D = 2, 2, 32
    kc = torch.randn(B, 64, H, D, dtype=torch.bfloat16).npu()
    vc = torch.randn_like(kc)
    seqlens = torch.tensor([10, 20], dtype=torch.int32).npu()
    q = torch.randn(B, 1, H, D, dtype=torch.bfloat16).npu()
    before = counters.d2h_syncs()
    for _layer in range(4):  # decode masks on the device: no layer reads cache_seqlens to the host
        out, lse = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, return_softmax_lse=True)
    assert counters.d2h_syncs() - before == 0
    ref, ref_lse = ref_attention(q.cpu()[1:], kc.cpu()[1:, :20], vc.cpu()[1:, :20])
    assert (out[1:].float().cpu() - ref).abs().max() < 2e-2
    torch.testing.assert_close(lse[1:].cpu(), ref_lse, atol=1e-2, rtol=1e-2)


class _Layer(torch.nn.Module):
    def __init__(self, fa, dim=64, heads=4):
        super().__init__()
        self.fa, self.heads = fa, heads
        self.qkv = torch.nn.Linear(dim, 3 * dim, dtype=torch.bfloat16)
        self.o = torch.nn.Linear(dim, dim, dtype=torch.bfloat16)

    def forward(self, x, cu, max_len):
        T = x.shape[0]
        q, k, v = self.qkv(x).view(T, 3, self.heads, -1).unbind(1)
        y = self.fa.flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=True)
        return x + self.o(y.reshape(T, -1))


def test_n_layer_model_makes_one_d2h_sync_per_forward(fa):
    torch.manual_seed(0)
    layers = torch.nn.ModuleList([_Layer(fa) for _ in range(6)]).npu()
    lens = [7, 3, 12]
    x = torch.randn(sum(lens), 64, dtype=torch.bfloat16).npu()
    for step in range(3):
        cu = torch.tensor([0, 7, 10, 22], dtype=torch.int32).npu()  # a new tensor per step, as a data loader gives
        counters.reset()
        h = x
        for layer in layers:
            h = layer(h, cu, 12)
        assert counters.op_calls("npu_fusion_attention") == 6
        assert counters.d2h_syncs() == 1, f"step {step}: {counters.d2h_syncs()} syncs"
        h.float().sum().backward()
    # an in-place change of the same tensor is seen (no stale host list)
    cu2 = torch.tensor([0, 7, 10, 22], dtype=torch.int32).npu()
    a = layers[0](x, cu2, 12)
    cu2[1:] = torch.tensor([11, 20, 22], dtype=torch.int32).npu()
    b = layers[0](x, cu2, 12)
    assert not torch.equal(a[7:11].cpu(), b[7:11].cpu())  # rows 7-10 now continue sequence 0


def test_fa3_conventions_nanochat_style(fa):
    import flash_attn_interface as fa3

    q = torch.randn(2, 6, 4, 32, dtype=torch.bfloat16).npu()
    k = torch.randn(2, 6, 2, 32, dtype=torch.bfloat16).npu()
    y = fa3.flash_attn_func(q, k, k, causal=True, window_size=(3, 0))
    assert isinstance(y, torch.Tensor)  # a bare tensor, not (out, lse)
    ref, ref_lse = ref_attention(q, k, k, causal=True, window=(3, 0))
    assert (y.float().cpu() - ref).abs().max() < 2e-2
    out, lse = fa3.flash_attn_func(q, k, k, causal=True, window_size=(3, 0), return_attn_probs=True)
    torch.testing.assert_close(lse.cpu(), ref_lse, atol=1e-2, rtol=1e-2)
    from ascend_shim.errors import UnsupportedOnNPUError
    with pytest.raises(UnsupportedOnNPUError):
        fa3.flash_attn_func(q, k, k, q_descale=torch.ones(1))


def test_kvcache_softcap_falls_back_exactly(fa):
    q = torch.randn(2, 1, 2, 32, dtype=torch.float16).npu()
    kc = torch.randn(2, 16, 2, 32, dtype=torch.float16).npu()
    out = fa.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=9, softcap=3.0)
    ref, _ = ref_attention(q, kc[:, :9], kc[:, :9], softcap=3.0)
    assert (out.float().cpu() - ref).abs().max() < 5e-3



def test_inference_mode_decode_sees_lengths_advanced_in_place(fa):
    """Generation loops decode under torch.inference_mode, where tensors have no version counter; lengths
    advanced in place (``cache_seqlens += 1``, as nanochat's Engine) must never be served from a stale list."""
    torch.manual_seed(0)
    B, H, D, cap, dt = 1, 2, 64, 16, torch.float16
    with torch.inference_mode():
        k_cache = torch.zeros(B, cap, H, D, dtype=dt, device="npu")
        v_cache = torch.zeros_like(k_cache)
        seqlens = torch.zeros(B, dtype=torch.int32, device="npu")
        ks, vs = [], []
        for _ in range(3):
            q, k, v = (torch.randn(B, 1, H, D, dtype=dt) for _ in range(3))
            ks.append(k), vs.append(v)
            out = fa.flash_attn_with_kvcache(q.to("npu"), k_cache, v_cache, k=k.to("npu"), v=v.to("npu"),
                                             cache_seqlens=seqlens, causal=True)
            seqlens += 1
            ref, _ = ref_attention(q, torch.cat(ks, 1), torch.cat(vs, 1), causal=True)
            assert (out.cpu().float() - ref).abs().max() < 2e-3


def test_causal_mask_first_built_under_inference_mode_serves_generation_and_training(fa, monkeypatch):
    """The compressed causal mask is built once per device and cached. When generation comes first (nanochat's
    base_eval / chat_cli prefill under torch.inference_mode), it must not be cached as an inference tensor: those
    have no version counter (the NPU op's mask check reads it) and cannot be saved for a later training backward."""
    import flash_attn_interface as fa3

    from ascend_shim.targets.flash_attn import _npu

    monkeypatch.setattr(_npu, "_masks", {})  # as in a fresh process: no mask built yet
    torch.manual_seed(0)
    B, H, D, cap, P, dt = 1, 2, 64, 16, 5, torch.bfloat16
    q, k, v = (torch.randn(B, P, H, D, dtype=dt) for _ in range(3))
    with torch.inference_mode():
        k_cache = torch.zeros(B, cap, H, D, dtype=dt, device="npu")
        v_cache = torch.zeros_like(k_cache)
        seqlens = torch.zeros(B, dtype=torch.int32, device="npu")
        out = fa3.flash_attn_with_kvcache(q.to("npu"), k_cache, v_cache, k=k.to("npu"), v=v.to("npu"),
                                          cache_seqlens=seqlens, causal=True)  # a prefill: sparse mode + mask
    ref, _ = ref_attention(q, k, v, causal=True)
    assert (out.cpu().float() - ref).abs().max() < 2e-2
    mask = _npu.compressed_mask(torch.device("npu", 0))
    assert not mask.is_inference()
    # training afterwards reuses the cached mask through forward and backward
    qt = q.to("npu").requires_grad_()
    y = fa3.flash_attn_func(qt, k.to("npu"), v.to("npu"), causal=True)
    y.float().sum().backward()
    assert qt.grad is not None and torch.isfinite(qt.grad.float()).all()


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("inference", [True, False])
def test_decode_loop_makes_only_the_samplers_sync_per_token(fa, paged, inference):
    """A 12-layer decode loop (nanochat's Engine shape: lengths advanced in place after the last layer, the
    sampler's ``.tolist()`` per token) costs exactly one device-to-host sync per token, the sampler's, with or
    without inference mode; each step's outputs equal attention over the prefix written so far (no stale length)."""
    import flash_attn_interface as fa3

    torch.manual_seed(0)
    layers, B, H, D, cap, dt, prompt, tokens = 12, 2, 2, 64, 256, torch.bfloat16, 5, 6
    window = (3, 0)  # a sliding window on every layer, as nanochat's short-window layers
    xs = torch.randn(prompt + tokens, B, 1, H, D, dtype=dt)
    ctx = torch.inference_mode() if inference else torch.no_grad()
    with ctx:
        if paged:
            caches = [(torch.zeros(4, cap, H, D, dtype=dt, device="npu"),
                       torch.zeros(4, cap, H, D, dtype=dt, device="npu")) for _ in range(layers)]
            table = torch.tensor([[2, -1], [0, 7]], dtype=torch.int32, device="npu")  # unused entries are junk
        else:
            caches = [(torch.zeros(B, cap, H, D, dtype=dt, device="npu"),
                       torch.zeros(B, cap, H, D, dtype=dt, device="npu")) for _ in range(layers)]
            table = None
        seqlens = torch.zeros(B, dtype=torch.int32, device="npu")
        pre = xs[:prompt].squeeze(2).transpose(0, 1).to("npu")  # (B, prompt, H, D)
        counters.reset()
        for kc, vc in caches:
            fa3.flash_attn_with_kvcache(pre, kc, vc, k=pre, v=pre, cache_seqlens=seqlens, causal=True,
                                        window_size=window, page_table=table)
        seqlens += prompt
        if not paged:  # a dense prefill masks on the device too (a paged one reads the lengths)
            assert counters.d2h_syncs() == 0
        counters.reset()
        for t in range(prompt, prompt + tokens):
            x = xs[t].to("npu")
            for kc, vc in caches:
                y = fa3.flash_attn_with_kvcache(x, kc, vc, k=x, v=x, cache_seqlens=seqlens, causal=True,
                                                window_size=window, page_table=table)
            seqlens += 1
            got = y.float().cpu()  # the sampler's read
            seen = xs[max(0, t - window[0]):t + 1].squeeze(2).transpose(0, 1)  # (B, <=4, H, D)
            ref, _ = ref_attention(xs[t], seen, seen, causal=True)
            assert (got - ref).abs().max() < 2e-2, t
        assert counters.d2h_syncs() == tokens
        assert counters.op_calls("npu_fused_infer_attention_score") == tokens * layers


@pytest.mark.parametrize("window", [(-1, -1), (2, 0)])
@pytest.mark.parametrize("inference", [True, False])
def test_varlen_decode_step_reads_no_lengths(fa, window, inference):
    """transformers' generate with padding sends each decode step as flash_attn_varlen_func with one query per
    sequence (max_seqlen_q=1, cu_seqlens_q = arange): served with no device-to-host sync, exact per sequence
    (uneven key lengths, GQA, a window, an empty sequence); training-shaped calls still take the TND op."""
    torch.manual_seed(0)
    H, Hk, D, dt = 4, 2, 64, torch.float16
    lens = [3, 7, 0, 5]
    ends = [0]
    for n in lens:
        ends.append(ends[-1] + n)
    q = torch.randn(len(lens), H, D, dtype=dt)
    k, v = torch.randn(ends[-1], Hk, D, dtype=dt), torch.randn(ends[-1], Hk, D, dtype=dt)
    ctx = torch.inference_mode() if inference else torch.no_grad()
    with ctx:
        cu_q = torch.arange(len(lens) + 1, dtype=torch.int32, device="npu")
        cu_k = torch.tensor(ends, dtype=torch.int32, device="npu")
        counters.reset()
        out, lse, _ = fa.flash_attn_varlen_func(q.npu(), k.npu(), v.npu(), cu_q, cu_k, 1, max(lens), causal=True,
                                                window_size=window, return_attn_probs=True)
        assert counters.d2h_syncs() == 0
        assert counters.op_calls("npu_fused_infer_attention_score") == 1
    out, lse = out.cpu(), lse.cpu()
    for b, n in enumerate(lens):
        if n == 0:
            assert out[b].abs().max() == 0 and torch.isinf(lse[:, b]).all()
            continue
        ks, vs = k[ends[b]:ends[b + 1]][None], v[ends[b]:ends[b + 1]][None]
        ref, ref_lse = ref_attention(q[b][None, None], ks, vs, causal=True, window=window)
        assert (out[b].float() - ref[0, 0]).abs().max() < 2e-3, b
        torch.testing.assert_close(lse[:, b], ref_lse[0, :, 0], atol=1e-3, rtol=1e-3)
    # with autograd the same call is a training step: the TND op (and its backward) runs
    qg = q[:3].npu().requires_grad_()
    cu_q = torch.arange(4, dtype=torch.int32, device="npu")
    cu_k = torch.tensor(ends[:3] + [ends[-1]], dtype=torch.int32, device="npu")  # no empty sequence
    counters.reset()
    fa.flash_attn_varlen_func(qg, k.npu(), v.npu(), cu_q, cu_k, 1, max(lens), causal=True).sum().backward()
    assert counters.op_calls("npu_fusion_attention") == 1


@pytest.mark.parametrize("window", [(-1, -1), (2, 0), (3, 1)])
@pytest.mark.parametrize("causal", [True, False])
def test_prefill_with_device_lengths_reads_nothing_and_matches(fa, causal, window):
    """A chunk of queries appended after a cache already holding uneven lengths (chunked prefill / speculative
    verification) is masked on the device: bottom-right band per row, no read, flash-attn's numbers."""
    import flash_attn_interface as fa3

    torch.manual_seed(0)
    B, Sq, H, Hk, D, cap, dt = 2, 4, 4, 2, 64, 32, torch.float16
    held = [5, 11]
    keys = torch.randn(B, cap, Hk, D, dtype=dt)
    vals = torch.randn(B, cap, Hk, D, dtype=dt)
    q = torch.randn(B, Sq, H, D, dtype=dt)
    k, v = torch.randn(B, Sq, Hk, D, dtype=dt), torch.randn(B, Sq, Hk, D, dtype=dt)
    with torch.inference_mode():
        kc, vc = keys.clone().npu(), vals.clone().npu()
        seqlens = torch.tensor(held, dtype=torch.int32, device="npu")
        counters.reset()
        out, lse = fa3.flash_attn_with_kvcache(q.npu(), kc, vc, k=k.npu(), v=v.npu(), cache_seqlens=seqlens,
                                               causal=causal, window_size=window, return_softmax_lse=True)
        assert counters.d2h_syncs() == 0
        out, lse = out.cpu(), lse.cpu()
    for b, n in enumerate(held):
        ks = torch.cat([keys[b:b + 1, :n], k[b:b + 1]], 1)
        vs = torch.cat([vals[b:b + 1, :n], v[b:b + 1]], 1)
        ref, ref_lse = ref_attention(q[b:b + 1], ks, vs, causal=causal, window=window)
        assert (out[b:b + 1].float() - ref).abs().max() < 2e-3, b
        torch.testing.assert_close(lse[b:b + 1], ref_lse, atol=1e-3, rtol=1e-3)
