"""The real ``torch_npu.npu`` name space, and placeholders for the names the emulator does not compute.

``NPU_ALL`` is ``torch_npu.npu.__all__`` of the emulated release (torch_npu 2.13.0, the release paired with the
torch this package was checked against; tests compare it with the real wheel's list). Every name exists on the
emulated module: what the host can compute is implemented, the rest is a *placeholder* -- a function, or a class,
that raises :class:`NotEmulatedError` when called or instantiated, never when looked up, so ``hasattr()`` and
``torch.cuda.X = torch.npu.X`` style assignments work as on hardware. :func:`unemulated_names` lists them.
A placeholder has the real function's parameters (``params``, the release's parameter list): ``inspect.signature``
shows them and a call the real function would refuse raises its TypeError.
"""
from __future__ import annotations

import inspect

from ascend_shim.sim.errors import NotEmulatedError

__all__ = ["NPU_ALL", "REAL_ALL", "REAL_EXTRA", "NotEmulatedError", "not_emulated", "placeholder_function",
           "placeholder_class", "is_placeholder", "unemulated_names", "module_getattr"]

NPU_ALL = (
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
)
REAL_ALL = NPU_ALL  # the name older callers use

# Reachable on the real module although not in its __all__ (submodules and helpers).
REAL_EXTRA = ("profiler", "aclnn", "npugraph_ex", "datadump", "_npu_setOption",
              "_get_rng_state_offset", "_set_rng_state_offset")

_MARK = "_ascend_shim_not_emulated"


def not_emulated(qualname: str, reason: str = "") -> NotEmulatedError:
    message = f"{qualname} is not emulated by ascend_shim's sim backend"
    return NotEmulatedError(message + (f": {reason}" if reason else " (it exists in the real torch_npu)"))


def _signature(params: str | None, first: str = "") -> inspect.Signature | None:
    """The signature of ``def f(<first>, <params>)``; ``params`` is Python parameter-list source (literal
    defaults only)."""
    if params is None:
        return None
    namespace: dict = {}
    exec(f"def f({', '.join(p for p in (first, params) if p)}): pass", {}, namespace)  # noqa: S102 - our literal
    return inspect.signature(namespace["f"])


def placeholder_function(qualname: str, reason: str = "", params: str | None = None):
    """A function named like the real one (with its parameters ``params``) that raises NotEmulatedError when
    called."""
    name = qualname.rsplit(".", 1)[-1]
    signature = _signature(params)

    def placeholder(*args, **kwargs):
        if signature is not None:
            signature.bind(*args, **kwargs)  # the real function's TypeError for a call it refuses
        raise not_emulated(qualname, reason)

    placeholder.__name__ = placeholder.__qualname__ = name
    placeholder.__doc__ = f"Not emulated: calling {qualname} raises NotEmulatedError. {reason}".strip()
    if signature is not None:
        placeholder.__signature__ = signature
    setattr(placeholder, _MARK, qualname)
    return placeholder


def placeholder_class(qualname: str, reason: str = "", bases: tuple = (), module: str = "torch.npu",
                      params: str | None = None):
    """A class named like the real one (subclassable, usable in isinstance, constructed with the real
    ``params``) whose instantiation raises."""
    name = qualname.rsplit(".", 1)[-1]
    signature = _signature(params, first="cls")

    def __new__(cls, *args, **kwargs):
        if signature is not None:
            signature.bind(cls, *args, **kwargs)
        raise not_emulated(qualname, reason)

    if signature is not None:
        __new__.__signature__ = signature
    namespace = {"__new__": __new__, "__module__": module, _MARK: qualname,
                 "__doc__": f"Not emulated: instantiating {qualname} raises NotEmulatedError. {reason}".strip()}
    return type(name, bases, namespace)


def is_placeholder(obj) -> bool:
    """True for a placeholder made here (or a subclass of a placeholder class: it cannot be built either)."""
    return isinstance(getattr(obj, _MARK, None), str)


def unemulated_names(module=None) -> list[str]:
    """The names of ``NPU_ALL`` that are placeholders on ``module`` (default: the emulated ``torch.npu``)."""
    if module is None:
        from ascend_shim.sim.torch_npu import npu as module
    return sorted(name for name in NPU_ALL if is_placeholder(getattr(module, name)))


def module_getattr(qualname: str, unemulated=()):
    """A module ``__getattr__`` for names the module does not have: AttributeError, as Python's default.

    ``unemulated`` names (real names without even a placeholder here) raise NotEmulatedError -- kept for
    submodules that list such names; the emulated ``torch.npu`` itself has none.
    """
    known = frozenset(unemulated)

    def __getattr__(name: str):
        if name in known:
            raise not_emulated(f"{qualname}.{name}")
        raise AttributeError(f"module '{qualname}' has no attribute '{name}'")

    return __getattr__
