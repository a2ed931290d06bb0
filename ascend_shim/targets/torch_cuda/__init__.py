"""torch.cuda -> torch.npu: the whole public ``torch.cuda`` surface, name by name.

Each public name gets one treatment, so nothing is left on its CUDA implementation by accident (Huawei's
transfer_to_npu copies only ``torch.npu.__all__`` and leaves ~40 names on CUDA):

* alias: the npu function has the same semantics (``torch.cuda.empty_cache`` is ``torch.npu.empty_cache``);
* device argument: the npu function, with a CUDA device argument translated;
* special: caller-aware availability, a configurable capability, properties with CUDA fields,
  CUDAGraph -> NPUGraph, nvtx, legacy tensor types, default generators;
* unsupported: a CUDA-only facility (jiterator, nccl, cudart, tunable, NVML readings ...) raises
  :class:`~ascend_shim.errors.UnsupportedOnNPUError` naming the feature when used, and is reported;
* neutral: a query with a documented neutral answer (``get_arch_list() == []``), reported when used.
Names that are plain Python helpers (``typing`` re-exports, ``os``) are left alone.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet
from ascend_shim.targets.torch_devices import TRANSLATING


LEGACY_TENSORS = {"BFloat16Tensor": "bfloat16", "BoolTensor": "bool", "ByteTensor": "uint8", "CharTensor": "int8",
                  "DoubleTensor": "float64", "FloatTensor": "float32", "HalfTensor": "float16",
                  "IntTensor": "int32", "LongTensor": "int64", "ShortTensor": "int16"}
REMOVE = "never: CUDA code calls torch.cuda, which torch_npu never answers (its functions live in torch.npu)"
cuda = PatchSet(
    id="torch_cuda", title="torch.cuda -> torch.npu, name by name",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim backend",
    implementation=f"{__name__}.impl"
)

# same semantics on torch.npu, no device argument
ALIASES = ("current_device", "device", "device_of", "empty_cache", "init", "initial_seed", "ipc_collect",
           "memory_snapshot",
           "is_initialized", "is_bf16_supported", "manual_seed", "manual_seed_all", "seed", "seed_all",
           "get_rng_state_all", "set_rng_state_all", "set_stream", "stream", "StreamContext",
           "ExternalStream", "MemPool", "use_mem_pool", "get_allocator_backend", "caching_allocator_alloc",
           "caching_allocator_delete", "get_per_process_memory_fraction", "is_current_stream_capturing", "graph",
           "graph_pool_handle", "make_graphed_callables", "host_memory_stats", "host_memory_stats_as_nested_dict",
           "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats", "get_sync_debug_mode",
           "set_sync_debug_mode", "change_current_allocator")
# npu functions with a device argument that may be a CUDA device: the argument's name in torch.cuda (its
# position is read from the function itself when the patch applies; where torch_npu names it differently,
# get_device_name(device_name=None), the CUDA keyword is renamed: see impl.cuda_callable)
DEVICE_ARG = {name: "device" for name in (
    "set_device", "synchronize", "get_device_name", "mem_get_info", "memory_stats", "memory_stats_as_nested_dict",
    "memory_summary", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_cached", "max_memory_cached", "reset_peak_memory_stats", "reset_max_memory_allocated",
    "reset_max_memory_cached", "reset_accumulated_memory_stats", "get_rng_state", "set_rng_state", "current_stream",
    "default_stream", "set_per_process_memory_fraction", "Stream", "utilization", "can_device_access_peer")}
# CUDA-only facilities: using them raises a clear error
UNSUPPORTED = {
    "jiterator": "CUDA jiterator (runtime-compiled CUDA kernels)", "cudart": "the CUDA runtime API",
    "tunable": "TunableOp (CUDA GEMM tuning)", "gds": "GPUDirect Storage",
    "temperature": "NVML temperature", "power_draw": "NVML power draw", "clock_rate": "NVML clock rate",
    "memory_usage": "NVML memory usage", "device_memory_used": "NVML device memory used",
    "CUDAPluggableAllocator": "a CUDA pluggable allocator",
    "GreenContext": "CUDA green contexts", "green_contexts": "CUDA green contexts",
    "check_error": "CUDA error codes", "cudaStatus": "CUDA status codes",
    "current_blas_handle": "the cuBLAS handle", "current_solver_handle": "the cuSOLVER handle",
    "get_stream_from_external": "external CUDA streams", "caching_allocator_enable": "toggling the CUDA allocator",
    "caching_allocator_disabled": "toggling the CUDA allocator",
}
STORAGES = ("BFloat16Storage", "BoolStorage", "ByteStorage", "CharStorage", "ComplexDoubleStorage",
            "ComplexFloatStorage", "DoubleStorage", "FloatStorage", "HalfStorage", "IntStorage", "LongStorage",
            "ShortStorage")
# queries with a documented neutral answer
NEUTRAL = {"get_arch_list": [], "get_gencode_flags": "", "has_half": True, "has_magma": False}

# The torch.npu names this set maps onto, and what its patch does where a torch_npu release lacks one:
# "skip" -- resolved through impl.npu_attribute, so the patch is skipped and reported;
# "fallback" -- a reported fallback; "required" -- read directly, it must exist in every torch_npu release of the
# set's torch range.
# (the contract tests check this against the real releases.)
NPU_NAMES = {**{name: "skip" for name in (*ALIASES, *DEVICE_ARG, "NPUGraph", "default_generators")},
             "Event": "required",
             "mstx": "fallback", "is_available": "required", "device_count": "required",
             "get_device_properties": "required"}


for _name in ALIASES:
    cuda.patch(f"torch.cuda:{_name}", kind="replace", covers=(f"torch.cuda.{_name}",),
               why=f"torch.cuda.{_name} talks to the CUDA runtime, absent on an NPU machine.",
               what=f"torch.cuda.{_name} is torch.npu.{_name} (same semantics).", remove_when=REMOVE,
               factory="alias", kwargs={"name": _name})

for _name, _arg in DEVICE_ARG.items():
    cuda.patch(f"torch.cuda:{_name}", kind="wrap", covers=(f"torch.cuda.{_name}",),
               why=f"torch.cuda.{_name} talks to the CUDA runtime, absent on an NPU machine.",
               what=f"torch.cuda.{_name} calls torch.npu.{_name} with a CUDA device argument translated.",
               remove_when=REMOVE, factory="device_argument_function", kwargs={"name": _name, "arg": _arg})


cuda.patch("torch.cuda:is_available", kind="wrap", covers=("torch.cuda.is_available",),
           why="user code takes its accelerator path only if CUDA is available; NPU-native libraries must see "
               "the truth or they take CUDA-only paths (accelerate#3020).",
           what="caller-aware: user code gets torch.npu.is_available(); torch and NPU-native libraries "
                "(registered by their patch sets) get the real CUDA answer. Thread- and exception-safe.",
           remove_when=REMOVE, factory="is_available")


cuda.patch("torch.cuda:device_count", kind="wrap", covers=("torch.cuda.device_count",),
           why="user code sizes its device loops with device_count(); NPU-native libraries must see the truth.",
           what="caller-aware: user code gets torch.npu.device_count(), torch and native libraries the real one.",
           remove_when=REMOVE, factory="device_count")


cuda.patch("torch.cuda:get_device_capability", kind="replace", fidelity="neutral",
           covers=("torch.cuda.get_device_capability",),
           why="torch_npu answers None, so `major, minor = get_device_capability()` and `>= (8, 0)` crash "
               "(nanochat fails at import).",
           what="answers the configured capability (ASCEND_SHIM_CUDA_CAPABILITY, default 8.0: bf16 yes, fp8 and "
                "Hopper-only kernels no).",
           remove_when="https://github.com/Ascend/pytorch/blob/9e73e708ab9350d203475609f36f8a43f6a0c2ab/torch_npu/npu/"
                       "__init__.py: torch.npu.get_device_capability() answers None unless "
                       "TORCH_NPU_DEVICE_CAPABILITY is set",
           factory="get_device_capability")


cuda.patch("torch.cuda:get_device_properties", kind="wrap", covers=("torch.cuda.get_device_properties",),
           why="CUDA code reads .major/.minor/.multi_processor_count, and sizes launch grids and occupancy "
               "heuristics with .warp_size/.regs_per_multiprocessor/.max_threads_per_multi_processor: NPU "
               "properties lack the first and answer None for the others (the NPU has no warps or register file).",
           what="the NPU's properties (name, total_memory, uuid ...) plus major/minor (the configured capability), "
                "multi_processor_count (the AI-core count) and the warp size, registers and resident threads per "
                "multiprocessor CUDA documents for the configured capability (32, 65536, 2048 at 8.0): they "
                "size grids only, no result depends on them. A CUDA device argument is translated.",
           remove_when=REMOVE, factory="device_properties")


cuda.patch("torch.cuda:is_tf32_supported", kind="replace", fidelity="neutral",
           covers=("torch.cuda.is_tf32_supported",),
           why="code enables TF32 matmuls only if supported; the NPU's counterpart is HF32.",
           what="answers True (HF32 plays TF32's role; the torch_features set maps the TF32 flags onto it).",
           remove_when=REMOVE, factory="is_tf32_supported")


cuda.patch("torch.cuda:CUDAGraph", kind="replace", covers=("torch.cuda.CUDAGraph", "cuda-graph"),
           why="CUDA graphs capture CUDA streams; the NPU has its own graph type.",
           what="torch.cuda.CUDAGraph is torch.npu.NPUGraph (graph/make_graphed_callables are aliased too); "
                "where NPU graphs are unavailable that class raises a clear error.",
           remove_when=REMOVE, factory="cuda_graph")


cuda.patch("torch.cuda:default_generators", kind="replace", covers=("torch.cuda.default_generators",),
           why="code seeds or snapshots torch.cuda.default_generators directly.",
           what="the NPU's default generators, read at each use (torch_npu fills them in at the device's first "
                "use, after torch.cuda is patched).", remove_when=REMOVE, factory="default_generators")


cuda.patch("torch.cuda:nvtx", kind="replace", fidelity="neutral", covers=("torch.cuda.nvtx",),
           why="nvtx ranges annotate CUDA profiles; NVTX does not exist on the NPU.",
           what="range_push/range_pop/range_start/range_end/mark/range go to torch.npu.mstx when it exists, "
                "otherwise they are recorded no-ops (reported as fallbacks).",
           remove_when=REMOVE, factory="nvtx_module")


cuda.patch("torch.cuda:nccl", kind="replace", fidelity="neutral", covers=("torch.cuda.nccl",),
           why="code checks torch.cuda.nccl.version() after dist.is_nccl_available() (torchtune enables bf16 "
               "where it is >= (2, 10)); on the NPU HCCL plays NCCL's role, and there are no direct NCCL calls.",
           what="version() answers (2, 20, 5), the NCCL of torch 2.4's CUDA wheels (the oldest torch supported), "
                "standing for HCCL: gates written for the supported torch range pass, nothing newer is claimed "
                "(reported); is_available(tensors) is False; the direct calls (all_reduce, broadcast ...) raise "
                "UnsupportedOnNPUError naming them.",
           remove_when=REMOVE, factory="nccl")


cuda.patch("torch.cuda:list_gpu_processes", kind="replace", fidelity="neutral",
           covers=("torch.cuda.list_gpu_processes",),
           why="code prints torch.cuda.list_gpu_processes() when it runs out of memory; it reads NVML, which an NPU "
               "machine lacks.",
           what="answers the device's 'GPU:<index>' line and a line saying the process list is not available on "
                "the NPU (npu-smi info shows it), as torch answers a line when pynvml is missing (reported).",
           remove_when=REMOVE, factory="list_gpu_processes")


cuda.patch("torch.cuda:Event", kind="replace", covers=("torch.cuda.Event",),
           why="torch.cuda.Event times CUDA streams; CUDA raises ValueError for elapsed_time on an event that was "
               "not recorded or made without enable_timing, and code catches that, where torch_npu raises "
               "RuntimeError.",
           what="torch.cuda.Event is torch.npu.Event whose elapsed_time raises ValueError (same message) in those "
                "two cases; every NPU event passes isinstance(e, torch.cuda.Event). torch.npu.Event is unchanged.",
           remove_when="never: torch_npu's NPUEvent::elapsed_time raises RuntimeError (TORCH_CHECK)",
           factory="cuda_event")


cuda.patch("torch.cuda:Stream.cuda_stream", kind="call", covers=("torch.cuda.Stream.cuda_stream",),
           why="code hands torch.cuda.current_stream().cuda_stream (the raw stream handle) to its own kernels and "
               "libraries; NPU streams call it npu_stream.",
           what="NPU streams have cuda_stream, the same handle as npu_stream.", remove_when=REMOVE,
           factory="cuda_stream")


cuda.patch("torch:set_default_tensor_type", kind="wrap", covers=("torch.cuda.*Tensor",),
           why="torch.set_default_tensor_type(torch.cuda.HalfTensor) (Meta's llama) makes new tensors CUDA half "
               "ones; torch accepts no NPU tensor type there, so it was refused.",
           what="a CUDA tensor type (class or 'torch.cuda.HalfTensor') sets its dtype as the default dtype (torch's "
                "check: floating-point types only) and the NPU as the default device (reported); a CPU type "
                "afterwards clears that default device. Other types pass through.",
           remove_when=REMOVE, factory="set_default_tensor_type")


for _name, _feature in list(UNSUPPORTED.items()) + [(s, "CUDA typed storages") for s in STORAGES]:
    cuda.patch(f"torch.cuda:{_name}", kind="replace", fidelity="unsupported", covers=(f"torch.cuda.{_name}",),
               why=f"{_feature} has no NPU equivalent.",
               what=f"using torch.cuda.{_name} raises UnsupportedOnNPUError naming it (and is reported) instead of "
                    "a CUDA error deep inside.",
               remove_when="never: a CUDA-only feature; an NPU counterpart would turn this error into a "
                           "translation", factory="unsupported", kwargs={"name": _name, "feature": _feature})

for _name, _value in NEUTRAL.items():
    cuda.patch(f"torch.cuda:{_name}", kind="replace", fidelity="neutral", covers=(f"torch.cuda.{_name}",),
               why=f"torch.cuda.{_name} describes the CUDA build, which the NPU does not have.",
               what=f"answers {_value!r} (documented neutral value), reported when called.",
               remove_when=REMOVE, factory="neutral_answer", kwargs={"name": _name, "value": _value})


for _name, _dtype in LEGACY_TENSORS.items():
    cuda.patch(f"torch.cuda:{_name}", kind="replace", covers=(f"torch.cuda.{_name}",),
               why=f"legacy torch.cuda.{_name}(...) constructors and isinstance checks name CUDA.",
               what=f"builds an npu tensor of dtype {_dtype} (no silent precision change: DoubleTensor stays "
                    "float64); isinstance checks dtype and npu device.",
               remove_when=REMOVE, factory="legacy_tensor_class", kwargs={"name": _name, "dtype_name": _dtype})


for _name in ("_record_memory_history", "_snapshot", "_dump_snapshot"):
    cuda.patch(f"torch.cuda.memory:{_name}", kind="replace", covers=(f"torch.cuda.memory.{_name}",),
               why=f"torch.cuda.memory.{_name} (memory-history snapshots) talks to the CUDA caching allocator.",
               what=f"torch.cuda.memory.{_name} is torch.npu.memory.{_name} (the NPU allocator's snapshot).",
               remove_when=REMOVE, factory="npu_memory", kwargs={"name": _name})


cuda.patch("torch:Tensor.type", covers=("device-compare:tensor-type",),
           why="x.type('torch.cuda.HalfTensor') and x.type(torch.cuda.HalfTensor) convert to a CUDA tensor type; "
               "CUDA code tells tensors apart by x.type() == 'torch.cuda.FloatTensor' (megatron-core's "
               "optimizers: param.type() in ['torch.cuda.FloatTensor', ...]).",
           what="the CUDA type (string or class) becomes the NPU's (torch.npu.HalfTensor): same dtype, on the NPU; "
                "other arguments pass through. x.type() of an NPU tensor reads 'torch.cuda.FloatTensor' ... to "
                "CUDA code (the user's and every library that is not NPU-native) and 'torch.npu.FloatTensor' to "
                "torch and NPU-native libraries (caller-aware, like is_available()).",
           remove_when=REMOVE, factory="tensor_type")


for _name in ("custom_fwd", "custom_bwd"):
    cuda.patch(f"torch.amp:{_name}", covers=(f"torch.cuda.amp.{_name}",),
               why=f"@torch.amp.{_name}(device_type='cuda') (and torch.cuda.amp.{_name}) bind to CUDA autocast.",
               what="device_type 'cuda' -> 'npu'.", remove_when=REMOVE,
               factory=TRANSLATING,
               kwargs={"api": f"torch.amp.{_name}", "name": "device_type", "ints": False})

PATCH_SETS = [cuda]
