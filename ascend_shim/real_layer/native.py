"""The stand-in ``torch_npu._C``: Huawei's native layer, played by the emulated device.

Huawei's torch_npu Python reads its native layer through ``torch_npu._C`` and six child modules. This module
builds that object from the emulator's C++ extension (device count, current device, generators, memory
statistics, the PrivateUse1 guard's streams) and from the device core (:func:`ascend_shim.sim.install_device`).

Three kinds of names:

* provided: they behave as on a single-host Ascend machine whose kernels run synchronously;
* declared but not emulated (:func:`_not_emulated`): present, because torch_npu reads them at import or defines
  classes over them, and raising :class:`NotEmulatedError` naming the function when called;
* absent: any other name raises ``AttributeError``, so a feature torch_npu probes with ``hasattr`` sees what it
  sees on a build without it (``_rpc_npu_init``: no NPU RPC agent).
"""
from __future__ import annotations

import enum
import os
import re
import sys
import time
import types
from collections.abc import Callable

import torch

from .. import sim
from ..sim import DEVICE_NAME, _extension, ipc
from .prepare import CANN_VERSION

#: Ascend910B3 in torch_npu's SocVersion table (``torch_npu/npu/utils.py``)
SOC_VERSION = 224
CHILDREN = ("_profiler", "_distributed_c10d", "_cd", "_logging", "_flops_count", "_npurt")


class NotEmulatedError(NotImplementedError):
    """A native function of torch_npu that the emulated NPU does not provide."""


def _native():
    return _extension.load()


class _Namespace:
    """Collects the names of one stand-in module (``_C`` or a child) before the module is built."""

    def __init__(self, path: str):
        self.path = path
        self.names: dict[str, object] = {}
        self.getattr: Callable[[str], object] | None = None  # a module __getattr__ for names built on first use

    def provide(self, name: str, value=None):
        if value is not None:
            self.names[name] = value
            return value

        def deco(fn):
            self.names[name] = fn
            return fn
        return deco

    def not_emulated(self, *names: str) -> None:
        for name in names:
            self.names[name] = _not_emulated(f"{self.path}.{name}")

    def not_emulated_class(self, *names: str) -> None:
        for name in names:
            self.names[name] = _not_emulated_class(f"{self.path}.{name}")

    def module(self) -> types.ModuleType:
        mod = types.ModuleType(self.path, f"Stand-in of {self.path} over the emulated NPU (ascend_shim).")
        mod.__dict__.update(self.names)
        path = self.path

        def __getattr__(name):
            raise AttributeError(f"module {path!r} has no attribute {name!r} (the emulated NPU's native layer "
                                 f"does not provide it)")
        mod.__dict__["__getattr__"] = self.getattr or __getattr__
        return mod


def _not_emulated(path: str):
    def fn(*args, **kwargs):
        raise NotEmulatedError(f"{path} is not emulated: the emulated NPU has no native implementation of it. "
                               f"Run this part on an Ascend machine, or avoid it in the dry run.")
    fn.__name__ = fn.__qualname__ = path.rsplit(".", 1)[-1]
    return fn


def _not_emulated_class(path: str):
    def __init__(self, *args, **kwargs):
        raise NotEmulatedError(f"{path} is not emulated: the emulated NPU has no native implementation of it.")
    name = path.rsplit(".", 1)[-1]
    return type(name, (), {"__init__": __init__, "__module__": path.rsplit(".", 1)[0]})


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


C = _Namespace("torch_npu._C")

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
C.provide("_npu_hostEmptyCache", lambda: None)
C.provide("_npu_emptyCache", lambda *a, **k: None)
C.provide("_npu_isCurrentStreamCapturing", lambda: False)
C.provide("_npu_getCurrentRawStream", lambda device_index=None: 0)
C.provide("_npu_getCurrentRawStreamNoWait", lambda device_index=None: 0)
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

    from ..sim import op_coverage, tensor_types
    from .loader import prepared_metadata

    for name in _CANN_ENV_SET:
        os.environ.pop(name, None)
    _CANN_ENV_SET.clear()
    sim.install_device()
    tensor_types.install(torch_npu.npu)
    meta = prepared_metadata()
    line = ".".join(meta["torch_npu"].split(".")[:2])
    op_coverage.install_op_coverage(meta["aten_kernels"], release=line)  # the wheel's own list of NPU kernels


