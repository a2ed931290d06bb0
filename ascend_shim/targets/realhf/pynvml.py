"""``pynvml`` answered by the NPU: the NVML calls monitoring code makes, backed by ``torch.npu``.

NVML talks to NVIDIA drivers; on an Ascend machine ``import pynvml`` fails (nvidia-ml-py absent) or
``nvmlInit()`` raises NVMLError_LibraryNotFound (nvidia-ml-py installed as a dependency, no driver). Monitors
(realhf's ``gpu_utilization_monitor``, its model worker's memory logging, ``testing.get_memory``) only read
device counts, names, memory and utilization. Those come from ``torch.npu``:

* memory: ``torch.npu.mem_get_info(i)`` (device-wide free/total, like cudaMemGetInfo) -> total/free/used;
* utilization: ``torch.npu.utilization(i)`` where it exists (torch_npu), otherwise 0 -- a neutral value,
  recorded in the migration report;
* everything else NVML offers (temperature, power, clocks, processes, ...) raises ``NVMLError_NotSupported``
  naming the call, the same error NVML itself raises for a query a device cannot answer.

NVML's life cycle is kept: queries before ``nvmlInit()`` raise ``NVMLError_Uninitialized``, as does an
``nvmlShutdown()`` without a matching init (realhf catches exactly that).
"""
from __future__ import annotations

import sys
import threading

__version__ = "npu"  # not nvidia-ml-py

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12


class NVMLError(Exception):
    def __init__(self, value, detail: str = ""):
        self.value = value
        self.detail = detail
        super().__init__(value, detail)

    def __str__(self):
        names = {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 12: "NVML Shared Library Not Found"}
        text = names.get(self.value, f"NVML error {self.value}")
        return f"{text}: {self.detail}" if self.detail else text


class NVMLError_Uninitialized(NVMLError):
    def __init__(self, detail: str = ""):
        super().__init__(NVML_ERROR_UNINITIALIZED, detail)


class NVMLError_InvalidArgument(NVMLError):
    def __init__(self, detail: str = ""):
        super().__init__(NVML_ERROR_INVALID_ARGUMENT, detail)


class NVMLError_NotSupported(NVMLError):
    def __init__(self, detail: str = ""):
        super().__init__(NVML_ERROR_NOT_SUPPORTED, detail)


class c_nvmlMemory_t:
    def __init__(self, total: int, free: int, used: int):
        self.total, self.free, self.used = total, free, used

    def __repr__(self):
        return f"c_nvmlMemory_t(total={self.total}, free={self.free}, used={self.used})"


class c_nvmlUtilization_t:
    def __init__(self, gpu: int, memory: int):
        self.gpu, self.memory = gpu, memory

    def __repr__(self):
        return f"c_nvmlUtilization_t(gpu={self.gpu}, memory={self.memory})"


class NpuHandle:
    """What nvmlDeviceGetHandleByIndex returns: the NPU index (visible-device numbering, like CUDA's)."""

    def __init__(self, index: int):
        self.index = index

    def __repr__(self):
        return f"NpuHandle(npu:{self.index})"

    def __eq__(self, other):
        return isinstance(other, NpuHandle) and other.index == self.index

    def __hash__(self):
        return hash(("npu", self.index))


_lock = threading.Lock()
_init_count = 0


def _report():
    from ascend_shim.report import REPORT

    return REPORT


def _require_init(call: str) -> None:
    if _init_count <= 0:
        raise NVMLError_Uninitialized(f"{call} before nvmlInit()")


def _npu():
    import torch

    return torch.npu


def nvmlInit(*args, **kwargs) -> None:
    global _init_count
    with _lock:
        _init_count += 1
    _report().translated("pynvml.nvmlInit", "NVML answered by torch.npu (ascend_shim)")


nvmlInitWithFlags = nvmlInit


def nvmlShutdown() -> None:
    global _init_count
    with _lock:
        if _init_count <= 0:
            raise NVMLError_Uninitialized("nvmlShutdown() without nvmlInit()")
        _init_count -= 1


def nvmlDeviceGetCount() -> int:
    _require_init("nvmlDeviceGetCount")
    return int(_npu().device_count())


def nvmlDeviceGetHandleByIndex(index: int) -> NpuHandle:
    _require_init("nvmlDeviceGetHandleByIndex")
    index = int(index)
    if not 0 <= index < _npu().device_count():
        raise NVMLError_InvalidArgument(f"no NPU with index {index}")
    return NpuHandle(index)


def _index(handle) -> int:
    if not isinstance(handle, NpuHandle):
        raise NVMLError_InvalidArgument(f"not a device handle: {handle!r}")
    return handle.index


def nvmlDeviceGetIndex(handle) -> int:
    _require_init("nvmlDeviceGetIndex")
    return _index(handle)


def nvmlDeviceGetName(handle) -> str:
    _require_init("nvmlDeviceGetName")
    return str(_npu().get_device_name(_index(handle)))


def nvmlDeviceGetMemoryInfo(handle, *args) -> c_nvmlMemory_t:
    _require_init("nvmlDeviceGetMemoryInfo")
    free, total = _npu().mem_get_info(_index(handle))
    return c_nvmlMemory_t(int(total), int(free), int(total) - int(free))


def nvmlDeviceGetUtilizationRates(handle) -> c_nvmlUtilization_t:
    _require_init("nvmlDeviceGetUtilizationRates")
    index = _index(handle)
    try:
        busy = int(_npu().utilization(index))
    except Exception:  # absent, or not emulated: a documented neutral value
        _report().fallback("pynvml.nvmlDeviceGetUtilizationRates",
                           "no torch.npu.utilization here: compute utilization answered as 0")
        busy = 0
    free, total = _npu().mem_get_info(index)
    memory = round(100 * (int(total) - int(free)) / int(total)) if total else 0
    return c_nvmlUtilization_t(busy, memory)


def nvmlSystemGetDriverVersion() -> str:
    _require_init("nvmlSystemGetDriverVersion")
    import torch

    return f"ascend (torch_npu {getattr(getattr(torch, 'npu', None), '__version__', '') or 'unknown'})"


# realhf writes ``pynvml.nvml.NVMLError_Uninitialized`` (the nvidia-ml-py package layout): same module
nvml = sys.modules[__name__]


def __getattr__(name: str):
    if name.startswith("nvml"):
        def not_supported(*args, **kwargs):
            _report().unsupported(f"pynvml.{name}", "no NPU equivalent behind the NVML API")
            raise NVMLError_NotSupported(f"pynvml.{name} has no NPU equivalent (ascend_shim answers pynvml with "
                                         "torch.npu: counts, names, memory, utilization)")

        not_supported.__name__ = not_supported.__qualname__ = name
        return not_supported
    raise AttributeError(f"module 'pynvml' (ascend_shim NPU answer) has no attribute {name!r}")
