"""flash_attn on the NPU: the FA2 package and FA3's ``flash_attn_interface``, provided by the shim.

``flash-attn`` needs nvcc and CUDA; nothing of it installs on an Ascend machine. While the shim is active and the
real distribution is absent, ``import flash_attn`` yields :mod:`ascend_shim.targets.flash_attn.fa2` and
``import flash_attn_interface`` yields :mod:`ascend_shim.targets.flash_attn.fa3`; ``importlib.metadata`` reports
``flash_attn`` 2.8.4 and ``flash_attn_3`` 3.0.0 (the names and versions of the real wheels), so version checks
pass. Both are backed by ``torch_npu.npu_fusion_attention`` (training, autograd) and
``npu_fused_infer_attention_score`` (``flash_attn_with_kvcache``), with flash-attn's exact semantics; see
:mod:`._npu` for the mapping and :mod:`._reference` for what falls back to exact
plain-torch attention.

An installed ``flash-attn-npu`` (a third-party Ascend build of the FA2 API) is preferred: if it installs a
``flash_attn`` module itself nothing is provided, otherwise ``flash_attn`` is aliased to its module. Either way
the report says so.

This module only declares (cheap to import). Beside it: :mod:`.fa2` (the FA2 package) and :mod:`.fa3` (FA3's
``flash_attn_interface``), :mod:`._npu` (each argument onto the NPU ops), :mod:`._reference` (the exact plain-torch
fallback), :mod:`.install` (the modules provided) and :mod:`.transformers_integration`; they import torch when
``flash_attn`` is imported.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


REMOVE = ("https://github.com/Dao-AILab/flash-attention/issues/1781: flash-attn builds for CUDA (and ROCm) "
          "only; no version installs or runs on Ascend NPUs")

flash_attn = PatchSet(
    id="flash_attn", title="flash_attn (FA2) and flash_attn_interface (FA3) backed by NPU fused attention",
    requires={"torch": ">=2.4,<2.15"},
    checked_against="flash-attention 2.8.4 / hopper 3.0.0 @ 0251105 API; torch 2.13.0 with the sim backend; "
                    "transformers 5.23.0", implementation=f"{__name__}.install"
)


flash_attn.patch("flash_attn", kind="provide-module", id="flash_attn.provide", fidelity="exact",
                 covers=("flash_attn", "flash_attn.flash_attn_func", "flash_attn.flash_attn_varlen_func",
                         "flash_attn.flash_attn_with_kvcache", "flash_attn.bert_padding", "flash_attn.layers.rotary",
                         "flash_attn_interface"),
                 why="flash-attn cannot be built or installed on Ascend (it needs CUDA); realhf/AReaL, Twinkle's "
                     "ring attention, FA3-style code (nanochat) and many training scripts import it directly.",
                 what="provides `flash_attn` (FA2 API incl. bert_padding, layers.rotary and the private "
                      "_flash_attn_*_forward/backward) and `flash_attn_interface` (FA3 API) with distribution "
                      "metadata flash_attn 2.8.4 / flash_attn_3 3.0.0, backed by npu_fusion_attention and "
                      "npu_fused_infer_attention_score; what the NPU ops cannot express (softcap, alibi in bf16 "
                      "or varlen, bands with no valid block) runs an exact plain-torch reference, recorded as a "
                      "fallback. A real flash_attn install is left alone; flash-attn-npu is preferred if present.",
                 remove_when=REMOVE, factory="provide_modules")


flash_attn.patch("transformers.integrations.npu_flash_attention:npu_flash_attn_varlen_func",
                 id="flash_attn.transformers_varlen", requires={"transformers": ">=4.50,<5.24"},
                 why="on an NPU transformers' flash_attention_2 runs its own varlen function, which reads "
                     "cu_seqlens_q and cu_seqlens_k to the host in every layer: two syncs per layer per "
                     "generated token when a batch is padded.",
                 what="the call goes to the shim's flash_attn provider (same attention, bottom-right causal as "
                      "transformers' default NPU_FA2_SPARSE_MODE=3): a decode step (one query per sequence) "
                      "makes no sync, a prefill one read for both lengths. With NPU_FA2_SPARSE_MODE=2 (top-left "
                      "causal), without max_seqlen_q/max_seqlen_k or with other arguments, transformers' own "
                      "function runs.",
                 remove_when="https://github.com/huggingface/transformers/blob/"
                             "b06759150d7c686373913875d4cfae6cb41df963/src/transformers/integrations/"
                             "npu_flash_attention.py: its varlen function reads cu_seqlens to the host in every layer",
                 factory="ascend_shim.targets.flash_attn.transformers_integration:varlen_function")


flash_attn.patch("transformers.modeling_flash_attention_utils:_get_unpad_data",
                 id="flash_attn.transformers_unpad_once", requires={"transformers": ">=4.50,<5.24"},
                 why="transformers' flash-attention path derives the unpadding data (indices, cumulative lengths, "
                     "the longest length read to the host) from the attention mask in every layer: one host "
                     "sync per layer per generated token when a batch is padded.",
                 what="the result for a mask is computed once and given to every layer while that mask tensor is "
                      "unchanged (the same object, version counter, storage, shape and dtype): one sync per step "
                      "whatever the depth. Inference tensors (no version counter) and code being compiled "
                      "recompute, as before.",
                 remove_when="https://github.com/huggingface/transformers/blob/"
                             "7713be1e51fbf31eb2c5eb27624369e08af29243/src/transformers/"
                             "modeling_flash_attention_utils.py: _get_unpad_data runs in every layer, reading the "
                             "longest length to the host",
                 factory="ascend_shim.targets.flash_attn.transformers_integration:unpad_once")


flash_attn.patch("transformers.modeling_flash_attention_utils:_flash_attention_forward",
                 id="flash_attn.transformers_padded_decode", requires={"transformers": ">=5.0,<5.24"},
                 why="a padded batch sends transformers' flash-attention path through unpadding in every decode "
                     "step: the indices of the real tokens and the longest length are read from the attention "
                     "mask to the host, one device-to-host sync per generated token.",
                 what="a decode step (one query per sequence, inference, no dropout or softcap) whose varlen call "
                      "would reach the shim's flash_attn provider gets its real keys packed to the front of each "
                      "row on the device (the layout unpadding makes, at the mask's width) and the rest hidden by "
                      "the op's mask: the same attention, nothing read to the host. Prefill, training, top-left "
                      "causal (NPU_FA2_SPARSE_MODE=2), any other argument for the kernel (attention sinks) and "
                      "other kernels take transformers' own path.",
                 remove_when="https://github.com/huggingface/transformers/blob/"
                             "7713be1e51fbf31eb2c5eb27624369e08af29243/src/transformers/"
                             "modeling_flash_attention_utils.py: a padded decode step unpads through the host",
                 factory="ascend_shim.targets.flash_attn.transformers_integration:padded_decode_forward")


flash_attn.patch("transformers.masking_utils:flash_attention_mask",
                 id="flash_attn.transformers_decode_mask", requires={"transformers": ">=5.0,<5.24"},
                 why="before every forward pass transformers asks whether the flash-attention mask holds any "
                     "padding (`attention_mask.all()`), to drop a mask without any: one device-to-host sync per "
                     "generated token.",
                 what="for a decode step (one query, no autograd) whose attention takes the shim's padded decode "
                      "(patch flash_attn.transformers_padded_decode, which is exact with or without padding and "
                      "reads nothing), the mask is kept without the question. Prefill, training and other kernels "
                      "ask as before. The entries of transformers' mask interface that hold the function are "
                      "rebound alongside.",
                 remove_when="https://github.com/huggingface/transformers/blob/"
                             "2ccc6cae21faaf11631efa5fb9054687ae5dc931/src/transformers/masking_utils.py: "
                             "flash_attention_mask asks attention_mask.all() on the host before every forward pass",
                 factory="ascend_shim.targets.flash_attn.transformers_integration:decode_mask")


PATCH_SETS = [flash_attn]
