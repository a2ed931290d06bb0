"""Optional NPU fused kernels where the numerics are the same (off by default: ``ASCEND_SHIM_ENABLE=fast_ops``).

* ``torch.optim.AdamW`` -> ``torch_npu.optim.NpuFusedAdamW`` (what NPU ports of training loops do by hand) for
  fp32/fp16 parameters on the NPU, same update rule; anything else (bf16 params, maximize, capturable, tensor lr,
  params off the NPU, AdamW subclasses) keeps torch's AdamW, reported.
* RMSNorm -> ``torch_npu.npu_rms_norm``: ``torch.nn.RMSNorm``, and transformers' ``*RMSNorm`` modules whose
  forward is verified, per class, to compute ``weight * x * rsqrt(mean(x^2) + eps)`` (a numeric probe on CPU; a
  variant such as Gemma's ``(1 + weight)`` fails the probe and is left alone, reported).
* rotary (transformers' ``apply_rotary_pos_emb`` of Llama/Qwen2/Qwen3/Mistral, probed against rotate-half)
  -> ``torch_npu.npu_rotary_mul``; SwiGLU MLPs (``down(silu(gate(x)) * up(x))``) -> ``torch_npu.npu_swiglu``.

A fused op computes in fp32 and rounds once; the composite rounds after each op. In fp32 the results are the
same up to float reassociation; in fp16/bf16 they can differ in the last bit. Each swap is reported as a
translation; a call the fused op cannot take (dtype mix, device, shape) runs the original, reported once as a
fallback per reason.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


REMOVE = "never: an opt-in speed-up the user turns on; torch's own ops give the same results without it"
fast_ops = PatchSet(
    id="fast_ops", title="NPU fused kernels: NpuFusedAdamW, npu_rms_norm, npu_rotary_mul, npu_swiglu (opt-in)",
    requires={"torch": ">=2.4,<2.15"}, default_enabled=False,
    checked_against="torch 2.13.0 + transformers 5.23.0 on the sim backend (emulated fused ops)",
    implementation=f"{__name__}.impl"
)


# -- AdamW ---------------------------------------------------------------------------------------------------
fast_ops.patch("torch.optim:AdamW", kind="replace",
               why="torch's AdamW runs one small kernel per tensor and op on the NPU; torch_npu's NpuFusedAdamW "
                   "updates all parameters from combined buffers (NPU training ports switch to it by hand).",
               what="torch.optim.AdamW(...) returns an NpuFusedAdamW (made safe for zero_grad(set_to_none=True)) "
                    "when every trainable parameter is fp32/fp16 on the NPU and no maximize/capturable/"
                    "differentiable/tensor-lr option is used; otherwise torch's AdamW, reported. AdamW "
                    "subclasses are never swapped.",
               remove_when=REMOVE, factory="swapping_adamw")


# -- RMSNorm -------------------------------------------------------------------------------------------------
fast_ops.patch("torch.nn:RMSNorm.forward",
               why="torch.nn.RMSNorm is 5 kernels on the NPU; npu_rms_norm is one.",
               what="forward on an npu input whose dtype equals the weight's calls torch_npu.npu_rms_norm(x, "
                    "weight or ones, eps); other calls run the original (reported once per reason).",
               remove_when=REMOVE, factory="rmsnorm_forward")


fast_ops.patch("transformers.modeling_utils:PreTrainedModel.post_init",
               requires={"transformers": ">=4.50,<5.24"},
               why="transformers' *RMSNorm modules are composites (5 kernels); npu_rms_norm is one kernel.",
               what="after a model is built, every module whose class name ends in RMSNorm and passes the numeric "
                    "probe gets a forward calling torch_npu.npu_rms_norm for npu inputs of the weight's dtype "
                    "(reported per class with the module count); classes failing the probe are kept, reported.",
               remove_when=REMOVE, factory="rmsnorm_post_init")


# -- rotary and SwiGLU in transformers' Llama-family modeling files ------------------------------------------
_FAMILIES = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral"}


for _mod, _fam in _FAMILIES.items():
    fast_ops.patch(f"transformers.models.{_mod}.modeling_{_mod}:apply_rotary_pos_emb", id=f"fast_ops.rotary.{_mod}",
                   requires={"transformers": ">=4.50,<5.24"},
                   why=f"{_fam}'s rotary is 6 kernels (two rotate_half cats, muls, adds); npu_rotary_mul is one.",
                   what="q/k of one dtype (= cos/sin dtype) on the NPU go through torch_npu.npu_rotary_mul (half "
                        "mode, B1SD cos/sin); other calls keep the composite (reported). The formula is probed "
                        "against rotate-half when the patch applies.",
                   remove_when=REMOVE, sweep=False, factory="rotary", kwargs={"family": _fam})
    fast_ops.patch(f"transformers.models.{_mod}.modeling_{_mod}:{_fam}MLP.forward", id=f"fast_ops.swiglu.{_mod}",
                   requires={"transformers": ">=4.50,<5.24"},
                   why=f"{_fam}MLP computes silu(gate) * up as separate kernels; npu_swiglu is one.",
                   what="with hidden_act silu on the NPU: down(npu_swiglu(cat(gate(x), up(x)))); other "
                        "activations or devices keep the original (reported).",
                   remove_when=REMOVE, sweep=False, factory="swiglu_forward", kwargs={"family": _fam})

PATCH_SETS = [fast_ops]
