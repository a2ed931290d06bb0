"""The stand-in ``torch_npu._C``: Huawei's native layer, played by the emulated device.

Huawei's torch_npu Python reads its native layer through ``torch_npu._C`` and six child modules. This module
builds that object from the emulator's C++ extension (device count, current device, generators, memory
statistics, the PrivateUse1 guard's streams) and from the device core (:func:`ascend_shim.sim.install_device`).

Three kinds of names:

* provided: they behave as on a single-host Ascend machine whose kernels run synchronously;
* declared but not emulated (:func:`.namespace.not_emulated`): present, because torch_npu reads them at import or
  defines classes over them, and raising :class:`NotEmulatedError` naming the function when called;
* absent: any other name raises ``AttributeError``, so a feature torch_npu probes with ``hasattr`` sees what it
  sees on a build without it (``_rpc_npu_init``: no NPU RPC agent).
"""
from __future__ import annotations

import enum
import itertools
import os
import re
import sys
import time
import types

import torch

from .. import CANN_VERSION, DEVICE_NAME, _device_index, _extension, install_device, ipc, memory_stats, runtime, streams
from . import c10d, ops
from .enabled import enabled_site, prepared_metadata
from .namespace import Namespace

#: Ascend910B3 in torch_npu's SocVersion table (``torch_npu/npu/utils.py``)
SOC_VERSION = 224
CHILDREN = ("_profiler", "_distributed_c10d", "_cd", "_logging", "_flops_count", "_npurt", "_mstx")


def _native():
    return _extension.load()


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


C = Namespace("torch_npu._C")

# -- runtime versions and lifecycle ---------------------------------------------------------------------------
C.provide("_get_cann_version", lambda module="CANN": CANN_VERSION)
C.provide("_is_gte_cann_version",
          lambda version, module="CANN": _version_tuple(CANN_VERSION) >= _version_tuple(str(version)))
C.provide("_weak_ref_tensor", lambda t: t)
C.provide("_npu_shutdown_synchronize", lambda: True)
C.provide("_npu_shutdown", lambda success=True: None)
C.provide("_npu_set_run_yet_variable_to_false", lambda: None)
C.provide("_npu_is_jit_compile_false", lambda: True)
C.provide("_npu_set_call_state", lambda *a, **k: None)
C.provide("_npu_set_module_train_state", lambda *a, **k: None)
C.provide("_npu_isCurrentStreamCapturing", lambda: False)
_OPTIONS: dict[str, str] = {}
C.provide("_npu_setOption", lambda options: _OPTIONS.update({str(k): str(v) for k, v in dict(options).items()}))
C.provide("_npu_getOption", lambda name: None if str(name) not in _OPTIONS else _OPTIONS[str(name)].encode())
C.not_emulated_class("_MemPool", "_NPUGraph", "_NPUShapeHandling")
C.not_emulated("_graph_pool_handle", "_graph_task_group_begin", "_graph_task_group_end", "_graph_task_update_begin",
               "_graph_task_update_end", "_super_kernel_scope_begin", "_super_kernel_scope_end", "_npu_from_dlpack",
               "_npu_to_dlpack", "_set_cached_tensors_enabled", "_npu_NPUAllocator",
               "_npu_NPUAllocator_AllocatorState", "_launch_host_func", "_launch_host_func_pending",
               "_subscribe_report", "_unsubscribe_report")


@C.provide("_initExtension")
def _init_extension():
    """The real one finishes torch_npu's C++ registration; here: the device core, the typed tensor classes
    (``torch.npu.FloatTensor`` ...), which torch_npu's C++ creates at this point, and its CPU fallback for the
    operators without an NPU kernel in the prepared wheel."""
    import torch_npu

    from .. import op_coverage, tensor_types

    if "ASCEND_HOME_PATH" in _CANN_ENV_SET:
        _collect_env_reports_the_emulated_cann()
    for name in _CANN_ENV_SET:
        os.environ.pop(name, None)
    _CANN_ENV_SET.clear()
    install_device()
    tensor_types.install(torch_npu.npu)
    meta = prepared_metadata()
    line = ".".join(meta["torch_npu"].split(".")[:2])
    op_coverage.install_op_coverage(meta["aten_kernels"], release=line)  # the wheel's own list of NPU kernels


# -- devices ------------------------------------------------------------------------------------------------
@C.provide("_npu_init")
def _npu_init():
    """First use of the runtime: the visible devices are fixed, their generators become torch_npu's."""
    import torch_npu

    native = _native()
    _device_index.device_count()
    native.fix_device_count()
    torch_npu.npu.default_generators = tuple(native.default_generator(i) for i in range(native.device_count()))


