"""``torch.npu`` (and ``torch_npu.npu``) of the emulated NPU.

Every name of the real module's ``__all__`` exists here. What the host can compute is implemented (devices,
streams/events, memory statistics and snapshots, RNG, amp, typed tensors, mstx, the configuration switches); the
rest are placeholders that raise :class:`NotEmulatedError` when called or instantiated, never when looked up
(``unemulated_names()`` lists them). Unknown names raise AttributeError.
"""
from __future__ import annotations

# submodules, attributes of the real module too
from . import (aclnn as aclnn, amp as amp, graphs as graphs, memory as memory, npu_config as npu_config,
               random as random, streams as streams, utils as utils)
from ._unemulated import REAL_EXTRA, module_getattr, placeholder_function
from ._unemulated import NotEmulatedError as NotEmulatedError, unemulated_names as unemulated_names
from .autocast_utils import (get_amp_supported_dtype, get_autocast_dtype, is_autocast_enabled,
                             set_autocast_dtype, set_autocast_enabled)
from .deterministic import disable_deterministic_with_backward, enable_deterministic_with_backward
from .graphs import (NPUGraph, NpuGraphOpHandler, graph, graph_pool_handle, graph_task_group_begin,
                     graph_task_group_end, graph_task_update_begin, graph_task_update_end,
                     is_current_stream_capturing, make_graphed_callables, register_npu_graph_handler,
                     super_kernel_scope_begin, super_kernel_scope_end)
from .memory import (MemPool, NPUPluggableAllocator, caching_allocator_alloc, caching_allocator_delete,
                     change_current_allocator, empty_cache, empty_virt_addr_cache, get_allocator_backend,
                     get_per_process_memory_fraction, host_empty_cache, host_memory_stats,
                     host_memory_stats_as_nested_dict, max_memory_allocated, max_memory_cached,
                     max_memory_reserved, mem_get_info, memory_allocated, memory_cached, memory_reserved,
                     memory_snapshot, memory_stats, memory_stats_as_nested_dict, memory_summary,
                     reset_accumulated_host_memory_stats, reset_accumulated_memory_stats,
                     reset_max_memory_allocated, reset_max_memory_cached, reset_peak_host_memory_stats,
                     reset_peak_memory_stats, set_per_process_memory_fraction, use_mem_pool)
from .mstx import mstx
from .npu_config import (CubeMathType, _allowHF32Conv, _allowHF32Matmul, _npuConfig, are_compatible_impl_enabled,
                         get_device_limit, get_mm_bmm_format_nd, get_task_queue_enable, is_jit_compile_false,
                         set_compile_mode, set_deterministic_level, set_device_limit, set_mm_bmm_format_nd, set_option,
                         set_task_queue_enable, use_compatible_impl)
from .random import (get_rng_state, get_rng_state_all, initial_seed, manual_seed, manual_seed_all, seed, seed_all,
                     set_rng_state, set_rng_state_all)
from .streams import (Event, ExternalEvent, ExternalStream, Stream, StreamContext, SyncLaunchStream,
                      current_stream, default_stream, set_stream, stream)
from ...tensor_types import (BFloat16Storage, BFloat16Tensor, BoolStorage, BoolTensor, ByteStorage, ByteTensor,
                           CharStorage, CharTensor, DoubleStorage, DoubleTensor, FloatStorage, FloatTensor,
                           HalfStorage, HalfTensor, IntStorage, IntTensor, LongStorage, LongTensor, ShortStorage,
                           ShortTensor)
from ascend_shim.sim.runtime import set_op_timeout_ms as set_op_timeout_ms
from .utils import (can_device_access_peer, check_uce_in_memory, clear_npu_overflow_flag, current_blas_handle,
                    current_device, device, device_count, device_of, get_device_capability, get_device_name,
                    get_device_properties, get_npu_overflow_flag, get_sync_debug_mode, init, ipc_collect,
                    is_available, is_bf16_supported, is_initialized, set_device, set_sync_debug_mode, synchronize,
                    utilization)

# Names the real module has outside its __all__, reached on it by torch (AOT autograd calls _get_generator) and by
# NPU-aware code (the lazy-init hooks, the device-index and fork checks, RNG offsets, the default generators).
from ._utils import _get_device_index as _get_device_index
from .random import (_get_generator as _get_generator, _get_rng_state_offset as _get_rng_state_offset,
                     _set_rng_state_offset as _set_rng_state_offset, default_generators as default_generators)
from .utils import _is_in_bad_fork as _is_in_bad_fork, _lazy_call as _lazy_call, _lazy_init as _lazy_init


config = _npuConfig()
matmul = _allowHF32Matmul()
conv = _allowHF32Conv()