# -- devices ------------------------------------------------------------------------------------------------
@C.provide("_npu_init")
def _npu_init():
    """First use of the runtime: the generators of every visible device become torch_npu's."""
    import torch_npu

    native = _native()
    torch_npu.npu.default_generators = tuple(native.default_generator(i) for i in range(native.device_count()))


C.provide("_npu_getDeviceCount", lambda: _native().device_count())
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
C.provide("_npu_canDeviceAccessPeer", lambda device, peer: True)
C.provide("_c10d_npu_init", lambda: True)  # torch_npu.distributed.is_available() probes for it


class _NPUDeviceProperties:
    """What ``torch.npu.get_device_properties`` returns (torch_npu's pybind class)."""

    def __init__(self, index: int):
        self.name = DEVICE_NAME
        self.total_memory = _native().total_memory()
        self.cube_core_num = 20
        self.vector_core_num = 40
        self.L2_cache_size = 192 << 20
        self.multi_processor_count = 20
        self.major, self.minor = 0, 0

    def __repr__(self):
        return (f"_NPUDeviceProperties(name='{self.name}', total_memory={self.total_memory >> 20}MB, "
                f"cube_core_num={self.cube_core_num}, vector_core_num={self.vector_core_num}, "
                f"L2_cache_size={self.L2_cache_size >> 20}MB)")


class _NPUDeviceMemories:
    def __init__(self, index: int):
        self.total_memory = _native().total_memory()
        self.free_memory = self.total_memory - _native().memory_stats(int(index))["live_bytes"]


C.provide("_NPUDeviceProperties", _NPUDeviceProperties)
C.provide("_npu_getDeviceProperties", lambda index: _NPUDeviceProperties(int(index)))
C.provide("_npu_getDeviceMemories", lambda index: _NPUDeviceMemories(int(index)))


# -- memory (no caching allocator: reserved == allocated, one pool) ----------------------------------------
@C.provide("_npu_memoryStats")
def _npu_memory_stats(device):
    raw = _native().memory_stats(int(device))

    def stat(current, peak, allocated, freed):
        one = {"current": current, "peak": peak, "allocated": allocated, "freed": freed}
        zero = dict.fromkeys(one, 0)
        return {"all": one, "large_pool": dict(one), "small_pool": zero}

    nbytes = stat(raw["live_bytes"], raw["peak_bytes"], raw["allocated_bytes"], raw["freed_bytes"])
    blocks = stat(raw["live_blocks"], raw["peak_blocks"], raw["allocated_blocks"], raw["freed_blocks"])
    none = stat(0, 0, 0, 0)
    return {"allocated_bytes": nbytes, "reserved_bytes": nbytes, "active_bytes": nbytes, "requested_bytes": nbytes,
            "allocation": blocks, "segment": blocks, "active": blocks, "inactive_split": none,
            "inactive_split_bytes": none, "oversize_allocations": none["all"], "oversize_segments": none["all"],
            "num_alloc_retries": 0, "num_ooms": raw["ooms"], "num_sync_all_streams": 0,
            "num_device_alloc": raw["allocated_blocks"], "num_device_free": raw["freed_blocks"],
            "max_split_size": -1}


C.provide("_npu_resetPeakMemoryStats", lambda index: _native().reset_peak(int(index)))
C.provide("_npu_resetAccumulatedMemoryStats", lambda index: _native().reset_accumulated(int(index)))
C.provide("_npu_setMemoryFraction", lambda fraction, index: _native().set_memory_fraction(float(fraction), int(index)))
C.provide("_npu_getMemoryFraction", lambda index: _native().memory_fraction(int(index)))


