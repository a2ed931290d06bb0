"""torch_npu.npu names the emulator knows of but does not emulate, and the error they raise.

The list is the real ``torch_npu.npu.__all__`` (torch_npu 2.14) minus what the emulator implements. Touching one
of these raises :class:`NotEmulatedError` rather than returning something plausible but made up. It is a
``NotImplementedError``, not an ``AttributeError``, so ``hasattr()`` raises too: the API exists on real hardware.
"""
from ascend_shim.sim.errors import NotEmulatedError

REAL_ALL = (
    "is_initialized", "init", "set_dump", "synchronize", "device_count", "can_device_access_peer", "set_device",
    "current_device", "get_device_name", "get_device_properties", "get_device_capability", "mem_get_info",
    "is_available", "device", "device_of", "StreamContext", "stream", "set_stream", "current_stream",
    "default_stream", "set_sync_debug_mode", "get_sync_debug_mode", "init_dump", "utilization", "finalize_dump",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "caching_allocator_alloc",
    "caching_allocator_delete", "get_per_process_memory_fraction", "set_per_process_memory_fraction",
    "empty_cache", "empty_virt_addr_cache", "memory_stats", "memory_stats_as_nested_dict",
    "reset_accumulated_memory_stats", "reset_peak_memory_stats", "reset_max_memory_allocated",
    "reset_max_memory_cached", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "memory_cached", "max_memory_cached", "memory_snapshot", "memory_summary", "MemPool",
    "use_mem_pool", "get_allocator_backend", "NPUPluggableAllocator", "change_current_allocator", "Stream",
    "Event", "set_option", "CubeMathType", "set_aoe", "set_compile_mode", "set_mm_bmm_format_nd",
    "get_mm_bmm_format_nd", "get_npu_overflow_flag", "clear_npu_overflow_flag", "stress_detect", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all", "is_jit_compile_false", "get_amp_supported_dtype",
    "is_autocast_enabled", "is_bf16_supported", "set_autocast_enabled", "get_autocast_dtype",
    "set_autocast_dtype", "BoolStorage", "ByteStorage", "ShortStorage", "LongStorage", "IntStorage",
    "HalfStorage", "CharStorage", "DoubleStorage", "FloatStorage", "BoolTensor", "ByteTensor", "CharTensor",
    "DoubleTensor", "FloatTensor", "HalfTensor", "IntTensor", "LongTensor", "ShortTensor", "BFloat16Tensor",
    "BFloat16Storage", "current_blas_handle", "stop_device", "restart_device", "check_uce_in_memory", "config",
    "matmul", "conv", "enable_deterministic_with_backward", "disable_deterministic_with_backward", "mstx",
    "SyncLaunchStream", "NPUGraph", "graph", "graph_pool_handle", "is_current_stream_capturing",
    "make_graphed_callables", "ExternalEvent", "graph_task_group_begin", "graph_task_group_end",
    "graph_task_update_begin", "graph_task_update_end", "set_device_limit", "get_device_limit",
    "set_stream_limit", "reset_stream_limit", "get_stream_limit", "ipc_collect", "obfuscation_initialize",
    "obfuscation_finalize", "obfuscation_calculate", "set_op_timeout_ms", "host_empty_cache",
    "host_memory_stats", "host_memory_stats_as_nested_dict", "reset_accumulated_host_memory_stats",
    "reset_peak_host_memory_stats", "set_deterministic_level", "use_compatible_impl",
    "are_compatible_impl_enabled", "NpuGraphOpHandler", "register_npu_graph_handler", "super_kernel_scope_begin",
    "super_kernel_scope_end", "npurt",
)

# Reachable on the real module although not in its __all__ (submodules and helpers).
REAL_EXTRA = ("ExternalStream", "profiler", "aclnn", "npugraph_ex", "mstx", "datadump", "deterministic",
              "_npu_setOption", "_get_rng_state_offset", "_set_rng_state_offset")


# Names of the real submodules that are not emulated (the bulk copy of transfer_to_npu reaches some of them).
SUBMODULE_NAMES = {
    "memory": ("memory_snapshot", "MemPool", "use_mem_pool", "_record_memory_history", "_snapshot",
               "_dump_snapshot", "caching_allocator_alloc", "caching_allocator_delete", "get_allocator_backend",
               "change_current_allocator", "NPUPluggableAllocator", "empty_virt_addr_cache", "host_memory_stats",
               "host_memory_stats_as_nested_dict", "reset_accumulated_host_memory_stats",
               "reset_peak_host_memory_stats", "host_empty_cache"),
    "graphs": ("graph_task_group_begin", "graph_task_group_end", "graph_task_update_begin", "graph_task_update_end",
               "super_kernel_scope_begin", "super_kernel_scope_end"),
    "streams": ("ExternalStream", "ExternalEvent", "SyncLaunchStream"),
}


def not_emulated(qualname: str, reason: str = "") -> NotEmulatedError:
    message = f"{qualname} is not emulated by ascend_shim's sim backend"
    return NotEmulatedError(message + (f": {reason}" if reason else " (it exists in the real torch_npu)"))


def module_getattr(qualname: str, unemulated):
    """A module ``__getattr__``: known-but-unemulated names raise NotEmulatedError, others AttributeError."""
    known = frozenset(unemulated)

    def __getattr__(name: str):
        if name in known:
            raise not_emulated(f"{qualname}.{name}")
        raise AttributeError(f"module '{qualname}' has no attribute '{name}'")

    return __getattr__
