"""``torch.npu`` (and ``torch_npu.npu``) of the emulated NPU.

Implements the part of the real module that user code touches: devices, streams/events, memory statistics,
RNG, amp and the configuration switches. Every other name of the real module raises
:class:`NotEmulatedError` when touched (see ``_unemulated``); unknown names raise AttributeError.
"""
from __future__ import annotations

from . import amp, graphs, memory, npu_config, random, streams, utils  # noqa: F401
from ._unemulated import REAL_ALL, REAL_EXTRA, NotEmulatedError, module_getattr
from .autocast_utils import (get_amp_supported_dtype, get_autocast_dtype, is_autocast_enabled,
                             set_autocast_dtype, set_autocast_enabled)
from .graphs import NPUGraph, graph, graph_pool_handle, is_current_stream_capturing, make_graphed_callables
from .memory import (empty_cache, get_per_process_memory_fraction, max_memory_allocated, max_memory_cached,
                     max_memory_reserved, mem_get_info, memory_allocated, memory_cached, memory_reserved,
                     memory_stats, memory_stats_as_nested_dict, memory_summary, reset_accumulated_memory_stats,
                     reset_max_memory_allocated, reset_max_memory_cached, reset_peak_memory_stats,
                     set_per_process_memory_fraction)
from .npu_config import (_allowHF32Conv, _allowHF32Matmul, _npuConfig, get_mm_bmm_format_nd,
                         is_jit_compile_false, set_compile_mode, set_mm_bmm_format_nd, set_option)
from .random import (_get_generator, default_generators, get_rng_state, get_rng_state_all, initial_seed,
                     manual_seed, manual_seed_all, seed, seed_all, set_rng_state, set_rng_state_all)
from .streams import Event, Stream, StreamContext, current_stream, default_stream, set_stream, stream
from .utils import (_is_in_bad_fork, _lazy_call, _lazy_init, can_device_access_peer, current_device, device,
                    device_count, device_of, get_device_capability, get_device_name, get_device_properties, init,
                    is_available, is_bf16_supported, is_initialized, set_device, synchronize)
from ._utils import _get_device_index  # noqa: F401

# Read by torch (e.g. checkpoint stashes device RNG states only when the device module is initialized).
_initialized = True

config = _npuConfig()
matmul = _allowHF32Matmul()
conv = _allowHF32Conv()

__all__ = [
    "is_initialized", "init", "synchronize", "device_count", "can_device_access_peer", "set_device",
    "current_device", "get_device_name", "get_device_properties", "get_device_capability", "mem_get_info",
    "is_available", "device", "device_of", "StreamContext", "stream", "set_stream", "current_stream",
    "default_stream", "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    "get_per_process_memory_fraction", "set_per_process_memory_fraction", "empty_cache", "memory_stats",
    "memory_stats_as_nested_dict", "reset_accumulated_memory_stats", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "memory_cached", "max_memory_cached", "memory_summary", "Stream",
    "Event", "set_option", "set_compile_mode", "set_mm_bmm_format_nd", "get_mm_bmm_format_nd", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all", "is_jit_compile_false", "get_amp_supported_dtype",
    "is_autocast_enabled", "is_bf16_supported", "set_autocast_enabled", "get_autocast_dtype",
    "set_autocast_dtype", "config", "matmul", "conv", "NPUGraph", "graph", "graph_pool_handle",
    "is_current_stream_capturing", "make_graphed_callables",
]

# Known names of the real module that are not implemented here.
UNEMULATED = frozenset(REAL_ALL + REAL_EXTRA) - set(__all__) - set(globals())

__getattr__ = module_getattr("torch.npu", UNEMULATED)
