"""The HF-stack patch sets in-process: native registration, leftovers, version gating, fused AdamW, fast_ops."""

import pytest
import torch

import ascend_shim
from ascend_shim import callers, versions
from ascend_shim.errors import UnsupportedOnNPUError
from ascend_shim.report import REPORT

transformers = pytest.importorskip("transformers")
HF_SETS = ("hf_transformers", "hf_accelerate", "hf_peft", "hf_trl")


def _ask_as(package):
    """torch.cuda.is_available() called from a frame whose module is ``package``."""
    g = {"__name__": f"{package}.fake_module", "torch": torch}
    # a distinct function name: callers caches per code object, and code objects compare by value, not filename
    exec(compile(f"def ask_{package}():\n    return torch.cuda.is_available()\n", f"<{package}>", "exec"), g)
    return g[f"ask_{package}"]()


def test_libraries_see_the_real_answer_user_code_sees_cuda(clean_shim):
    clean_shim.activate("sim")
    for pkg in ("transformers", "accelerate", "peft", "trl"):
        assert _ask_as(pkg) is False, pkg  # the real answer: no CUDA here
    assert _ask_as("my_training_code") is True  # user code takes its accelerator path
    assert {s: REPORT.sets[s]["status"] for s in HF_SETS} == dict.fromkeys(HF_SETS, "active")
    clean_shim.deactivate()
    assert not {"transformers", "accelerate", "peft", "trl"} & callers._native


def test_a_version_outside_the_range_skips_the_set_reported(clean_shim, monkeypatch):
    real = versions.installed_version
    monkeypatch.setattr(versions, "installed_version",
                        lambda d: "9.0.0" if d in ("transformers", "trl") else real(d))
    clean_shim.activate("sim")
    for sid in ("hf_transformers", "hf_trl"):
        info = REPORT.sets[sid]
        assert info["status"] == "skipped" and "9.0.0 is outside the supported range" in info["reason"], info
    assert REPORT.sets["hf_accelerate"]["status"] == "active"
    assert "transformers" not in callers._native and "accelerate" in callers._native
    assert _ask_as("transformers") is True  # the set did not act


def test_strict_mode_turns_the_version_skip_into_an_error(clean_shim, monkeypatch):
    real = versions.installed_version
    monkeypatch.setattr(versions, "installed_version", lambda d: "0.1.0" if d == "peft" else real(d))
    with pytest.raises(ascend_shim.StrictModeError, match="hf_peft"):
        clean_shim.activate("sim", strict=True)


def test_training_arguments_tf32_maps_to_hf32(clean_shim, tmp_path):
    clean_shim.activate("sim")
    from transformers import TrainingArguments

    torch.npu.matmul.allow_hf32 = False
    args = TrainingArguments(output_dir=str(tmp_path), tf32=True, report_to=[])
    assert args.tf32 is True  # the user's value is kept
    assert torch.npu.matmul.allow_hf32 is True and torch.npu.conv.allow_hf32 is True
    TrainingArguments(output_dir=str(tmp_path), tf32=False, report_to=[])
    assert torch.npu.matmul.allow_hf32 is False
    assert any(e["api"] == "TrainingArguments(tf32=...)" for e in REPORT.events())


def test_without_the_shim_transformers_refuses_tf32_here(tmp_path):
    from transformers import TrainingArguments

    with pytest.raises(ValueError, match="tf32 requires Ampere"):
        TrainingArguments(output_dir=str(tmp_path), tf32=True, report_to=[], use_cpu=True)


@pytest.mark.parametrize("kwargs, option", [
    ({"use_liger_kernel": True}, "use_liger_kernel=True"),
    ({"optim": "adamw_bnb_8bit"}, "adamw_bnb_8bit"),
    ({"optim": "paged_adamw_32bit"}, "paged_adamw_32bit"),
])
def test_cuda_only_training_options_raise_naming_the_option(clean_shim, monkeypatch, tmp_path, kwargs, option):
    from ascend_shim.targets.bitsandbytes import impl as bitsandbytes

    monkeypatch.setattr(bitsandbytes, "installed_version", lambda: None)  # bitsandbytes options: without its kernels
    clean_shim.activate("sim")
    from transformers import TrainingArguments

    with pytest.raises(UnsupportedOnNPUError, match=option.replace("(", r"\(")) as info:
        TrainingArguments(output_dir=str(tmp_path), report_to=[], **kwargs)
    assert "hf_transformers" in info.value.patch_id


