"""realhf (AReaL's legacy ``realhf`` package, removed from AReaL main on 2026-01-07): CUDA-only by construction.

realhf decides "GPU or CPU" with ``torch.cuda.is_available()`` (``base/constants.py: use_cuda()``) and has no NPU
code, so it takes the full redirect the torch-level sets give user code (cuda devices, nccl, torch.cuda.*,
``@torch.compile`` on the inductor-free backend). Its attention calls ``flash_attn`` directly for any non-CPU
tensor -- ``flash_attn_varlen_func`` (packed prefill) and ``flash_attn_with_kvcache`` with fused rotary
(``rotary_cos/sin`` offset by ``cache_seqlens``) and in-place caches (decode); the flash_attn set's provider
serves both. What is left is realhf's own:

* ``pynvml``: imported at the top of ``base/monitor.py``, ``base/testing.py`` (reached by every model import via
  ``api/from_hf/*``) and ``system/model_worker.py``; on Ascend it is absent or cannot find NVML. This set answers
  ``import pynvml`` with an NPU-backed module (counts, names, memory from ``torch.npu.mem_get_info``,
  utilization from ``torch.npu.utilization`` or a reported neutral 0; the rest raises NVMLError_NotSupported);
* CUDA graphs: ``GenerationHyperparameters.use_cuda_graph`` defaults to True and decoding captures
  ``torch.cuda.CUDAGraph``s around the kv-cache attention step. The shim maps CUDAGraph to NPUGraph, but
  capturing realhf's decode step (host-side cache lengths in the NPU attention call) is not known to work, so
  decoding runs eagerly (reported); disable patch ``realhf.no_cuda_graph`` to keep graphs (NPUGraph);
* ``torch.cuda.jiterator._create_jit_fn`` runs at import of ``impl/model/modules/activations.py``: creating a
  jiterator function is allowed (it fails only when called, as on a CPU build of torch);
* the GPU count: ``base/gpu_utils.gpu_count()`` lists ``/dev/nvidia<N>``, which an Ascend box does not have; its
  local scheduler then gives every worker ``CUDA_VISIBLE_DEVICES=""`` and the model is built on the CPU without a
  word. The count is the node's NPUs instead (``/dev/davinci<N>``, or the emulated devices).

realhf never had a distribution of its own (AReaL's wheels include only ``areal*``; realhf runs from a checkout),
so the gate reads ``realhf/version.py``.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet
from ascend_shim.versions import Project


REMOVE = ("https://github.com/inclusionAI/AReaL/pull/806: AReaL removed realhf (2026-01-07); these patches serve "
          "checkouts of AReaL v0.3/v0.4 and go with them")
SPEC = ">=0.3.0.dev0,<0.4"
realhf = PatchSet(
    project=Project("realhf", SPEC),
    id="realhf", title="realhf (legacy AReaL): pynvml on the NPU, CUDA-graph decoding off, jiterator at import, "
          "GPU count",
    checked_against="inclusionAI/AReaL @ c5711f06a7a8 (2026-01-07, last commit with realhf/, realhf.version "
                    f"0.3.0-dev), run from a checkout; gated on realhf/version.py ({SPEC})",
                    implementation=f"{__name__}.impl"
)


realhf.patch("realhf", kind="call", id="realhf.pynvml", covers=("pynvml",), fidelity="fallback",
             why="realhf imports pynvml at module level (base/monitor.py, base/testing.py -- reached by every model "
                 "import --, system/model_worker.py) and calls nvmlInit/GetMemoryInfo/GetUtilizationRates; on "
                 "Ascend pynvml is absent, or installed without an NVIDIA driver (nvmlInit fails).",
             what="when realhf is imported (its __init__ imports only its version), `import pynvml` is answered by "
                  "an NPU-backed pynvml: device count/name, memory (torch.npu.mem_get_info), utilization "
                  "(torch.npu.utilization, or 0 reported as neutral); other NVML calls raise "
                  "NVMLError_NotSupported. Undone on deactivation.",
             remove_when=REMOVE, factory="provide_pynvml")


realhf.patch("realhf.api.cli_args:GenerationHyperparameters.__post_init__", id="realhf.no_cuda_graph",
             fidelity="fallback", covers=("cuda-graph", "torch.cuda.CUDAGraph"),
             why="use_cuda_graph defaults to True: realhf captures its decode step (kv-cache attention with "
                 "host-side cache lengths) in torch.cuda.CUDAGraph; capturing that step as an NPUGraph is not "
                 "known to work, and the emulator has no graph runtime.",
             what="GenerationHyperparameters.use_cuda_graph is set to False (decoding runs eagerly; reported once "
                  "per process). Disable this patch to keep graphs: torch_cuda maps CUDAGraph to NPUGraph.",
             remove_when="https://github.com/inclusionAI/AReaL/pull/806: realhf is frozen (removed from AReaL), "
                         "and its decode step is not known to capture as an NPUGraph", factory="no_cuda_graph")


realhf.patch("realhf", kind="call", id="realhf.jiterator_at_import", covers=("torch.cuda.jiterator",),
             fidelity="unsupported",
             why="realhf/impl/model/modules/activations.py creates jiterator functions at import "
                 "(torch.cuda.jiterator._create_jit_fn); torch_cuda makes any jiterator use an immediate error, "
                 "so every realhf model import would fail although realhf never calls those functions on its "
                 "model path (SwiGLUFunction is unused there).",
             what="for callers inside realhf, creating a jiterator function succeeds (as on a CPU build of torch) "
                  "and calling it raises UnsupportedOnNPUError naming it; other code keeps torch_cuda's answer.",
             remove_when=REMOVE, factory="jiterator_for_realhf")


realhf.patch("realhf.base.gpu_utils:gpu_count", id="realhf.gpu_count",
             why="realhf counts a node's GPUs by listing /dev/nvidia<N>; an Ascend box has none, so the count is 0, "
                 "its local scheduler gives every worker CUDA_VISIBLE_DEVICES=\"\" and the model is built on the "
                 "CPU without a word.",
             what="when realhf finds no /dev/nvidia<N>, the count is the node's NPUs (/dev/davinci<N>; with the "
                  "emulated NPU, its device count), reported; a node with NVIDIA device nodes keeps realhf's count.",
             remove_when=REMOVE, factory="gpu_count")


PATCH_SETS = [realhf]
