"""transformers 5.x ``attn_implementation="flash_attention_2"`` with the shim active, vs ``eager``.

Finding (transformers 5.23.0): with the shim active, ``import torch_npu`` succeeds and ``torch.npu.is_available()``
is True, so ``modeling_flash_attention_utils._lazy_imports`` takes its **first** branch, ``is_torch_npu_available()``
-> ``transformers.integrations.npu_flash_attention``. It never imports ``flash_attn`` (that branch comes first, and
``is_flash_attn_2_available()`` is False without CUDA). Its dense function calls ``npu_fusion_attention`` itself;
its varlen function (padded batches) reads both ``cu_seqlens`` to the host in every layer, so the shim routes it to
the provider (patch ``flash_attn.transformers_varlen``): a padded ``generate`` then makes no sync of the provider's
in any decode step. This test proves: unpadded calls never reach the provider, padded calls do (one fused op per
layer either way), logits match ``eager``, greedy ``generate`` with padding gives eager's tokens, and the provider's
decode steps read nothing to the host (patch ``flash_attn.transformers_padded_decode``: the packed keys go to the
fused inference op without unpadding; patch ``flash_attn.transformers_decode_mask``: the mask is not asked whether
it holds padding), so a padded ``generate`` reads once per token (its stopping check) whatever the depth; the
prefill's unpadding data is computed once per forward pass (patch ``flash_attn.transformers_unpad_once``).

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
PROVIDER_CALLS = []
for name in ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"):
    real = getattr(fai, name)
    def spy(*a, _real=real, _name=name, **kw):
        PROVIDER_CALLS.append(_name)
        return _real(*a, **kw)
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
PROVIDER_CALLS.clear()
counters.reset()
fa2.generate(**gen)
res["generate_provider_calls"] = list(PROVIDER_CALLS)
res["decode_ops"] = counters.op_calls("npu_fused_infer_attention_score")
def generate_syncs(layers, impl="flash_attention_2"):
    deeper = copy.deepcopy(cfg)
    deeper.num_hidden_layers = layers
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(deeper, attn_implementation=impl, dtype=dtype).to("npu")
    before = counters.d2h_syncs()
    model.eval().generate(**gen)
    return counters.d2h_syncs() - before
res["syncs"] = {"fa2_2": generate_syncs(2), "fa2_5": generate_syncs(5), "sdpa_2": generate_syncs(2, "sdpa")}
print("RESULT " + json.dumps(res))
''')


@pytest.mark.slow
def test_transformers_flash_attention_2_matches_eager_via_native_npu_path():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    kept = ("ASCEND_SHIM_SIM_BUILD_DIR", "ASCEND_SHIM_SIM_LAYER")
    for k in [k for k in env if k.startswith("ASCEND_SHIM") and k not in kept]:
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
    # the prefill's unpadded call per layer reaches the provider; decode steps run the fused inference op on the
    # packed keys (2 layers x 5 steps), read nothing and keep the mask without asking whether it is padded
    # (transformers' one read per forward pass, which sdpa makes): 5 reads fewer than sdpa, one more for the
    # prefill's unpadding data, whatever the depth
    assert res["generate_provider_calls"] == ["flash_attn_varlen_func"] * 2, res
    assert res["decode_ops"] == 2 * 5, res
    syncs = res["syncs"]
    assert syncs["fa2_2"] == syncs["fa2_5"] == syncs["sdpa_2"] - 5 + 1, syncs


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


def _padded_decode_inputs(dtype, width=9, cache=9, seed=0):
    """One decode step of a batch of 4 (GQA 4/2 heads): left padding, a hole, a full row, an all-padding row."""
    import torch

    g = torch.Generator().manual_seed(seed)
    q = torch.randn(4, 1, 4, 16, generator=g).to(dtype).npu()
    k, v = (torch.randn(4, cache, 2, 16, generator=g).to(dtype).npu() for _ in range(2))
    mask = torch.ones(4, width, dtype=torch.long)
    mask[0, :4] = 0
    mask[1, 2:5] = 0
    mask[3] = 0
    return q, k, v, mask.npu()


def _use_provider_kernels(mfu, monkeypatch):
    """transformers' flash-attention functions resolved to the flash_attn provider's FA2 API (what transformers
    loads where the ``flash_attn`` package is its kernel), whose signature takes ``window_size``: transformers'
    own NPU functions take none, so transformers drops a sliding window before calling them."""
    from ascend_shim.targets.flash_attn import fa2

    real = mfu.lazy_import_flash_attention

    def provider_kernels(implementation, *args, **kwargs):
        (_, _, with_kvcache, pad, unpad), _ = real(implementation, *args, **kwargs)
        process = mfu._lazy_define_process_function(fa2.flash_attn_varlen_func)
        return (fa2.flash_attn_func, fa2.flash_attn_varlen_func, with_kvcache, pad, unpad), (process, dict)

    monkeypatch.setattr(mfu, "lazy_import_flash_attention", provider_kernels)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("sliding_window", [None, 3])
@pytest.mark.parametrize("kernels", ["transformers_npu", "provider"])
def test_padded_decode_step_is_unpadding_without_a_sync(clean_shim, monkeypatch, dtype_name, sliding_window,
                                                        kernels):
    """A decode step of a padded batch gives what transformers' unpadding path gives, bit for bit on the
    emulator (the real keys packed in the same order, the same fused op), and reads nothing to the host; with
    kernels that take a window, the window (counted over the real keys) is applied on both paths."""
    import torch

    clean_shim.activate(backend="sim", inherit=False, log_level="off")
    import transformers.modeling_flash_attention_utils as mfu
    from ascend_shim.sim import counters

    if kernels == "provider":
        _use_provider_kernels(mfu, monkeypatch)
    patched = mfu._flash_attention_forward
    unpadding = patched.__wrapped__
    kw = dict(query_length=1, is_causal=True, sliding_window=sliding_window, softmax_scale=0.2,
              attn_implementation="flash_attention_2")
    for width, cache in ((9, 9), (9, 12)):  # the second a static cache longer than the mask
        q, k, v, mask = _padded_decode_inputs(getattr(torch, dtype_name), width, cache)
        with torch.no_grad():
            before = counters.d2h_syncs()
            out = patched(q, k, v, mask, **kw)
            syncs = counters.d2h_syncs() - before
            ref = unpadding(q, k, v, mask, **kw)
            unwindowed = patched(q, k, v, mask, **{**kw, "sliding_window": None})
        assert syncs == 0
        assert counters.d2h_syncs() > before  # the unpadding path reads the mask to the host
        assert out.shape == ref.shape == (4, 1, 4, 16) and out.dtype == ref.dtype
        assert torch.equal(out.cpu(), ref.cpu())
        assert not out[3].cpu().any()  # a row with no key gives zeros, as flash-attn does
        windowed = kernels == "provider" and sliding_window is not None
        assert torch.equal(out.cpu(), unwindowed.cpu()) is not windowed


def test_padded_decode_leaves_everything_else_to_transformers(clean_shim, monkeypatch):
    """Prefill, dropout, softcap, autograd and top-left causal alignment take transformers' own path (the
    unpadding, which reads the mask to the host); deactivation restores the function."""
    import torch

    clean_shim.activate(backend="sim", inherit=False, log_level="off")
    import transformers.integrations.npu_flash_attention as npu_fa
    import transformers.modeling_flash_attention_utils as mfu
    from ascend_shim.sim import counters

    patched, original = mfu._flash_attention_forward, mfu._flash_attention_forward.__wrapped__
    q, k, v, mask = _padded_decode_inputs(torch.float16)
    mask[3] = 1  # no empty row: transformers' own NPU function has no answer for one
    base = dict(query_length=1, is_causal=True, attn_implementation="flash_attention_2")

    def reads(fn, q=q, k=k, v=v, mask=mask, grad=False, **extra):
        with torch.set_grad_enabled(grad):
            before = counters.d2h_syncs()
            fn(q, k, v, mask.clone(), **{**base, **extra})  # a new mask: no unpadding remembered
            return counters.d2h_syncs() - before

    assert reads(patched) == 0
    with pytest.raises(ValueError, match="softcap"):  # transformers' own answer: this kernel has no softcap
        reads(patched, softcap=30.0)
    assert reads(patched, dropout=0.1) > 0
    qs = torch.randn(4, 9, 4, 16).half().npu()
    assert reads(patched, q=qs, query_length=9) > 0  # prefill
    assert reads(patched, q=q.clone().requires_grad_(), grad=True) > 0
    assert reads(patched, q=q.clone().requires_grad_()) == 0  # under no_grad: inference
    monkeypatch.setattr(npu_fa, "SPARSE_MODE", 2)  # NPU_FA2_SPARSE_MODE=2: top-left causal
    assert reads(patched) > 0
    assert reads(patched, is_causal=False) == 0  # no causal alignment to differ on
    clean_shim.deactivate()
    assert mfu._flash_attention_forward is original


def test_decode_mask_is_kept_without_asking_whether_it_is_padded(clean_shim):
    """transformers asks the flash-attention mask ``.all()`` before each forward pass (a host read) to drop a mask
    without padding; a decode step that takes the padded decode keeps the mask unasked, and the attention of an
    unpadded batch is the same either way. Prefill and autograd ask as before; deactivation restores transformers'
    mask interface."""
    import torch

    clean_shim.activate(backend="sim", inherit=False, log_level="off")
    import transformers.masking_utils as masking
    import transformers.modeling_flash_attention_utils as mfu
    from ascend_shim.sim import counters

    original = masking.flash_attention_mask.__wrapped__
    assert masking.ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"] is masking.flash_attention_mask
    mfu.lazy_import_flash_attention("flash_attention_2")  # what the first (prefill) forward pass does
    ones = torch.ones(4, 9, dtype=torch.bool).npu()

    def mask_for(q_length, grad=False):
        with torch.set_grad_enabled(grad):
            before = counters.d2h_syncs()
            mask = masking.ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"](
                batch_size=4, q_length=q_length, kv_length=9, attention_mask=ones)
            return mask, counters.d2h_syncs() - before

    kept, reads = mask_for(1)
    assert reads == 0 and kept is not None and torch.equal(kept.cpu(), ones.cpu())
    assert mask_for(9) == (None, 1)  # prefill: asked, and dropped
    assert mask_for(1, grad=True) == (None, 1)

    q, k, v, _ = _padded_decode_inputs(torch.float16)
    with torch.no_grad():
        kw = dict(query_length=1, is_causal=True, attn_implementation="flash_attention_2")
        with_mask = mfu._flash_attention_forward(q, k, v, kept, **kw)
        dense = mfu._flash_attention_forward(q, k, v, None, **kw)
    torch.testing.assert_close(with_mask.cpu(), dense.cpu(), rtol=2e-3, atol=2e-3)

    clean_shim.deactivate()
    assert masking.flash_attention_mask is original
    assert masking.ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"] is original