C.provide("_npu_setDevice", lambda index: _native().set_device(int(index)))
C.provide("_npu_getDevice", lambda: _native().current_device())
C.provide("_npu_getDeviceWithoutSet", lambda: _native().current_device())
C.provide("_npu_getLocalDevice", lambda: _native().current_device())
C.provide("_npu_maybeExchangeDevice",
          lambda index: _native().exchange_device(int(index)) if int(index) >= 0 else -1)
C.provide("_npu_exchangeDevice", lambda index: _native().exchange_device(int(index)) if int(index) >= 0 else -1)
C.provide("_npu_synchronize", lambda: None)
C.provide("_npu_is_bf16_supported", lambda: True)
C.provide("_npu_is_support_inf_nan", lambda: True)
C.provide("_npu_getDeviceName", lambda: DEVICE_NAME)
C.provide("_npu_get_soc_version", lambda: SOC_VERSION)
C.provide("_npu_canDeviceAccessPeer", lambda device, peer: int(device) != int(peer))  # as CUDA: not itself
C.provide("_npu_hasPrimaryContext", lambda index: _native().device_count_fixed())
C.provide("_npu_set_fill_uninitialized_memory", lambda mode: None)  # fresh host memory: contents undefined
C.provide("_npu_get_fft_plan_cache_size", lambda: 0)  # FFTs run on the host: no plan cache
C.provide("_npu_get_fft_plan_cache_max_size", lambda: 0)
C.provide("_npu_set_fft_plan_cache_max_size", lambda size: None)
C.provide("_npu_clear_fft_plan_cache", lambda: None)
_DETERMINISTIC = [0]
C.provide("_npu_set_deterministic_level", lambda level: _DETERMINISTIC.__setitem__(0, int(level)))
C.provide("_npu_get_deterministic_level", lambda: _DETERMINISTIC[0])


C.names.update(runtime.NATIVE)  # devices, streams and events, the allocation fast path: as on the builtin layer
C.provide("_c10d_npu_init", lambda: True)  # torch_npu.distributed.is_available() probes for it


# -- memory: the emulated device's caching allocator (shared with the builtin layer) ----------------------
C.provide("_npu_memoryStats", lambda device: memory_stats.nested(int(device)))
C.provide("_npu_resetPeakMemoryStats", lambda index: _native().reset_peak(int(index)))
C.provide("_npu_resetAccumulatedMemoryStats", lambda index: _native().reset_accumulated(int(index)))
C.provide("_npu_setMemoryFraction", lambda fraction, index: _native().set_memory_fraction(float(fraction), int(index)))
C.provide("_npu_getMemoryFraction", lambda index: _native().memory_fraction(int(index)))
C.provide("_npu_emptyCache", lambda *a, **k: memory_stats.empty_cache())
C.provide("_npu_emptyVirtAddrCache", lambda: None)  # no virtual-address reservations (expandable segments off)
C.provide("_npu_memorySnapshot", lambda mempool_id=None: _memory_snapshot(mempool_id))
C.provide("_npu_record_memory_history", memory_stats.record_history)
C.provide("_npu_isHistoryEnabled", lambda: memory_stats.history_enabled())
C.provide("_npu_getAllocatorBackend", lambda: "native")
C.provide("_npu_npuCachingAllocator_set_allocator_settings", lambda settings: None)
C.provide("_npu_hostMemoryStats", lambda: _native().host_memory_stats())
C.provide("_npu_resetAccumulatedHostMemoryStats", lambda: _native().host_reset_accumulated())
C.provide("_npu_resetPeakHostMemoryStats", lambda: _native().host_reset_peak())
C.provide("_npu_ipc_collect", lambda: None)  # npu memory is never shared with another process's allocator
C.provide("_npu_lock_mutex", lambda: None)  # the emulated allocator takes its own locks per call
C.provide("_npu_unlock_mutex", lambda: None)
C.provide("_npu_check_uce_in_memory", lambda device_id: 0)  # no uncorrectable memory error: host memory
C.provide("_npu_get_uce_addr", lambda: [])


def _memory_snapshot(mempool_id):
    if mempool_id is not None:
        raise RuntimeError(f"no memory pool {tuple(mempool_id)!r}: the emulated allocator has the default pool only")
    return memory_stats.snapshot()


_RAW_BLOCKS: dict[int, torch.Tensor] = {}


