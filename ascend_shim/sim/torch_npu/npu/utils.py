"""Device selection and queries of torch.npu."""
from __future__ import annotations

import os
import warnings
from ascend_shim.digits import is_digits
from ascend_shim.sim import DEVICE_NAME
from ascend_shim.sim import _device_index, runtime as _runtime

from ._utils import _checked_index, _get_device_index, _native
# the stream API, reachable here as on torch_npu (whose utils module defines it)
from .streams import StreamContext as StreamContext, current_stream as current_stream  # noqa: F401
from .streams import default_stream as default_stream, set_stream as set_stream, stream as stream  # noqa: F401

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "device_of", "synchronize",
    "get_device_name", "get_device_properties", "get_device_capability", "can_device_access_peer",
    "is_bf16_supported", "init", "is_initialized", "utilization", "ipc_collect", "set_sync_debug_mode",
    "get_sync_debug_mode", "current_blas_handle", "check_uce_in_memory", "get_npu_overflow_flag",
    "clear_npu_overflow_flag",
]


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    """Number of emulated devices this process sees (ASCEND_SHIM_SIM_DEVICES, default 8, narrowed by
    ASCEND_RT_VISIBLE_DEVICES until a device is first used)."""
    return _device_index.device_count()


def current_device() -> int:
    _lazy_init()
    return _native().current_device()


def set_device(device) -> None:
    """Select the current device of this thread; a negative index is a no-op."""
    index = _get_device_index(device)
    if index >= 0:
        _native().set_device(index)


class device:
    """Context manager that selects a device; a negative index or None is a no-op."""

    def __init__(self, device):
        self.idx = _get_device_index(device, optional=True) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _native().current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            _native().set_device(self.idx)
        _lazy_init()

    def __exit__(self, *exc):
        if self.idx >= 0 and self.idx != self.prev_idx:
            _native().set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that selects the device of a tensor (no-op for CPU tensors)."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.is_npu else -1)


def synchronize(device=None) -> None:
    """Wait for all work on a device. Emulated kernels run synchronously, so nothing is ever pending."""
    _lazy_init()
    _checked_index(device)


def get_device_name(device_name=None) -> str:
    _checked_index(device_name)
    return DEVICE_NAME


def get_device_properties(device_name=None) -> _runtime.NPUDeviceProperties:
    """The nominal figures of an Ascend 910B3, its uuid; CUDA's fields without an NPU counterpart are None."""
    index = _checked_index(device_name)
    _lazy_init()  # as torch_npu: asking for the properties initializes the runtime
    return _runtime.NPUDeviceProperties(index)


def get_device_capability(device=None):
    """As in torch_npu: None unless TORCH_NPU_DEVICE_CAPABILITY="major.minor" is set (a compatibility value)."""
    note = ("The return value of get_device_capability is only for compatibility with PyTorch "
            "and does not represent the actual capability of the NPU device.")
    value = os.getenv("TORCH_NPU_DEVICE_CAPABILITY")
    if not value:
        warnings.warn("You can set the device capability via the environment variable "
                      f"TORCH_NPU_DEVICE_CAPABILITY. {note}", stacklevel=2)
        return None
    major, dot, minor = value.partition(".")
    if not (dot and is_digits(major) and is_digits(minor)):
        warnings.warn(f"torch.npu.get_device_capability can't parse TORCH_NPU_DEVICE_CAPABILITY environment "
                      f"variable: {value}. Expected format is 'major.minor'.", stacklevel=2)
        return None
    warnings.warn(note, stacklevel=2)
    return int(major), int(minor)


def can_device_access_peer(device_id, peer_device_id) -> bool:
    """Emulated devices share host memory, so every pair of distinct devices can access each other; a device is
    not its own peer (False, as torch_npu and CUDA answer)."""
    indices = []
    for index, what in ((device_id, "device id"), (peer_device_id, "peer device id")):
        index = _get_device_index(index, optional=True)
        if index < 0 or index >= device_count():
            raise AssertionError(f"Invalid {what}")
        indices.append(index)
    return indices[0] != indices[1]


def is_bf16_supported(including_emulation: bool = False) -> bool:
    """The emulated 910B computes bf16 natively, so the answer does not depend on ``including_emulation``
    (torch_npu ignores it too)."""
    return True


def init() -> None:
    """Initialize the device state now (it is otherwise initialized on first use)."""
    _lazy_init()


# torch_npu initializes its device state lazily: on the first npu tensor a factory makes, or on the first call
# that needs the runtime (current_device, synchronize, entering a device context...). Until then
# is_initialized() is False, and torch relies on that: DeviceMesh selects the device from LOCAL_RANK only while
# it is False; activation checkpointing stashes device RNG states only once it is True.
_initialized = False


def _lazy_init() -> None:
    global _initialized
    if not _native().in_bad_fork():
        device_count()
        _native().fix_device_count()  # the runtime initializes: the visible devices are fixed from now on
        _initialized = True


def is_initialized() -> bool:
    """True once this process has used the device (and it was not inherited through fork)."""
    global _initialized
    native = _native()
    if native.in_bad_fork():
        return False
    if not _initialized and any(native.memory_stats(i)["allocated_blocks"] for i in range(native.device_count())):
        _initialized = True  # an npu tensor was made: what initializes torch_npu's state
    return _initialized


def _lazy_call(callable, **kwargs) -> None:
    callable()


def _is_in_bad_fork() -> bool:
    return _native().in_bad_fork()


def utilization(device=None) -> int:
    """Utilization rate (percent) of the device's compute units between calls: 0.

    Emulated kernels run to completion inside the calling thread, so no work is ever queued on the device while
    the caller can observe it -- the rate a sampling monitor would read.
    """
    index = _get_device_index(device, optional=True)
    if index < 0 or index >= device_count():
        raise AssertionError("Invalid device id")
    return 0


def ipc_collect() -> None:
    """Release memory held for tensors shared with other processes: emulated npu memory is never IPC-shared
    (sharing an npu tensor between processes is refused), so there is nothing to collect."""


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode) -> None:
    """0/"default" quiet, 1/"warn" warns, 2/"error" raises on an operation that waits for the device (on the
    emulated device: a device-to-host transfer)."""
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    _runtime.set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    return _native().sync_debug_mode()


def current_blas_handle():
    """As torch_npu: the NPU has no BLAS handle."""
    warnings.warn("NPU does not use blas handle.", stacklevel=2)
    return None


def check_uce_in_memory(device_id) -> int:
    """0: no uncorrectable memory error (UCE) was recorded -- emulated device memory is host memory."""
    _checked_index(device_id)
    return 0


def get_npu_overflow_flag():
    """As torch_npu on Ascend910B and later (the emulated Ascend910B3), which report overflow as inf/nan."""
    raise RuntimeError("Unsupported api when soc_version >= Ascend910B1, please use npu_check_overflow")


def clear_npu_overflow_flag() -> None:
    warnings.warn("When soc_version >= Ascend910B1, clear_npu_overflow_flag is useless. Please remove it.",
                  stacklevel=2)


def _erase_stream(tensor, stream) -> None:
    """``torch_npu.erase_stream``: drop ``stream`` from the streams ``tensor`` was recorded on (record_stream),
    so its block returns to the allocator when freed; the emulated allocator already reuses it then."""
    import torch

    from .streams import Stream

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor should be torch.Tensor, could not be {type(tensor)}")
    if not isinstance(stream, Stream):
        raise TypeError(f"stream should be torch_npu.npu.Stream, could not be {type(stream)}")
    _runtime.erase_stream(tensor, stream.stream_id, stream.device_index, stream.device_type)
