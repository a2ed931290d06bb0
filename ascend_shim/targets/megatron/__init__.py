"""Megatron-LM / megatron-core (NVIDIA/Megatron-LM, distribution ``megatron-core``): CUDA-first, no NPU code.

megatron-core is CUDA code by the shim's rule (not NPU-native): it is told CUDA is available, its
``device.type == "cuda"`` / ``backend == "nccl"`` checks are rewritten as it loads, and the type checks of its
optimizers (``param.type() in ['torch.cuda.HalfTensor', 'torch.cuda.BFloat16Tensor']``,
``== 'torch.cuda.FloatTensor'``) read ``x.type()`` as CUDA names; its ``torch.cuda`` calls, ``device="cuda"``
tensors, ``init_process_group("nccl")`` and ``torch.amp.custom_fwd(device_type="cuda")`` are translated by the
torch-level sets. That takes its own ``examples/run_simple_mcore_train_loop.py`` (TP=2 under torchrun) through
training, distributed checkpointing and reloading. What is left is in Megatron-LM's training package
(``megatron.training``, used by ``pretrain_gpt.py``):

* ``initialize._compile_dependencies()`` calls ``megatron.legacy.fused_kernels.load(args)``, which runs
  ``$CUDA_HOME/bin/nvcc -V`` (CUDA_HOME is None on an Ascend host: ``TypeError`` before training starts). Since
  the fused softmax kernels moved to apex (2023) ``load`` compiles nothing: it reads the
  nvcc version and makes its build directory.

Its start-up all-reduces float64 timestamps, which HCCL cannot reduce: torch_distributed's float64 fallback
serves them. Not handled (an error names them where they are reached): TransformerEngine (``--transformer-impl
transformer_engine``, the default of ``pretrain_gpt.py``: use ``--transformer-impl local``) and apex fusions
(``--no-gradient-accumulation-fusion``, ``--no-masked-softmax-fusion``, ``--no-persist-layer-norm``); Megatron
requires ``CUDA_DEVICE_MAX_CONNECTIONS=1`` for tensor parallelism, as on GPUs.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet
from ascend_shim.versions import Project


SPEC = ">=0.12,<0.17"
megatron = PatchSet(
    project=Project("megatron", SPEC, dist="megatron-core", version_file="core/package_info.py"),
    id="megatron", title="Megatron-LM training package: the nvcc version query of fused_kernels.load",
    checked_against="megatron-core 0.16.1 (PyPI wheel) with NVIDIA/Megatron-LM @ core_v0.16.1 (megatron.training, "
                    "megatron.legacy); fused_kernels.load compiles nothing from core_v0.12.0 to 0.16.x and is gone in "
                    f"0.17 ({SPEC})", implementation=f"{__name__}.impl"
)


megatron.patch("megatron.legacy.fused_kernels:load", id="megatron.fused_kernels_load",
               why="megatron.training's _compile_dependencies() calls fused_kernels.load(args), which runs "
                   "$CUDA_HOME/bin/nvcc -V; an Ascend host has no CUDA toolkit (CUDA_HOME is None) and training "
                   "stops with a TypeError before it starts.",
               what="without a CUDA toolkit, load() does what it does besides the version query -- it makes its "
                    "build directory -- and compiles nothing, as it never does in these versions; with one, it "
                    "runs unchanged.",
               remove_when="megatron-core>=0.17: Megatron-LM core_v0.17.0 removed megatron.legacy.fused_kernels and "
                           "its load() call", factory="fused_kernels_load")


PATCH_SETS = [megatron]
