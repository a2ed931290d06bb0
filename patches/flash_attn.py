"""flash_attn on the NPU: the FA2 package and FA3's ``flash_attn_interface``, provided by the shim.

``flash-attn`` needs nvcc and CUDA; nothing of it installs on an Ascend machine. While the shim is active and the
real distribution is absent, ``import flash_attn`` yields :mod:`ascend_shim.providers.flash_attn.fa2` and
``import flash_attn_interface`` yields :mod:`ascend_shim.providers.flash_attn.fa3`; ``importlib.metadata`` reports
``flash_attn`` 2.8.4 and ``flash_attn_3`` 3.0.0 (the names and versions of the real wheels), so version checks
pass. Both are backed by ``torch_npu.npu_fusion_attention`` (training, autograd) and
``npu_fused_infer_attention_score`` (``flash_attn_with_kvcache``), with flash-attn's exact semantics; see
``ascend_shim/providers/flash_attn/_npu.py`` for the mapping and ``_reference.py`` for what falls back to exact
plain-torch attention.

An installed ``flash-attn-npu`` (a third-party Ascend build of the FA2 API) is preferred: if it installs a
``flash_attn`` module itself nothing is provided, otherwise ``flash_attn`` is aliased to its module. Either way
the report says so.

This module only declares (cheap to import); the provider modules import torch when ``flash_attn`` is imported.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet

FA2_VERSION = "2.8.4"  # flash-attention @ 0251105, flash_attn/__init__.py
FA3_VERSION = "3.0.0"  # hopper/__init__.py; the wheel is named flash_attn_3, its module flash_attn_interface
PROVIDER = "ascend_shim.providers.flash_attn"
REMOVE = "flash-attn (or an official Ascend build of its API) installs and runs on Ascend NPUs"

flash_attn = PatchSet(
    id="flash_attn", title="flash_attn (FA2) and flash_attn_interface (FA3) backed by NPU fused attention",
    requires={"torch": ">=2.4,<2.15"},
    checked_against="flash-attention 2.8.4 / hopper 3.0.0 @ 0251105 API; torch 2.13.0 with the sim backend; "
                    "transformers 5.23.0",
)


def _npu_build_module(dist) -> str | None:
    """The top-level module of an installed flash-attn-npu distribution (None if it cannot be told)."""
    text = dist.read_text("top_level.txt") or ""
    names = [n.strip() for n in text.splitlines() if n.strip()]
    if not names:
        names = sorted({str(f).split("/")[0] for f in (dist.files or ())
                        if str(f).endswith(".py") and "/" in str(f) and ".dist-info" not in str(f)})
    return names[0] if names else None


@flash_attn.patch("flash_attn", kind="provide-module", id="flash_attn.provide", fidelity="exact",
                  covers=("flash_attn", "flash_attn.flash_attn_func", "flash_attn.flash_attn_varlen_func", "flash_attn.flash_attn_with_kvcache", "flash_attn.bert_padding", "flash_attn.layers.rotary", "flash_attn_interface"),
                  why="flash-attn cannot be built or installed on Ascend (it needs CUDA); realhf/AReaL, Twinkle's "
                      "ring attention, FA3-style code (nanochat) and many training scripts import it directly.",
                  what="provides `flash_attn` (FA2 API incl. bert_padding, layers.rotary and the private "
                       "_flash_attn_*_forward/backward) and `flash_attn_interface` (FA3 API) with distribution "
                       "metadata flash_attn 2.8.4 / flash_attn_3 3.0.0, backed by npu_fusion_attention and "
                       "npu_fused_infer_attention_score; what the NPU ops cannot express (softcap, alibi in bf16 "
                       "or varlen, bands with no valid block) runs an exact plain-torch reference, recorded as a "
                       "fallback. A real flash_attn install is left alone; flash-attn-npu is preferred if present.",
                  remove_when=REMOVE)
def provide(ctx):
    from ascend_shim.errors import NotNeeded
    from ascend_shim.virtual import real_distribution

    report = ctx.report
    provided = []
    npu_build = real_distribution("flash-attn-npu") or real_distribution("flash_attn_npu")
    if npu_build is not None:
        module = _npu_build_module(npu_build)
        report.note(f"flash_attn: flash-attn-npu {npu_build.version} is installed and preferred over the shim's "
                    f"provider (module {module or '?'})")
        if module and module != "flash_attn" and real_distribution("flash_attn") is None:
            ctx.provide_module("flash_attn", module)
            provided.append(f"flash_attn -> {module} (flash-attn-npu)")
    elif real_distribution("flash_attn") is None:
        ctx.provide_module("flash_attn", f"{PROVIDER}.fa2", distribution="flash_attn", version=FA2_VERSION,
                           summary="flash_attn FA2 API on Ascend NPU, provided by ascend_shim")
        provided.append(f"flash_attn {FA2_VERSION}")
    if real_distribution("flash_attn_3") is None:
        ctx.provide_module("flash_attn_interface", f"{PROVIDER}.fa3", distribution="flash_attn_3",
                           version=FA3_VERSION, summary="flash_attn_interface FA3 API on Ascend NPU, provided by "
                                                        "ascend_shim")
        provided.append(f"flash_attn_interface (flash_attn_3 {FA3_VERSION})")
    if not provided:
        raise NotNeeded("flash_attn and flash_attn_3 are really installed")
    return None


@flash_attn.patch("transformers.integrations.npu_flash_attention:npu_flash_attn_varlen_func",
                  id="flash_attn.transformers_varlen", requires={"transformers": ">=4.50,<5.24"},
                  why="on an NPU transformers' flash_attention_2 runs its own varlen function, which reads "
                      "cu_seqlens_q and cu_seqlens_k to the host in every layer: two syncs per layer per "
                      "generated token when a batch is padded.",
                  what="the call goes to the shim's flash_attn provider (same attention, bottom-right causal as "
                       "transformers' default NPU_FA2_SPARSE_MODE=3): a decode step (one query per sequence) "
                       "makes no sync, a prefill one read for both lengths. With NPU_FA2_SPARSE_MODE=2 (top-left "
                       "causal), without max_seqlen_q/max_seqlen_k or with other arguments, transformers' own "
                       "function runs.",
                  remove_when="transformers' NPU flash-attention integration keeps sequence lengths on the device")
def transformers_varlen(ctx):
    import functools

    orig = ctx.original
    module = __import__("transformers.integrations.npu_flash_attention", fromlist=["SPARSE_MODE"])

    @functools.wraps(orig)
    def npu_flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                                   dropout_p=0.0, softmax_scale=None, causal=False, **kwargs):
        if (max_seqlen_q is None or max_seqlen_k is None or (causal and getattr(module, "SPARSE_MODE", 3) != 3)
                or not set(kwargs) <= {"window_size", "softcap", "deterministic", "alibi_slopes"}):
            return orig(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=dropout_p,
                        softmax_scale=softmax_scale, causal=causal, **kwargs)
        from ascend_shim.providers.flash_attn.fa2 import flash_attn_varlen_func

        return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                      dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal, **kwargs)

    return npu_flash_attn_varlen_func


@flash_attn.patch("transformers.modeling_flash_attention_utils:_get_unpad_data",
                  id="flash_attn.transformers_unpad_once", requires={"transformers": ">=4.50,<5.24"},
                  why="transformers' flash-attention path derives the unpadding data (indices, cumulative lengths, "
                      "the longest length read to the host) from the attention mask in every layer: one host "
                      "sync per layer per generated token when a batch is padded.",
                  what="the result for a mask is computed once and given to every layer while that mask tensor is "
                       "unchanged (the same object, version counter, storage, shape and dtype): one sync per step "
                       "whatever the depth. Inference tensors (no version counter) and code being compiled "
                       "recompute, as before.",
                  remove_when="transformers computes the unpadding data once per forward pass")
def transformers_unpad_once(ctx):
    import functools
    import threading
    import weakref

    import torch

    orig = ctx.original
    last = threading.local()  # (weak mask, its state, the result): one entry, the mask of the running step

    @functools.wraps(orig)
    def _get_unpad_data(attention_mask):
        if type(attention_mask) is not torch.Tensor or attention_mask.is_inference() \
                or torch.compiler.is_compiling():
            return orig(attention_mask)
        state = (attention_mask._version, attention_mask.data_ptr(), attention_mask.shape, attention_mask.stride(),
                 attention_mask.dtype, attention_mask.device)
        entry = getattr(last, "entry", None)
        if entry is not None and entry[0]() is attention_mask and entry[1] == state:
            return entry[2]
        result = orig(attention_mask)
        last.entry = (weakref.ref(attention_mask), state, result)
        return result

    return _get_unpad_data


PATCH_SETS = [flash_attn]
