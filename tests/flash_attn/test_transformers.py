"""transformers 5.x ``attn_implementation="flash_attention_2"`` with the shim active, vs ``eager``.

Finding (transformers 5.23.0): with the shim active, ``import torch_npu`` succeeds and ``torch.npu.is_available()``
is True, so ``modeling_flash_attention_utils._lazy_imports`` takes its **first** branch, ``is_torch_npu_available()``
-> ``transformers.integrations.npu_flash_attention``. It never imports ``flash_attn`` (that branch comes first, and
``is_flash_attn_2_available()`` is False without CUDA). Its dense function calls ``npu_fusion_attention`` itself;
its varlen function (padded batches) reads both ``cu_seqlens`` to the host in every layer, so the shim routes it to
the provider (patch ``flash_attn.transformers_varlen``): a padded ``generate`` then makes no sync of the provider's
in any decode step. This test proves: unpadded calls never reach the provider, padded calls do (one fused op per
layer either way), logits match ``eager``, greedy ``generate`` with padding gives eager's tokens, and the provider's
calls during decode read nothing to the host, and transformers' own unpadding read happens once per forward pass
whatever the depth (patch ``flash_attn.transformers_unpad_once``).

Runs in a subprocess: transformers caches ``is_torch_npu_available()`` at import time.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")
REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(r'''
import copy, json
import torch
import ascend_shim
ascend_shim.activate(backend="sim", inherit=False)
import flash_attn, flash_attn.flash_attn_interface as fai
from ascend_shim.sim import counters
PROVIDER_CALLS, DECODE_SYNCS = [], []
for name in ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"):
    real = getattr(fai, name)
    def spy(*a, _real=real, _name=name, **kw):
        PROVIDER_CALLS.append(_name)
        before = counters.d2h_syncs()
        out = _real(*a, **kw)
        if _name == "flash_attn_varlen_func" and a[5] == 1:  # max_seqlen_q == 1: a decode step
            DECODE_SYNCS.append(counters.d2h_syncs() - before)
        return out
    setattr(fai, name, spy)
    setattr(flash_attn, name, spy)
import transformers
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import is_flash_attn_2_available, is_torch_npu_available
from ascend_shim.sim import counters

res = {"npu_available": is_torch_npu_available(), "fa2_available": is_flash_attn_2_available()}
torch.manual_seed(0)
dtype = torch.bfloat16
cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, dtype=dtype)
state = {k: v.clone() for k, v in LlamaForCausalLM(cfg).to(dtype).state_dict().items()}
def make(impl):
    m = LlamaForCausalLM._from_config(copy.deepcopy(cfg), attn_implementation=impl, dtype=dtype)
    m.load_state_dict(state)
    return m.to("npu").eval()
eager, fa2 = make("eager"), make("flash_attention_2")
ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1)).npu()
am = torch.ones(2, 12, dtype=torch.long).npu()
am[1, :3] = 0
out = {}
for case, kw in {"unpadded": dict(input_ids=ids), "padded": dict(input_ids=ids, attention_mask=am)}.items():
    counters.reset()
    PROVIDER_CALLS.clear()
    with torch.no_grad():
        l_fa = fa2(**kw).logits.float().cpu()
        fa_calls = counters.op_calls("npu_fusion_attention")
        l_e = eager(**kw).logits.float().cpu()
    valid = (kw.get("attention_mask", torch.ones_like(ids))).cpu().bool()
    out[case] = {"fused_calls": fa_calls, "diff": (l_fa - l_e)[valid].abs().max().item(),
                 "scale": l_e[valid].abs().max().item(), "provider_calls": list(PROVIDER_CALLS)}
res["cases"] = out
PROVIDER_CALLS.clear()
gen = dict(input_ids=ids, attention_mask=am, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
res["tokens_equal"] = fa2.generate(**gen).tolist() == eager.generate(**gen).tolist()
res["decode_calls"], res["decode_syncs"] = len(DECODE_SYNCS), sum(DECODE_SYNCS)
def generate_syncs(layers):
    deeper = copy.deepcopy(cfg)
    deeper.num_hidden_layers = layers
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(deeper, attn_implementation="flash_attention_2", dtype=dtype).to("npu")
    before = counters.d2h_syncs()
    model.eval().generate(**gen)
    return counters.d2h_syncs() - before
res["syncs_by_depth"] = {layers: generate_syncs(layers) for layers in (2, 5)}
print("RESULT " + json.dumps(res))
''')


@pytest.mark.slow
def test_transformers_flash_attention_2_matches_eager_via_native_npu_path():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    for k in [k for k in env if k.startswith("ASCEND_SHIM") and k != "ASCEND_SHIM_SIM_BUILD_DIR"]:
        del env[k]
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=str(REPO),
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    assert res["npu_available"] and not res["fa2_available"], res
    # transformers' native dense NPU call when unpadded; its varlen function routed to the provider when padded
    assert res["cases"]["unpadded"]["provider_calls"] == [], res
    assert res["cases"]["padded"]["provider_calls"] == ["flash_attn_varlen_func"] * 2, res
    for case, r in res["cases"].items():
        assert r["fused_calls"] == 2, (case, r)  # one npu_fusion_attention per layer
        assert r["diff"] <= 3e-2 * max(1.0, r["scale"]), (case, r)
    assert res["tokens_equal"], res
    assert res["decode_calls"] == 2 * 5, res  # 2 layers x 5 decode steps after the prefill
    assert res["decode_syncs"] == 0, res
    # transformers' unpadding data is read once per forward pass, not once per layer: depth changes no sync
    assert res["syncs_by_depth"]["2"] == res["syncs_by_depth"]["5"], res


def test_unpadding_data_is_reused_only_for_the_unchanged_mask(clean_shim, monkeypatch):
    """Every layer of a step gets the data computed for its mask once (each computation reads the longest
    length to the host: one sync); a mask changed in place, another mask, an inference tensor or code being
    compiled never get a stale answer."""
    import torch

    clean_shim.activate(backend="sim", inherit=False, log_level="off")
    import transformers.modeling_flash_attention_utils as mfu
    from ascend_shim.sim import counters

    unpad, real = mfu._get_unpad_data, mfu._get_unpad_data.__wrapped__

    def computations(*masks):
        before = counters.d2h_syncs()
        results = [unpad(m) for m in masks]
        return counters.d2h_syncs() - before, results

    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]).npu()
    n, first = computations(mask, mask, mask)  # three layers of one step
    assert n == 1 and first[0][2] == 4 and all(r is first[0] for r in first)
    mask[1, :2] = 0  # changed in place: computed again
    n, (changed,) = computations(mask)
    assert n == 1 and changed[2] == 3 and torch.equal(changed[1].cpu(), real(mask)[1].cpu())
    assert computations(mask.clone())[0] == 1  # another tensor with the same contents
    with torch.inference_mode():
        frozen = torch.ones(2, 3, dtype=torch.long).npu()
        assert computations(frozen, frozen)[0] == 2
    assert computations(mask, mask)[0] == 1
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert computations(mask, mask)[0] == 2