# torch_npu.npu.__all__ of the emulated release (torch_npu 2.13.0, paired with the torch this package was checked
# against), in its order: the contract tests compare it with the real wheel's list.
__all__ = [
    "is_initialized", "init", "set_dump", "synchronize", "device_count", "can_device_access_peer", "set_device",
    "current_device", "get_device_name", "get_device_properties", "get_device_capability", "mem_get_info",
    "is_available", "device", "device_of", "StreamContext", "stream", "set_stream", "current_stream",
    "default_stream", "set_sync_debug_mode", "get_sync_debug_mode", "set_task_queue_enable",
    "get_task_queue_enable", "init_dump", "utilization", "finalize_dump", "manual_seed", "manual_seed_all", "seed",
    "seed_all", "initial_seed", "caching_allocator_alloc", "caching_allocator_delete",
    "get_per_process_memory_fraction", "set_per_process_memory_fraction", "empty_cache", "empty_virt_addr_cache",
    "memory_stats", "memory_stats_as_nested_dict", "reset_accumulated_memory_stats", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "memory_cached", "max_memory_cached", "memory_snapshot",
    "memory_summary", "MemPool", "use_mem_pool", "get_allocator_backend", "NPUPluggableAllocator",
    "change_current_allocator", "Stream", "Event", "set_option", "CubeMathType", "set_aoe", "set_compile_mode",
    "set_mm_bmm_format_nd", "get_mm_bmm_format_nd", "get_npu_overflow_flag", "clear_npu_overflow_flag",
    "stress_detect", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "is_jit_compile_false", "get_amp_supported_dtype", "is_autocast_enabled", "is_bf16_supported",
    "set_autocast_enabled", "get_autocast_dtype", "set_autocast_dtype", "BoolStorage", "ByteStorage",
    "ShortStorage", "LongStorage", "IntStorage", "HalfStorage", "CharStorage", "DoubleStorage", "FloatStorage",
    "BoolTensor", "ByteTensor", "CharTensor", "DoubleTensor", "FloatTensor", "HalfTensor", "IntTensor",
    "LongTensor", "ShortTensor", "BFloat16Tensor", "BFloat16Storage", "current_blas_handle", "stop_device",
    "restart_device", "check_uce_in_memory", "config", "matmul", "conv", "enable_deterministic_with_backward",
    "disable_deterministic_with_backward", "mstx", "SyncLaunchStream", "NPUGraph", "graph", "graph_pool_handle",
    "is_current_stream_capturing", "make_graphed_callables", "ExternalEvent", "ExternalStream",
    "graph_task_group_begin", "graph_task_group_end", "graph_task_update_begin", "graph_task_update_end",
    "set_device_limit", "get_device_limit", "set_stream_limit", "reset_stream_limit", "get_stream_limit",
    "ipc_collect", "obfuscation_initialize", "obfuscation_finalize", "obfuscation_calculate", "set_op_timeout_ms",
    "host_empty_cache", "host_memory_stats", "host_memory_stats_as_nested_dict",
    "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats", "set_deterministic_level",
    "use_compatible_impl", "are_compatible_impl_enabled", "NpuGraphOpHandler", "register_npu_graph_handler",
    "super_kernel_scope_begin", "super_kernel_scope_end", "npurt",
]

# Names that need the device runtime, firmware or CANN tooling the emulator does not have: the reason, and the
# real function's parameters.
_DUMPS = "operator data dumps need the CANN dump tooling"
_RECOVERY = "device fault recovery needs the device runtime"
_STREAM_LIMITS = "per-stream core limits need the device runtime"
_OBFUSCATION = "model obfuscation needs the CANN runtime"
set_dump = placeholder_function("torch.npu.set_dump", _DUMPS, "cfg_file")
init_dump = placeholder_function("torch.npu.init_dump", _DUMPS, "")
finalize_dump = placeholder_function("torch.npu.finalize_dump", _DUMPS, "")
set_aoe = placeholder_function("torch.npu.set_aoe", "AOE tuning needs the CANN tuning tools", "dump_path")
stress_detect = placeholder_function("torch.npu.stress_detect", "hardware stress detection needs the device firmware",
                                     "detect_type='aic'")
stop_device = placeholder_function("torch.npu.stop_device", _RECOVERY, "device_id")
restart_device = placeholder_function("torch.npu.restart_device", _RECOVERY,
                                      "device_id, rebuild_all_resources=False, disable_tensor_unsafe_check=False")

set_stream_limit = placeholder_function("torch.npu.set_stream_limit", _STREAM_LIMITS,
                                        "stream, cube_num=-1, vector_num=-1")
reset_stream_limit = placeholder_function("torch.npu.reset_stream_limit", _STREAM_LIMITS, "stream")
get_stream_limit = placeholder_function("torch.npu.get_stream_limit", _STREAM_LIMITS, "stream")
obfuscation_initialize = placeholder_function(
    "torch.npu.obfuscation_initialize", _OBFUSCATION,
    "hidden_size, tp_rank, cmd, *, data_type=None, model_obf_seed_id=0, data_obf_seed_id=0, thread_num=4, "
    "obf_coefficient=1.0")
obfuscation_finalize = placeholder_function("torch.npu.obfuscation_finalize", _OBFUSCATION, "fd_to_close")
obfuscation_calculate = placeholder_function("torch.npu.obfuscation_calculate", _OBFUSCATION,
                                             "fd, x, param, *, obf_coefficient=1.0")
npurt = placeholder_function("torch.npu.npurt", "the raw NPU runtime API module needs CANN", "")

_extra_getattr = module_getattr("torch.npu", REAL_EXTRA)


def __getattr__(name: str):
    if name == "_initialized":  # read by torch (activation checkpointing): follows the lazy device state
        return is_initialized()
    return _extra_getattr(name)