# -- streams and events (kernels run synchronously: streams are always idle, events complete when recorded) --
class _NPUStreamBase(torch.Stream):
    """torch_npu's stream base over the PrivateUse1 guard's streams (the guard keeps the current stream)."""

    def __new__(cls, priority=0, stream_id=None, device_index=None, device_type=None, stream_ptr=0, **kwargs):
        if stream_id is not None:
            return super().__new__(cls, stream_id=stream_id, device_index=device_index, device_type=device_type)
        return super().__new__(cls, device=torch.device("npu", _native().current_device()), priority=priority)

    @property
    def npu_stream(self):
        return self.stream_id

    def query(self):
        return True

    def synchronize(self):
        return None


class _NPUEventBase:
    _recorded_at: float | None
    enable_timing: bool

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False, graph_external=False, **kwargs):
        self = object.__new__(cls)
        self._recorded_at = None
        self.enable_timing = enable_timing
        return self

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        self._recorded_at = time.perf_counter()

    def wait(self, stream=None):
        return None

    def query(self):
        return True

    def synchronize(self):
        return None

    def elapsed_time(self, end):
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._recorded_at is None or end._recorded_at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end._recorded_at - self._recorded_at) * 1000.0

    def reset(self, stream=None):
        self._recorded_at = None

    def ipc_handle(self):
        raise NotEmulatedError("torch_npu._C._NPUEventBase.ipc_handle is not emulated: events are not shared "
                               "between processes on the emulated NPU.")

    @classmethod
    def from_ipc_handle(cls, device, handle):
        raise NotEmulatedError("torch_npu._C._NPUEventBase.from_ipc_handle is not emulated.")

    @property
    def npu_event(self):
        return id(self)


C.provide("_NPUStreamBase", _NPUStreamBase)
C.provide("_NPUEventBase", _NPUEventBase)


def _device_or_current(index) -> int:
    return int(index) if index is not None and int(index) >= 0 else _native().current_device()


@C.provide("_npu_getCurrentStream")
def _npu_get_current_stream(index):
    stream = torch.accelerator.current_stream(_device_or_current(index))
    return stream.stream_id, stream.device_index, stream.device_type


@C.provide("_npu_getDefaultStream")
def _npu_get_default_stream(index):
    stream = torch.Stream(device=torch.device("npu", _device_or_current(index)))
    return 0, stream.device_index, stream.device_type


@C.provide("_npu_setStream")
def _npu_set_stream(stream_id=0, device_index=0, device_type=0):
    torch.accelerator.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                              device_type=device_type))


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


# torch_npu binds DataLoader worker threads to CPU cores of the NPU's NUMA node; the emulated device has none
C.provide("_npu_set_thread_affinity", lambda start=-1, end=-1: None)
C.provide("_npu_reset_thread_affinity", lambda: None)


# -- npu memory shared with other processes (torch_npu's multiprocessing reductions) ------------------------
C.provide("_share_npu_", ipc.share_npu_)
C.provide("_new_shared_npu", ipc.new_shared_npu)
C.provide("_release_ipc_counter_npu", ipc.release_ipc_counter_npu)


# -- children ---------------------------------------------------------------------------------------------
PROFILER = _Namespace("torch_npu._C._profiler")


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

CD = _Namespace("torch_npu._C._cd")


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

LOGGING = _Namespace("torch_npu._C._logging")
FLOPS = _Namespace("torch_npu._C._flops_count")
NPURT = _Namespace("torch_npu._C._npurt")
NPURT.not_emulated("npuHostRegister", "npuHostUnregister", "npuStreamCreate", "npuStreamDestroy")


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


def build(name: str = "torch_npu._C") -> types.ModuleType:
    """The ``torch_npu._C`` module with its children, registered in ``sys.modules`` as torch_npu's own are."""
    from pathlib import Path

    from . import c10d, ops
    from .loader import enabled_site

    site = enabled_site()
    if site is None:
        raise RuntimeError("the real layer is not enabled: torch_npu._C is built over its prepared package only")
    _cann_environment_for_import(Path(site).parent)

    module = C.module()
    module.__name__ = name
    children = {"_profiler": PROFILER, "_distributed_c10d": c10d.NAMESPACE, "_cd": CD, "_logging": LOGGING,
                "_flops_count": FLOPS, "_npurt": NPURT}
    for child, namespace in children.items():
        sub = namespace.module()
        setattr(module, child, sub)
        sys.modules[f"{name}.{child}"] = sub
    ops.define_and_register()
    return module
