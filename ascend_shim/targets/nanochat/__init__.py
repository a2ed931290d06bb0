"""nanochat (karpathy/nanochat, run from a git checkout): the fixes a generic CUDA -> NPU redirect leaves over.

The torch-level sets already carry most of nanochat: ``get_device_capability()`` answers (8, 0) so the
import-time bf16 check in ``nanochat/common.py`` works (torch_cuda), ``torch.compile`` of the model and of the
optimizer steps uses an NPU-capable backend (torch_features), ``init_process_group("nccl", device_id=cuda:N)``
and ``ReduceOp.AVG`` on hccl (torch_distributed), ``torch.amp.GradScaler()`` for NANOCHAT_DTYPE=float16
(torch_devices), ``device_type == "cuda"`` branches (user_code), ``PYTORCH_ALLOC_CONF`` set by the scripts
before importing torch (environment). This set adds what is nanochat's own:

* FlashAttention-3: nanochat loads it from the ``kernels`` hub at import time; the hf_kernels set answers that
  locally, and when ``kernels`` is not installed this set plugs the same NPU FA3 provider in, so attention
  (sliding windows, in-place kv cache) runs on NPU fused attention instead of the SDPA fallback;
* ``--fp8``: Float8 training needs ``torch._scaled_mm`` fp8 GEMMs, absent on Atlas A2/A3; the conversion is
  turned off (warned and reported) and the model trains in its compute dtype;
* MFU: ``get_peak_flops`` knows Ascend parts (it answers inf, i.e. MFU 0%, for them);
* ``--device-type npu`` (how NPU ports of nanochat spell it) is accepted by every script, as ``cuda``;
* decode: the KV cache's position is kept on the host, so a generated token costs one device-to-host read (the
  sampler's), not two.

nanochat is not a distribution (run from a checkout; PyPI's ``nanochat`` is an unrelated package), so the set
has no version gate: its patches wait for ``nanochat.*`` modules and skip, reported, where the attributes they
need are missing (another nanochat commit).
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


REMOVE = ("https://github.com/karpathy/nanochat/blob/92d63d4e8bb4df75c3b71618f31ddde2378b2bcd/nanochat/common.py: "
          "nanochat knows cuda, mps and cpu only (device types, peak-flops table)")
nanochat = PatchSet(
    id="nanochat", title="nanochat: FA3 on NPU, --fp8 off, Ascend peak flops, --device-type npu",
    checked_against="karpathy/nanochat @ 92d63d4e8bb4 (2026-07-03), run from a git checkout; scripts/chat_web.py "
                    "(removed in da32e1d) @ 21a7774eab39", implementation=f"{__name__}.impl"
)


nanochat.patch("nanochat.common:get_peak_flops", id="nanochat.peak_flops",
               why="base_train computes MFU from get_peak_flops(torch.cuda.get_device_name(0)); Ascend names are "
                   "not in its table, so it warns and answers inf (MFU 0%).",
               what="Ascend device names (Ascend910B*, Ascend910_93*, Ascend910*) get their dense bf16 peak "
                    "(354e12 for A2/A3 devices, 256e12 for the 910A line); other names go to nanochat's table.",
               remove_when=REMOVE, factory="get_peak_flops")


nanochat.patch("nanochat.common", kind="call", id="nanochat.device_type_arg",
               why="commands written for NPU ports of nanochat pass --device-type=npu; nanochat accepts cuda|cpu|mps "
                   "(chat_cli and chat_eval reject npu in argparse, compute_init asserts).",
               what="when nanochat.common is imported (before the script parses its arguments), a "
                    "--device-type npu in sys.argv becomes cuda, which the shim runs on the NPU; reported.",
               remove_when=REMOVE, factory="device_type_arg")


nanochat.patch("nanochat.flash_attention", kind="call", id="nanochat.fa3",
               why="nanochat picks FlashAttention-3 at import time from the kernels hub; without the kernels "
                   "package (or with it but no NPU answer) it falls back to SDPA, whose sliding-window path "
                   "builds explicit masks.",
               what="if nanochat found no FA3 but the NPU is available, _fa3 becomes the NPU FA3 provider "
                    "(HAS_FA3 True, USE_FA3 recomputed: bf16 compute only, _override_impl honoured); "
                    "not needed when the kernels hub already answered with it.",
               remove_when=REMOVE, factory="plug_fa3")


nanochat.patch("nanochat.engine:KVCache", kind="call", id="nanochat.kvcache_host_position",
               why="GPT.forward asks the KV cache for its position (KVCache.get_pos: cache_seqlens[0].item()) at "
                   "every decode step, a device-to-host sync per token on top of the sampler's: on an NPU each one "
                   "drains the task queue.",
               what="the cache keeps its position on the host too, updated where nanochat moves it (__init__, "
                    "reset, advance by an int, prefill), and get_pos answers from it while cache_seqlens is the "
                    "same tensor, unchanged since (version counter, where it has one); otherwise it reads the "
                    "device as before. Applies only if no other nanochat code writes cache_seqlens. On the "
                    "emulated NPU every answer is checked against the device value (without a sync).",
               remove_when="https://github.com/karpathy/nanochat/blob/92d63d4e8bb4df75c3b71618f31ddde2378b2bcd/"
                           "nanochat/engine.py: KVCache.get_pos reads cache_seqlens[0].item() at every decode step",
               factory="keep_kvcache_position_on_host")


nanochat.patch("nanochat.fp8:convert_to_float8_training", kind="replace", fidelity="neutral", id="nanochat.fp8",
               why="--fp8 swaps Linear layers for Float8Linear, whose matmuls are torch._scaled_mm fp8 GEMMs: "
                   "Atlas A2/A3 NPUs have none (torch_features would stop the run at the first step).",
               what="the conversion returns the model unchanged, with a warning and a report entry: training "
                    "runs in the compute dtype (bf16) instead of fp8. base_train then prints 'converted 0/N'.",
               remove_when="https://github.com/karpathy/nanochat/blob/92d63d4e8bb4df75c3b71618f31ddde2378b2bcd/"
                           "scripts/base_train.py: --fp8 converts on any CUDA device without asking whether it has "
                           "fp8 matmuls (Atlas A2/A3 NPUs have none)",
               factory="convert_to_float8_training")


PATCH_SETS = [nanochat]
