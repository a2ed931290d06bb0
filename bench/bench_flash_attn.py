"""Per-call overhead of the shim's flash_attn provider against a hand port to npu_fusion_attention, side by side.

A hand port (seed 000, AReaL's NPU guide) rewrites each call site to call ``torch_npu.npu_fusion_attention``
directly; the shim instead serves ``import flash_attn`` from ``ascend_shim/targets/flash_attn`` and maps each
call onto the same op (argument checks, plan, mask cache, host lists for ``cu_seqlens``). Cases, on the emulated
NPU (sim backend):

1. dense causal forward, ``flash_attn_func(q, k, v, causal=True)`` (B=2, S=256, H=8, D=64, bf16) vs.
   ``npu_fusion_attention(q, k, v, 8, "BSND", atten_mask=<2048 triu mask, built once>, scale=D**-0.5,
   sparse_mode=3)[0]``;
   1b. the same at B=1, S=32 (an extra row: the op is cheap there, so the difference is resolved above the noise);
2. varlen forward, a 6-layer loop per step with one fresh ``cu_seqlens`` tensor per step (uneven lengths, 512
   tokens): ``flash_attn_varlen_func`` per layer vs. ``cu.tolist()`` once per step and ``npu_fusion_attention(...,
   "TND", actual_seq_qlen=ends, actual_seq_kvlen=ends, sparse_mode=3, atten_mask=mask)`` per layer; the
   device-to-host syncs per step of each are printed;
3. forward + backward of case 1;
4. a decode step under ``torch.inference_mode`` through a 12-layer stack (B=2, GQA 8/2 heads, a 512-slot cache
   holding 256 tokens, lengths in an inference tensor as nanochat's Engine keeps them):
   ``flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=seqlens, causal=True)`` per layer vs. the
   hand port's ``seqlens.tolist()`` once per step, its own cache writes and ``npu_fused_infer_attention_score(...,
   actual_seq_lengths_kv=lens)`` per layer. The provider reads nothing (a device mask over the whole cache width),
   the hand port one read per step; the time difference is the price of attending over the full width.

Each case runs a warm-up, then ``--runs`` repetitions interleaved (provider and hand port back to back, the order
alternating per repetition), and reports the median per-call time of each, their ratio provider/hand-port, and the
median of the paired differences (provider - hand port) in microseconds per call with its interquartile range.

On the emulator the op's own cost is CPU math (milliseconds, far above any Python wrapper), so the ratio only
bounds the provider's Python-side overhead and sits close to 1 whenever the op dominates. The meaningful figure is
the absolute difference in microseconds per call; when its IQR straddles 0 the overhead is below this machine's
noise at that shape (case 1b resolves it). The outputs of both sides are compared once (bit-identical expected).

    python bench/bench_flash_attn.py [--runs 40] [--warmup 2] [--tiny-number 100] [--threads N]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import ascend_shim

B, S, H, D = 2, 256, 8, 64
LAYERS = 6
VARLEN_LENS = (37, 200, 91, 128, 56)  # uneven, 512 tokens in all


def quartiles(xs):
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


class Case:
    """One provider/hand-port pair; each callable makes one timed sample (``calls`` op calls) from ``setup()``."""

    def __init__(self, name, provider, hand, calls=1, unit="call", setup=None):
        self.name, self.provider, self.hand = name, provider, hand
        self.calls, self.unit, self.setup = calls, unit, setup
        self.t = {"provider": [], "hand": []}
        self.syncs = {"provider": 0, "hand": 0}
        self.samples = 0

    def _one(self, side, counters):
        fn = self.provider if side == "provider" else self.hand
        arg = self.setup() if self.setup else None  # untimed (e.g. the step's fresh cu_seqlens tensor)
        s0 = counters.d2h_syncs()
        t0 = time.perf_counter()
        fn(arg)
        dt = time.perf_counter() - t0
        self.syncs[side] += counters.d2h_syncs() - s0
        return dt

    def measure(self, runs, warmup, counters):
        for _ in range(warmup):
            self._one("provider", counters), self._one("hand", counters)
        self.syncs = {"provider": 0, "hand": 0}
        for i in range(runs):
            order = ("provider", "hand") if i % 2 == 0 else ("hand", "provider")
            for side in order:
                self.t[side].append(self._one(side, counters) / self.calls)
        self.samples = runs

    def line(self):
        p, h = statistics.median(self.t["provider"]), statistics.median(self.t["hand"])
        diffs = [(a - b) * 1e6 for a, b in zip(self.t["provider"], self.t["hand"], strict=True)]
        lo, hi = quartiles(diffs)
        return (f"  {self.name:34s} hand-port {h * 1e3:8.3f} ms  provider {p * 1e3:8.3f} ms  ratio {p / h:6.3f}  "
                f"diff {statistics.median(diffs):+9.1f} us/{self.unit} (IQR {lo:+.1f} .. {hi:+.1f})")

    def sync_line(self, per="sample"):
        n = max(self.samples, 1)
        return (f"  {self.name:34s} d2h syncs per {per}: hand-port {self.syncs['hand'] / n:g}  "
                f"provider {self.syncs['provider'] / n:g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="interleaved repetitions per case")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--tiny-number", type=int, default=100, help="calls per timed sample in case 1b")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    ascend_shim.activate(backend="sim", inherit=False, log_level="off")
    import flash_attn
    import torch_npu

    from ascend_shim.sim import counters

    gen = torch.Generator().manual_seed(0)

    def rnd(*shape, grad=False):
        t = torch.randn(*shape, generator=gen).to(torch.bfloat16).to("npu")
        return t.requires_grad_(True) if grad else t

    scale = D ** -0.5
    mask = torch.ones(2048, 2048, dtype=torch.bool, device="npu").triu_(1)  # the hand port builds it once
    cases, checks = [], []

    # 1 / 1b: dense causal forward
    def dense_pair(b, s):
        q, k, v = rnd(b, s, H, D), rnd(b, s, H, D), rnd(b, s, H, D)
        def prov():
            return flash_attn.flash_attn_func(q, k, v, causal=True)

        def hand():
            return torch_npu.npu_fusion_attention(q, k, v, H, "BSND", atten_mask=mask, scale=scale, sparse_mode=3)[0]

        return prov, hand

    prov1, hand1 = dense_pair(B, S)
    checks.append(("1", prov1, hand1))
    cases.append(Case(f"1  dense causal fwd B{B} S{S}", lambda _: prov1(), lambda _: hand1()))

    prov1b, hand1b = dense_pair(1, 32)
    n_tiny = args.tiny_number

    def loop(fn):
        def run(_):
            for _ in range(n_tiny):
                fn()
        return run

    cases.append(Case("1b dense causal fwd B1 S32", loop(prov1b), loop(hand1b), calls=n_tiny))

    # 2: varlen forward, 6 layers per step, one fresh cu_seqlens per step
    cu_host = [0]
    for n in VARLEN_LENS:
        cu_host.append(cu_host[-1] + n)
    total, max_len = cu_host[-1], max(VARLEN_LENS)
    vq, vk, vv = rnd(total, H, D), rnd(total, H, D), rnd(total, H, D)

    def fresh_cu():
        return torch.tensor(cu_host, dtype=torch.int32, device="npu")  # host-to-device only

    def prov2(cu):
        for _ in range(LAYERS):
            out = flash_attn.flash_attn_varlen_func(vq, vk, vv, cu, cu, max_len, max_len, causal=True)
        return out

    def hand2(cu):
        ends = cu.tolist()[1:]  # the hand port's one read per step
        for _ in range(LAYERS):
            out = torch_npu.npu_fusion_attention(vq, vk, vv, H, "TND", atten_mask=mask, scale=scale,
                                                 actual_seq_qlen=ends, actual_seq_kvlen=ends, sparse_mode=3)[0]
        return out

    checks.append(("2", lambda: prov2(fresh_cu()), lambda: hand2(fresh_cu())))
    case2 = Case(f"2  varlen fwd T{total} x{LAYERS} layers", prov2, hand2, calls=LAYERS, unit="layer",
                 setup=fresh_cu)
    cases.append(case2)

    # 3: forward + backward of case 1
    gq, gk, gv = rnd(B, S, H, D, grad=True), rnd(B, S, H, D, grad=True), rnd(B, S, H, D, grad=True)
    dout = rnd(B, S, H, D)

    def fwd_bwd(attn):
        def run(_):
            gq.grad = gk.grad = gv.grad = None
            attn().backward(dout)
        return run

    def prov3():
        return flash_attn.flash_attn_func(gq, gk, gv, causal=True)

    def hand3():
        return torch_npu.npu_fusion_attention(gq, gk, gv, H, "BSND", atten_mask=mask, scale=scale, sparse_mode=3)[0]

    def grads(attn):
        fwd_bwd(attn)(None)
        return torch.cat([t.grad.flatten() for t in (gq, gk, gv)])

    checks.append(("3 (grads)", lambda: grads(prov3), lambda: grads(hand3)))
    cases.append(Case(f"3  dense causal fwd+bwd B{B} S{S}", fwd_bwd(prov3), fwd_bwd(hand3)))

    # 4: decode step, 12 layers, inference mode
    n_dec, cap, fill, hk = 12, 512, 256, 2
    with torch.inference_mode():
        dec_caches = [(rnd(B, cap, hk, D), rnd(B, cap, hk, D)) for _ in range(n_dec)]
        dq, dk, dv = rnd(B, 1, H, D), rnd(B, 1, hk, D), rnd(B, 1, hk, D)

    def dec_lengths():
        with torch.inference_mode():
            return torch.full((B,), fill, dtype=torch.int32, device="npu")

    def prov4(seqlens):
        with torch.inference_mode():
            for kc, vc in dec_caches:
                out = flash_attn.flash_attn_with_kvcache(dq, kc, vc, k=dk, v=dv, cache_seqlens=seqlens, causal=True)
            seqlens += 1
        return out

    def hand4(seqlens):
        with torch.inference_mode():
            lens = seqlens.tolist()  # the hand port's one read per step
            rows, pos = torch.arange(B, device="npu"), seqlens.long()
            for kc, vc in dec_caches:
                kc[rows, pos] = dk[:, 0]
                vc[rows, pos] = dv[:, 0]
                out = torch_npu.npu_fused_infer_attention_score(
                    dq, kc, vc, num_heads=H, num_key_value_heads=hk, input_layout="BSND", scale=scale,
                    actual_seq_lengths_kv=[n + 1 for n in lens])[0]
            seqlens += 1
        return out

    checks.append(("4", lambda: prov4(dec_lengths()), lambda: hand4(dec_lengths())))
    case4 = Case(f"4  decode step x{n_dec} layers (inference)", prov4, hand4, calls=n_dec, unit="layer",
                 setup=dec_lengths)
    cases.append(case4)

    same = {name: torch.equal(p().cpu(), h().cpu()) for name, p, h in checks}

    start = time.perf_counter()
    for case in cases:
        case.measure(args.runs, args.warmup, counters)
    elapsed = time.perf_counter() - start

    print(f"flash_attn provider vs. hand-ported npu_fusion_attention, sim backend, {torch.get_num_threads()} threads, "
          f"bf16 H{H} D{D}; median of {args.runs} interleaved runs after {args.warmup} warm-up "
          f"({elapsed:.1f} s measured)")
    print("  outputs bit-identical: " + ", ".join(f"case {k} {'yes' if v else 'NO'}" for k, v in same.items()))
    for case in cases:
        print(case.line())
    print(f"device-to-host syncs (varlen lengths {list(VARLEN_LENS)}, one fresh cu_seqlens per step):")
    print(case2.sync_line("step"))
    print(case4.sync_line("decode step"))
    for case in cases:
        if case not in (case2, case4):
            print(case.sync_line(f"{case.calls} call{'s' if case.calls > 1 else ''}"))


if __name__ == "__main__":
    main()