@C.provide("_npu_npuCachingAllocator_raw_alloc")
def _raw_alloc(size, stream):
    """``caching_allocator_alloc``: ``size`` bytes from the caching allocator, as an address."""
    if not isinstance(size, int) or not isinstance(stream, int):
        raise TypeError("caching_allocator_alloc(): incorrect arguments (ssize_t size, intptr_t stream)")
    block = torch.empty(size, dtype=torch.uint8, device=torch.device("npu", _native().current_device()))
    _RAW_BLOCKS[block.data_ptr()] = block
    return block.data_ptr()


@C.provide("_npu_npuCachingAllocator_raw_delete")
def _raw_delete(mem_ptr):
    if _RAW_BLOCKS.pop(int(mem_ptr), None) is None:
        raise RuntimeError(f"invalid device pointer: {int(mem_ptr):#x}")


# -- storage construction (torch_npu's torch.save path for npu storages) --------------------------------------
@C.provide("_tensor_construct_from_storage")
def _tensor_construct_from_storage(storage):
    """A 1-d npu tensor over the whole storage: of the storage's dtype for a typed storage (``copy.deepcopy``,
    ``.cpu()``), uint8 for an untyped one (``torch.save``). The emulated device has the ND format only."""
    dtype, untyped = torch.uint8, storage
    if isinstance(storage, torch.TypedStorage):
        dtype, untyped = storage.dtype, storage._untyped_storage
    itemsize = torch.empty(0, dtype=dtype).element_size()
    tensor = torch.empty(0, dtype=dtype, device=untyped.device)
    return tensor.set_(untyped, 0, (untyped.nbytes() // itemsize,), (1,))


# -- autocast on the npu device (torch's device-generic state, PrivateUse1's) ----------------------------------
C.provide("is_autocast_enabled", lambda: torch.is_autocast_enabled("npu"))
C.provide("set_autocast_enabled", lambda enabled: torch.set_autocast_enabled("npu", bool(enabled)))
C.provide("get_autocast_dtype", lambda: torch.get_autocast_dtype("npu"))
C.provide("set_autocast_dtype", lambda dtype: torch.set_autocast_dtype("npu", dtype))


# torch_npu binds DataLoader worker threads to CPU cores of the NPU's NUMA node; the emulated device has none
C.provide("_npu_set_thread_affinity", lambda start=-1, end=-1: None)
C.provide("_npu_reset_thread_affinity", lambda: None)


# -- npu memory shared with other processes (torch_npu's multiprocessing reductions) ------------------------
C.provide("_share_npu_", ipc.share_npu_)
C.provide("_new_shared_npu", ipc.new_shared_npu)
C.provide("_release_ipc_counter_npu", ipc.release_ipc_counter_npu)


# -- children ---------------------------------------------------------------------------------------------
PROFILER = Namespace("torch_npu._C._profiler")


class ProfilerActivity(enum.Enum):
    CPU = 0
    NPU = 1


PROFILER.provide("ProfilerActivity", ProfilerActivity)
PROFILER.not_emulated_class("NpuProfilerConfig", "_ExperimentalConfig")
PROFILER.not_emulated("_init_profiler", "_start_profiler", "_stop_profiler", "_finalize_profiler",
                      "_warmup_profiler", "_enable_profiler_in_child_thread", "_disable_profiler_in_child_thread")
PROFILER.provide("_supported_npu_activities", lambda: {ProfilerActivity.CPU})
PROFILER.provide("_get_syscnt_enable", lambda: False)
PROFILER.provide("_get_syscnt", time.monotonic_ns)
PROFILER.provide("_get_monotonic", time.monotonic_ns)
PROFILER.provide("_get_freq", lambda: 1000)
PROFILER.provide("_get_host_uid", lambda: os.getuid() if hasattr(os, "getuid") else 0)

CD = Namespace("torch_npu._C._cd")


class DType(enum.IntEnum):
    """torch_npu's dtype numbering: torch's ScalarType values, torch_npu's own from 285."""

    uint8 = 0
    int8 = 1
    int16 = 2
    int32 = 3
    int64 = 4
    float16 = 5
    float32 = 6
    float64 = 7
    bool = 11
    bfloat16 = 15
    int4 = 285
    hifloat8 = 290
    float8_e5m2 = 291
    float8_e4m3fn = 292
    float8_e8m0fnu = 293
    float4_e2m1 = 296
    float4_e1m2 = 297


CD.provide("DType", DType)
CD.not_emulated("cast_to_fp8", "cast_from_fp8", "cast_to_fp8_noalloc")

MSTX = Namespace("torch_npu._C._mstx")


class _MsTx:
    """torch_npu's mstx markers with no profiler attached: ranges get ids, nothing is recorded (as on a machine
    where msprof is not collecting)."""

    def __init__(self):
        self.ids = itertools.count(1)
        self.stacks: dict[str, list[int]] = {}

    def mark(self, message, *where):
        return None

    def range_push(self, message, *where):
        domain = where[-1] if where else "default"
        stack = self.stacks.setdefault(domain, [])
        stack.append(next(self.ids))
        return len(stack) - 1

    def range_pop(self, domain="default"):
        stack = self.stacks.get(domain)
        if not stack:
            return -1
        stack.pop()
        return len(stack)

    def range_start(self, message, *where):
        return next(self.ids)

    def range_end(self, range_id, domain="default"):
        return None


_MSTX = _MsTx()
for _name, _fn in (("_mark", _MSTX.mark), ("_mark_on_host", _MSTX.mark), ("_range_push", _MSTX.range_push),
                   ("_range_push_on_host", _MSTX.range_push), ("_range_pop", _MSTX.range_pop),
                   ("_range_start", _MSTX.range_start), ("_range_start_on_host", _MSTX.range_start),
                   ("_range_end", _MSTX.range_end)):
    MSTX.provide(_name, _fn)

LOGGING = Namespace("torch_npu._C._logging")
FLOPS = Namespace("torch_npu._C._flops_count")
NPURT = Namespace("torch_npu._C._npurt")
NPURT.provide("npuStreamCreate", streams.npu_stream_create)
NPURT.provide("npuStreamDestroy", streams.npu_stream_destroy)
NPURT.provide("npuHostRegister", streams.npu_host_register)
NPURT.provide("npuHostUnregister", streams.npu_host_unregister)


#: the variables :func:`build` set for torch_npu's import (removed again when its extension initializes)
_CANN_ENV_SET: list[str] = []


def _cann_environment_for_import(where) -> None:
    """torch_npu checks at import that CANN's ``set_env.sh`` was sourced (and prints a warning on stdout when
    not): while it imports, the emulated machine's CANN environment is in place, unless the user has one."""
    values = {"ASCEND_HOME_PATH": str(where / "cann"), "ASCEND_OPP_PATH": str(where / "cann" / "opp")}
    if "ASCEND_HOME_PATH" in os.environ:
        return
    for name, value in values.items():
        if name not in os.environ:
            os.environ[name] = value
            _CANN_ENV_SET.append(name)


def _collect_env_reports_the_emulated_cann() -> None:
    """``torch_npu.utils.collect_env.get_cann_version()`` reads the version record of the CANN toolkit under
    ``ASCEND_HOME_PATH`` each time it is called, and answers ``not known`` without one: after the import, where the
    emulated machine's CANN environment is no longer in place (the process environment is left as it was), it
    would say so -- which the ``kernels`` hub parses into its CANN build variant (``InvalidVersion: 'n.t'``).
    While ``ASCEND_HOME_PATH`` is unset it answers what the emulated machine's record says (:data:`CANN_VERSION`,
    as the builtin layer and ``torch_npu.npu.utils.get_cann_version()`` do); with one, Huawei's function reads it."""
    import functools
    import importlib

    try:
        module = importlib.import_module("torch_npu.utils.collect_env")
        original = module.get_cann_version
    except (ImportError, AttributeError):  # a torch_npu without it: nothing reads it
        return

    @functools.wraps(original)
    def get_cann_version():
        if "ASCEND_HOME_PATH" not in os.environ:
            return CANN_VERSION
        return original()

    # not through the shim's patching: this is the emulated machine's own answer, set once at the device's bring-up
    # and kept for the process (as the native layer it stands in for), whether or not the shim is active
    setattr(module, "get_cann_version", get_cann_version)  # noqa: B010  (a module attribute mypy cannot see)


def build(name: str = "torch_npu._C") -> types.ModuleType:
    """The ``torch_npu._C`` module with its children, registered in ``sys.modules`` as torch_npu's own are."""
    from pathlib import Path

    site = enabled_site()
    if site is None:
        raise RuntimeError("the real layer is not enabled: torch_npu._C is built over its prepared package only")
    _cann_environment_for_import(Path(site).parent)

    module = C.module()
    module.__name__ = name
    children = {"_profiler": PROFILER, "_distributed_c10d": c10d.NAMESPACE, "_cd": CD, "_logging": LOGGING,
                "_flops_count": FLOPS, "_npurt": NPURT, "_mstx": MSTX}
    for child, namespace in children.items():
        sub = namespace.module()
        setattr(module, child, sub)
        sys.modules[f"{name}.{child}"] = sub
    ops.define_and_register()
    return module
