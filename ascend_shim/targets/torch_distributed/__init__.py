"""torch.distributed on the NPU: nccl -> hccl, cuda device meshes and DDP/FSDP devices -> npu, AVG on HCCL.

Backend names are translated as values: ``"nccl"`` and the ``"cpu:gloo,cuda:nccl"`` form; an ``init_method``
URL or a file path that contains "nccl" is never touched.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet
from ascend_shim.targets.torch_devices import TRANSLATING


REMOVE = "never: CUDA code names NCCL, cuda devices and CUDA's variables; the NPU's are HCCL, npu and Ascend's"
dist = PatchSet(
    id="torch_distributed", title="torch.distributed: nccl -> hccl, cuda meshes/devices -> npu",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim hccl backend",
    implementation=f"{__name__}.impl"
)


dist.patch("torch.distributed:init_process_group", covers=("nccl",),
           why="init_process_group('nccl') fails on an NPU machine (no NCCL); device_id=cuda:N names CUDA.",
           what="backend 'nccl' -> 'hccl', 'cpu:gloo,cuda:nccl' -> 'cpu:gloo,npu:hccl', device_id cuda -> npu; "
                "init_method and other strings untouched.",
           remove_when=REMOVE, factory="init_process_group")


dist.patch("torch.distributed:new_group",
           why="new_group(backend='nccl') names NCCL.", what="backend 'nccl' -> 'hccl'.", remove_when=REMOVE,
           factory="new_group")


dist.patch("torch.distributed:new_subgroups",
           why="new_subgroups(backend='nccl') names NCCL.", what="backend 'nccl' -> 'hccl'.", remove_when=REMOVE,
           factory="new_subgroups")


dist.patch("torch.distributed:is_nccl_available", kind="wrap", covers=("torch.distributed.is_nccl_available",),
           why="user code checks for NCCL before choosing the GPU path.",
           what="caller-aware: user code gets is_hccl_available(); torch and native libraries the real answer.",
           remove_when=REMOVE, factory="is_nccl_available")


dist.patch("torch.distributed:get_backend", kind="wrap",
           why="user code compares get_backend() with 'nccl' and takes a CPU/gloo branch otherwise.",
           what="caller-aware: user code sees 'nccl' where the backend is hccl (reported); torch and native "
                "libraries see 'hccl'.",
           remove_when=REMOVE, factory="get_backend")


dist.patch("torch.distributed:get_default_backend_for_device", kind="wrap",
           why="user code asks get_default_backend_for_device('cuda') and compares it with 'nccl' (get_backend() "
               "already answers it 'nccl').",
           what="caller-aware, like get_backend: user code sees 'nccl' where the answer is hccl (reported); torch "
                "and native libraries see 'hccl'.",
           remove_when=REMOVE, factory="get_default_backend_for_device")


dist.patch("torch.distributed.device_mesh:init_device_mesh",
           why="init_device_mesh('cuda', ...) fails without CUDA.", what="device_type 'cuda' -> 'npu'.",
           remove_when=REMOVE,
           factory=TRANSLATING, kwargs={"api": "init_device_mesh", "name": "device_type", "ints": False})


dist.patch("torch.distributed.device_mesh:DeviceMesh.__init__",
           why="DeviceMesh(device_type='cuda', ...) fails without CUDA.", what="device_type 'cuda' -> 'npu'.",
           remove_when=REMOVE, factory=TRANSLATING, kwargs={"api": "DeviceMesh", "name": "device_type", "ints": False})


dist.patch("torch.nn.parallel:DistributedDataParallel.__init__",
           why="DDP(device_ids=['cuda:0'], output_device='cuda:0') names CUDA devices.",
           what="each device_ids entry and output_device are translated (ints stay indices of the NPU).",
           remove_when=REMOVE, factory="translating_ddp_devices")


dist.patch("torch.distributed.fsdp:FullyShardedDataParallel.__init__",
           why="FSDP(device_id=torch.device('cuda', i) or 'cuda:i') names CUDA.",
           what="device_id is translated.", remove_when=REMOVE,
           factory=TRANSLATING, kwargs={"api": "FullyShardedDataParallel", "name": "device_id", "ints": False})


dist.patch("torch.distributed:all_reduce", fidelity="fallback", covers=("ReduceOp.AVG",),
           why="HCCL of torch_npu < 2.6 rejects ReduceOp.AVG ('Cannot use ReduceOp.AVG with HCCL'); nanochat "
               "and others use it.",
           what="with such a torch_npu, all_reduce(op=AVG) on hccl runs SUM then divides by the group size "
                "(reported); not applied where torch_npu accepts AVG.",
           remove_when="torch_npu>=2.6: HCCL of torch_npu 2.6 and later accepts ReduceOp.AVG (sum, then divide)",
           factory="avg_as_sum",
           kwargs={"api": "torch.distributed.all_reduce", "tensor_name": "tensor"})


dist.patch("torch.distributed:reduce_scatter_tensor", fidelity="fallback", covers=("ReduceOp.AVG",),
           why="HCCL of torch_npu < 2.6 rejects ReduceOp.AVG in reduce-scatter too.",
           what="with such a torch_npu, reduce_scatter_tensor(op=AVG) on hccl runs SUM then divides the output "
                "by the group size; not applied where torch_npu accepts AVG.",
           remove_when="torch_npu>=2.6: HCCL of torch_npu 2.6 and later accepts ReduceOp.AVG (sum, then divide)",
           factory="avg_as_sum",
           kwargs={"api": "torch.distributed.reduce_scatter_tensor", "tensor_name": "output"})


dist.patch("torch.distributed:all_reduce", id="torch_distributed.all_reduce_float64", fidelity="fallback",
           why="HCCL cannot reduce float64 ('HCCL allreduce: Unsupported data type at::kDouble'); CUDA code "
               "reduces float64 where fp32 is too coarse (Megatron-LM all-reduces its start-up timestamps with "
               "MIN: epoch seconds need float64).",
           what="a blocking all_reduce of a float64 npu tensor on hccl with SUM, AVG, PRODUCT, MIN or MAX "
                "gathers the group's tensors (HCCL moves float64) and reduces them in float64 on each rank, in "
                "rank order (reported); everything else, async_op=True included, goes to HCCL unchanged.",
           remove_when="https://github.com/Ascend/pytorch/blob/9e73e708ab9350d203475609f36f8a43f6a0c2ab/torch_npu/"
                       "csrc/distributed/ProcessGroupHCCL.cpp: HCCL reduces float64 only on Ascend950, not on Atlas "
                       "A2/A3",
           factory="float64_all_reduce")


# -- environment ---------------------------------------------------------------------------------------------
ENV = {
    "CUDA_VISIBLE_DEVICES": "ASCEND_RT_VISIBLE_DEVICES",
    "PYTORCH_ALLOC_CONF": "PYTORCH_NPU_ALLOC_CONF",  # first: torch prefers it to the deprecated CUDA name
    "PYTORCH_CUDA_ALLOC_CONF": "PYTORCH_NPU_ALLOC_CONF",
    "CUDA_LAUNCH_BLOCKING": "ASCEND_LAUNCH_BLOCKING",
    "NCCL_SOCKET_IFNAME": "HCCL_SOCKET_IFNAME",
}
#: read by the NPU runtime only when torch starts it, and often set by a script's own first lines (nanochat's
#: base_train, chat_sft) after activation but before ``import torch``: translated when torch is imported
AT_TORCH_IMPORT = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
environment = PatchSet(id="environment", title="CUDA/NCCL environment variables -> Ascend/HCCL counterparts",
                       implementation=f"{__name__}.impl")


for _cuda_var, _npu_var in ENV.items():
    _late = _cuda_var in AT_TORCH_IMPORT
    environment.patch("torch" if _late else f"env:{_cuda_var}", kind="env", covers=(f"env:{_cuda_var}",),
                      why=f"{_cuda_var} configures CUDA; the NPU runtime reads {_npu_var}."
                          + (" Scripts often set it in their first lines, before importing torch." if _late else ""),
                      what=f"{_npu_var} is set from {_cuda_var} when it is unset ("
                           + ("when torch is imported, before torch_npu starts" if _late else "at activation")
                           + "); a value the user set wins.",
                      remove_when=REMOVE, id=f"environment.{_cuda_var}",
                      factory=f"{__name__}.environment:npu_variable_from_cuda",
                      kwargs={"cuda_var": _cuda_var, "npu_var": _npu_var})

#: read by the NPU runtime until the program first uses a device: a later assignment by the program is followed
FOLLOWED = ("CUDA_VISIBLE_DEVICES",)


for _cuda_var in FOLLOWED:
    environment.patch("os:environ", kind="call", covers=(f"env:{_cuda_var}",),
                      id=f"environment.{_cuda_var}_set_by_program",
                      why=f"scripts set {_cuda_var} in their first lines (os.environ[...] = '1'), after activation "
                          f"and before their first device use: CUDA honours it until then, the NPU runtime reads "
                          f"{ENV[_cuda_var]} until then.",
                      what=f"each assignment (or deletion) of os.environ[{_cuda_var!r}] also sets (or unsets) "
                           f"{ENV[_cuda_var]}, unless the user set that one (reported); it takes effect where the "
                           "device is not yet in use, as on CUDA. Other environment writes pass through.",
                      remove_when=REMOVE,
                      factory=f"{__name__}.environment:follow_cuda_variable",
                      kwargs={"cuda_var": _cuda_var, "npu_var": ENV[_cuda_var]})

PATCH_SETS = [dist, environment]