def test_qlora_bitsandbytes_config_raises_naming_the_option(clean_shim, monkeypatch):
    from ascend_shim.targets.bitsandbytes import impl as bitsandbytes

    monkeypatch.setattr(bitsandbytes, "installed_version", lambda: "0.46.0")  # 4-bit kernels for CPU/CUDA only
    clean_shim.activate("sim")
    from transformers import BitsAndBytesConfig

    BitsAndBytesConfig()  # nothing quantized: allowed
    with pytest.raises(UnsupportedOnNPUError, match="load_in_4bit"):
        BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)


def _tiny_model(dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    return LlamaForCausalLM(cfg).to(device="npu", dtype=dtype)


@pytest.mark.parametrize("dtype, expected", [(torch.float32, "NpuFusedAdamW"), (torch.bfloat16, "AdamW")])
def test_adamw_torch_fused_picks_the_npu_fused_adamw_where_dtypes_allow(clean_shim, tmp_path, dtype, expected):
    clean_shim.activate("sim")
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), optim="adamw_torch_fused", report_to=[])
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, _tiny_model(dtype))
    assert cls.__name__ == expected and "fused" not in kwargs
    category = "translated" if expected == "NpuFusedAdamW" else "fallback"
    assert any(e["api"] == "optim='adamw_torch_fused'" and e["category"] == category for e in REPORT.events())


def _train(opt_factory, zero, steps=3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).to("npu")
    opt = opt_factory(model.parameters())
    for i in range(steps):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(i)).to("npu")
        model(x).pow(2).mean().backward()
        opt.step()
        zero(model, opt)
    return torch.cat([p.detach().flatten().cpu() for p in model.parameters()])


def test_npu_fused_adamw_wrapper_survives_set_to_none_zeroing():
    """The Trainer zeroes with Module.zero_grad() (set_to_none=True): the raw fused optimizer then keeps stepping
    with its first captured gradients; the shim's subclass gives AdamW's weights."""
    import torch_npu

    from ascend_shim.targets._shared.fused_adamw import fused_adamw_class

    def module_zero(model, opt):
        model.zero_grad(set_to_none=True)

    ref = _train(lambda p: torch.optim.AdamW(p, lr=1e-2), module_zero)
    shim = _train(lambda p: fused_adamw_class()(p, lr=1e-2), module_zero)
    raw = _train(lambda p: torch_npu.optim.NpuFusedAdamW(p, lr=1e-2), module_zero)
    assert torch.allclose(shim, ref, atol=1e-6)
    assert not torch.allclose(raw, ref, atol=1e-4)  # the bug the wrapper exists for
    opt_zero = _train(lambda p: fused_adamw_class()(p, lr=1e-2), lambda m, o: o.zero_grad(set_to_none=True))
    assert torch.allclose(opt_zero, ref, atol=1e-6)  # set_to_none=True is zeroing in place, not a ValueError


def test_fast_ops_is_off_by_default(clean_shim):
    clean_shim.activate("sim")
    assert REPORT.sets["fast_ops"]["status"] == "disabled"
    p = torch.nn.Parameter(torch.zeros(2, device="npu"))
    assert type(torch.optim.AdamW([p])).__name__ == "AdamW"
    assert not ascend_shim.is_patched("torch.optim.AdamW")


