"""Run under the shim: realhf's CUDA patterns; attention checked against plain-torch references on CPU."""
import json
import sys

import torch
import torch.nn.functional as F

import realhf  # noqa: F401  (the set provides pynvml when realhf is imported)
from realhf.api.cli_args import GenerationHyperparameters
from realhf.base import monitor
from realhf.impl import model

out = {"use_cuda": model.use_cuda(), "device": str(torch.device("cuda", model.current_device())),
       "nvml": monitor.gpu_stats(0), "use_cuda_graph": GenerationHyperparameters().use_cuda_graph}
cu = torch.tensor([0, 5, 12], dtype=torch.int32, device="cuda")
out["positions"] = model.compute_varlen_position_indices(12, cu).tolist()
out["entropy_ok"] = bool(torch.allclose(model.calc_entropy(torch.zeros(2, 4, device="cuda")).cpu(),
                                        torch.full((2,), float(torch.log(torch.tensor(4.0))))))
try:
    model.swiglu_fwd(torch.ones(1), torch.ones(1))
    out["jiterator_call"] = "ran"
except NotImplementedError as exc:
    out["jiterator_call"] = type(exc).__name__

if "--attention" in sys.argv:
    torch.manual_seed(0)
    dt, H, KV, D = torch.bfloat16, 4, 2, 16
    scale = D ** -0.5
    q, k, v = (torch.randn(12, n, D, dtype=dt) for n in (H, KV, KV))
    got = model.attention(q.cuda(), k.cuda(), v.cuda(), cu, 7, scale).cpu().float()
    ref = torch.cat([F.scaled_dot_product_attention(q[s:e].float().transpose(0, 1),
                                                    k[s:e].float().repeat_interleave(2, 1).transpose(0, 1),
                                                    v[s:e].float().repeat_interleave(2, 1).transpose(0, 1),
                                                    is_causal=True, scale=scale).transpose(0, 1)
                     for s, e in ((0, 5), (5, 12))])
    out["prefill_err"] = (got - ref).abs().max().item()

    # decode with fused rotary (positions = cache_seqlens) and in-place caches
    bs, L = 2, 16
    lens = torch.tensor([5, 7], dtype=torch.int32)
    k_cache, v_cache = torch.randn(bs, L, KV, D, dtype=dt), torch.randn(bs, L, KV, D, dtype=dt)
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
    freqs = torch.outer(torch.arange(L).float(), inv)
    cos, sin = freqs.cos().to(dt), freqs.sin().to(dt)
    qd, kd, vd = (torch.randn(bs, n, D, dtype=dt) for n in (H, KV, KV))
    kc, vc = k_cache.clone().cuda(), v_cache.clone().cuda()
    got = model.decode(qd.cuda(), kd.cuda(), vd.cuda(), kc, vc, lens.cuda(), cos.cuda(), sin.cuda(), scale,
                       False).cpu().float()

    def rot(t, p):
        c, s_ = torch.cat([cos[p], cos[p]]).float(), torch.cat([sin[p], sin[p]]).float()
        x1, x2 = t.float().chunk(2, -1)
        return t.float() * c + torch.cat([-x2, x1], -1) * s_

    errs, cache_errs = [], []
    for i, p in enumerate(lens.tolist()):
        keys = torch.cat([k_cache[i, :p].float(), rot(kd[i], p)[None]])
        vals = torch.cat([v_cache[i, :p].float(), vd[i].float()[None]])
        o = F.scaled_dot_product_attention(rot(qd[i], p)[:, None], keys.repeat_interleave(2, 1).transpose(0, 1),
                                           vals.repeat_interleave(2, 1).transpose(0, 1), scale=scale)[:, 0]
        errs.append((got[i] - o).abs().max().item())
        cache_errs.append((kc[i, p].cpu().float() - rot(kd[i], p)).abs().max().item())
        cache_errs.append((vc[i, p].cpu().float() - vd[i].float()).abs().max().item())
        cache_errs.append((kc[i, :p].cpu().float() - k_cache[i, :p].float()).abs().max().item())
    out["decode_err"], out["cache_err"] = max(errs), max(cache_errs)
print("RESULT " + json.dumps(out))
