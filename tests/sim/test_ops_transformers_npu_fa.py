"""transformers' own NPU flash-attention integration on the emulated NPU vs its SDPA path.

With ``torch_npu`` importable and ``torch.npu.is_available()``, transformers routes ``attn_implementation=
"flash_attention_2"`` to ``transformers/integrations/npu_flash_attention.py``, which calls
``torch_npu.npu_fusion_attention`` with BSND (+ the 2048x2048 compressed causal mask and sparse_mode=3) for
unpadded batches, and TND varlen (``actual_seq_qlen = cu_seqlens[1:]``) for padded batches and packed sequences.
A tiny Llama (2 layers, hidden 64, 4 heads, 2 KV heads) built from a config must give the same logits and
parameter gradients through that path as through SDPA on the same weights and inputs, in fp32 and bf16.

Runs in a subprocess: transformers caches ``is_torch_npu_available()`` and binds ``npu_fusion_attention`` at
import time, so the emulated device must be installed before transformers is imported, without leaking into the
rest of the test session.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path



REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(r'''
import copy, json, sys
import torch
import ascend_shim.sim as sim
sim.install()
import torch_npu  # the emulated package must be importable for transformers to take its NPU path
import transformers
from transformers.utils import is_torch_npu_available
from transformers import LlamaConfig, LlamaForCausalLM
from ascend_shim.sim import counters

assert is_torch_npu_available(), "transformers does not see the emulated NPU"
from transformers.integrations import npu_flash_attention as nfa
assert nfa.npu_fusion_attention is torch_npu.npu_fusion_attention
CALLS = []
_fa = nfa.npu_fusion_attention


def _spy(*a, **kw):  # records what transformers asked for, then calls the emulated op
    CALLS.append({"layout": a[4] if len(a) > 4 else kw["input_layout"], "sparse_mode": kw.get("sparse_mode", 0),
                  "mask": kw.get("atten_mask") is not None, "qlen": kw.get("actual_seq_qlen")})
    return _fa(*a, **kw)


nfa.npu_fusion_attention = _spy
LAYERS = 2


def make(cfg, state, impl, dtype):
    m = LlamaForCausalLM._from_config(copy.deepcopy(cfg), attn_implementation=impl, dtype=dtype)
    m.load_state_dict(state)
    assert m.config._attn_implementation == impl
    return m.to("npu")


def run(model, **kw):
    """Logits (zeroed at invalid positions) and parameter grads of the mean token log-likelihood."""
    model.zero_grad(set_to_none=True)
    out = model(**{k: v.to("npu") for k, v in kw.items() if k != "valid"})
    valid = kw["valid"].to("npu")
    logits = out.logits.float()
    tok = kw["input_ids"].to("npu")
    loss = (logits.log_softmax(-1).gather(-1, tok[..., None]).squeeze(-1) * valid).sum() / valid.sum()
    loss.backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return (logits * valid[..., None]).detach().cpu(), grads


def diff(l1, g1, l2, g2):
    assert set(g1) == set(g2) and len(g1) > 0
    return {"logits_max_abs_diff": (l1 - l2).abs().max().item(), "logits_max_abs": l1.abs().max().item(),
            "grad_max_abs_diff": max((g1[n] - g2[n]).abs().max().item() for n in g1),
            "grad_max_abs": max(g1[n].abs().max().item() for n in g1)}


def run_all(dtype):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      attention_dropout=0.0, dtype=dtype)
    state = {k: v.clone() for k, v in LlamaForCausalLM(cfg).to(dtype).state_dict().items()}
    sdpa, fa = make(cfg, state, "sdpa", dtype), make(cfg, state, "flash_attention_2", dtype)
    B, S = 2, 16
    ids = torch.randint(0, 128, (B, S), generator=torch.Generator().manual_seed(1))
    res = {}

    def fa_run(expect_layout, **kw):
        CALLS.clear()
        before = counters.op_calls("npu_fusion_attention")
        out = run(fa, **kw)
        assert counters.op_calls("npu_fusion_attention") - before == LAYERS
        assert len(CALLS) == LAYERS and all(c["layout"] == expect_layout for c in CALLS), CALLS
        assert all(c["sparse_mode"] == 3 and c["mask"] for c in CALLS), CALLS  # causal: compressed mask, mode 3
        return out, CALLS[0]["qlen"]

    def sdpa_run(**kw):
        before = counters.op_calls("npu_fusion_attention")
        out = run(sdpa, **kw)
        assert counters.op_calls("npu_fusion_attention") == before, "SDPA must not call npu_fusion_attention"
        return out

    # 1. no padding -> npu_flash_attn_func: BSND + compressed causal mask + sparse_mode 3
    ones = torch.ones(B, S)
    (l2, g2), _ = fa_run("BSND", input_ids=ids, valid=ones)
    l1, g1 = sdpa_run(input_ids=ids, valid=ones)
    res["unpadded"] = diff(l1, g1, l2, g2)
    # 2. right and left padding -> _upad_input + npu_flash_attn_varlen_func: TND, uneven lengths (11 and 11)
    am = torch.ones(B, S, dtype=torch.long)
    am[0, 11:] = 0
    am[1, :5] = 0
    am[1, 5:7] = 1
    (l2, g2), qlen = fa_run("TND", input_ids=ids, attention_mask=am, valid=am.float())
    assert list(qlen) == [11, 22], qlen  # cumulative ends, no leading 0
    l1, g1 = sdpa_run(input_ids=ids, attention_mask=am, valid=am.float())
    res["padded_varlen"] = diff(l1, g1, l2, g2)
    # 3. packed sequences (padding-free, position_ids restart) -> TND varlen; the reference runs each packed
    #    piece separately through SDPA
    pieces = [5, 7, 4]
    pos = torch.cat([torch.arange(n) for n in pieces])[None]
    flat = ids[:1]
    (l2, g2), qlen = fa_run("TND", input_ids=flat, position_ids=pos, valid=torch.ones(1, S))
    assert list(qlen) == [5, 12, 16], qlen
    sdpa.zero_grad(set_to_none=True)
    total, start, logits = 0, 0, []
    for n in pieces:
        piece = flat[:, start:start + n].to("npu")
        lg = sdpa(input_ids=piece).logits.float()
        logits.append(lg.detach().cpu())
        total = total + lg.log_softmax(-1).gather(-1, piece[..., None]).squeeze(-1).sum()
        start += n
    (total / S).backward()
    g1 = {n: p.grad.detach().float().cpu() for n, p in sdpa.named_parameters() if p.grad is not None}
    res["packed_varlen"] = diff(torch.cat(logits, dim=1), g1, l2, g2)
    return res


all_results = {"transformers": transformers.__version__}
for dtype_name in sys.argv[1:]:
    all_results[dtype_name] = run_all(getattr(torch, dtype_name))
print("RESULT " + json.dumps(all_results))
''')

TOL = {"float32": 1e-5, "bfloat16": 2e-2}  # max abs diff relative to max(1, max |reference|)


def test_transformers_npu_flash_attention_matches_sdpa():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    for k in list(env):
        if k.startswith("ASCEND_SHIM") and k not in ("ASCEND_SHIM_SIM_BUILD_DIR", "ASCEND_SHIM_SIM_LAYER"):
            del env[k]
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *TOL], capture_output=True, text=True, env=env,
                          cwd=str(REPO), timeout=900)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-6000:]}"
    res = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][len("RESULT "):])
    print(json.dumps(res, indent=1))
    for dtype, tol in TOL.items():
        for case in ("unpadded", "padded_varlen", "packed_varlen"):
            r = res[dtype][case]
            assert r["logits_max_abs_diff"] <= tol * max(1.0, r["logits_max_abs"]), (dtype, case, r)
            assert r["grad_max_abs_diff"] <= tol * max(1.0, r["grad_max_abs"]), (dtype, case, r)