def test_fast_ops_adamw_swap_and_bf16_kept(clean_shim):
    clean_shim.activate("sim", enable="fast_ops")
    p32 = torch.nn.Parameter(torch.randn(4, device="npu"))
    p16 = torch.nn.Parameter(torch.randn(4, device="npu", dtype=torch.bfloat16))
    assert type(torch.optim.AdamW([p32], lr=1e-3)).__name__ == "NpuFusedAdamW"
    kept = torch.optim.AdamW([p16], lr=1e-3)
    assert isinstance(kept, ascend_shim.original("torch.optim.AdamW"))
    assert type(torch.optim.AdamW([p32], maximize=True)).__name__ != "NpuFusedAdamW"

    class Mine(torch.optim.AdamW):
        pass

    assert type(Mine([p32])) is Mine  # subclasses keep their own behaviour
    fb = {e["detail"] for e in REPORT.events() if e["category"] == "fallback" and e["api"] == "torch.optim.AdamW"}
    assert any("bfloat16 parameters" in d for d in fb) and any("maximize" in d for d in fb), fb
    clean_shim.deactivate()
    from torch.optim.adamw import AdamW as torch_adamw

    assert type(torch.optim.AdamW([p32])) is torch_adamw


def test_fast_ops_rmsnorm_probe_swaps_llama_and_keeps_a_gemma_style_norm(clean_shim):
    from ascend_shim.sim import counters

    clean_shim.activate("sim", enable="fast_ops")
    model = _tiny_model(torch.float32)
    norms = [m for m in model.modules() if type(m).__name__ == "LlamaRMSNorm"]
    assert norms and all("forward" in m.__dict__ for m in norms)
    x = torch.randn(2, 3, 16, device="npu")
    before = counters.op_calls().get("npu_rms_norm", 0)
    got = norms[0](x)
    assert counters.op_calls().get("npu_rms_norm", 0) == before + 1
    want = type(norms[0]).forward(norms[0], x)
    assert torch.allclose(got, want, atol=1e-6)

    class OffsetRMSNorm(torch.nn.Module):  # Gemma-style: (1 + weight)
        def __init__(self, n, eps=1e-6):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(n))
            self.eps = eps

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.weight)

    from ascend_shim.targets.fast_ops.impl import probe_rmsnorm

    assert probe_rmsnorm(OffsetRMSNorm(16))[0] is None
    assert probe_rmsnorm(norms[0])[0] == "variance_epsilon"
    clean_shim.deactivate()
    assert not any("forward" in m.__dict__ for m in norms)  # undone


def test_fast_ops_rotary_and_swiglu_match_the_composites(clean_shim):
    from ascend_shim.sim import counters

    clean_shim.activate("sim", enable="fast_ops")
    from transformers.models.llama import modeling_llama as ml

    orig_rot = ascend_shim.original("transformers.models.llama.modeling_llama.apply_rotary_pos_emb")
    q, k = torch.randn(2, 4, 5, 8, device="npu"), torch.randn(2, 2, 5, 8, device="npu")
    cos, sin = torch.randn(2, 5, 8, device="npu"), torch.randn(2, 5, 8, device="npu")
    n = counters.op_calls().get("npu_rotary_mul", 0)
    got, want = ml.apply_rotary_pos_emb(q, k, cos, sin), orig_rot(q, k, cos, sin)
    assert counters.op_calls().get("npu_rotary_mul", 0) == n + 2
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(got, want, strict=True))
    model = _tiny_model(torch.float32)
    mlp = model.model.layers[0].mlp
    x = torch.randn(2, 3, 16, device="npu")
    n = counters.op_calls().get("npu_swiglu", 0)
    out = mlp(x)
    assert counters.op_calls().get("npu_swiglu", 0) == n + 1
    assert torch.allclose(out, mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)), atol=1e-6)


def test_trl_server_weight_sync_on_npu_raises_naming_the_option(clean_shim):
    pytest.importorskip("trl")
    clean_shim.activate("sim")
    from trl.generation import vllm_client

    client = object.__new__(vllm_client.VLLMClient)
    with pytest.raises(UnsupportedOnNPUError, match="vllm_mode='server'"):
        client.init_communicator(device=torch.device("npu", 0))


# vllm and deepspeed: tests/hf/test_vllm.py, tests/hf/test_deepspeed.py
