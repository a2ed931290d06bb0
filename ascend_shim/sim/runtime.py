"""The device runtime's native answers that torch_npu reads through ``torch_npu._C``, shared by both layers.

The real layer's ``torch_npu._C`` stand-in and the builtin facade (its ``torch.npu`` functions and its small
``torch_npu._C``) take these from :data:`NATIVE`, so argument checks, device properties and the allocation fast
path answer alike on both.
"""
from __future__ import annotations

import hashlib
import uuid

import torch

from . import DEVICE_NAME, _device_index, _extension, streams


def _native():
    return _extension.load()


def set_sync_debug_mode(mode) -> None:
    """``_npu_set_sync_debug_mode``: 0 quiet, 1 warn, 2 raise on an operation that waits for the device (a
    device-to-host transfer); the binding takes a Python int only."""
    if isinstance(mode, bool) or not isinstance(mode, int):
        raise RuntimeError("invalid argument to set_sync_debug_mode, debug_mode type must long")
    _native().set_sync_debug_mode(mode)


def utilization(device) -> int:
    """Utilization rate (percent) between calls: 0, since emulated kernels finish inside the calling thread."""
    if isinstance(device, bool) or not isinstance(device, int):
        raise RuntimeError("invalid argument to getDeviceUtilizationRate")
    _native().check_index(device)
    return 0


_op_timeout_ms = [0]


def set_op_timeout_ms(timeout) -> None:
    """An unsigned 32-bit timeout, parsed as torch_npu's binding parses it (kernels never time out here)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int):
        raise TypeError(f"an integer is required (got type {type(timeout).__name__})")
    if timeout < 0:
        raise OverflowError("can't convert negative value to unsigned int")
    if timeout >= 2 ** 32:
        raise OverflowError("Overflow when unpacking long")
    _op_timeout_ms[0] = timeout


#: the cores a device's operators may use (``aclrtSetDeviceResLimit``): (device, 0 cube / 1 vector) -> count
_core_limits: dict[tuple[int, int], int] = {}
CORE_NUMS = (20, 40)  # an Ascend 910B3's cube and vector cores


def set_device_res_limit(device, type, value) -> None:
    """Limit the cube (``type`` 0) or vector (1) cores the device's operators use; recorded and read back (the
    emulated kernels run on the host's cores whatever the limit)."""
    _native().check_index(int(device))
    if int(type) not in (0, 1):
        raise RuntimeError(f"invalid resource type {type}: 0 (cube cores) or 1 (vector cores)")
    _core_limits[(int(device), int(type))] = int(value)


def get_device_res_limit(device, type) -> int:
    _native().check_index(int(device))
    if int(type) not in (0, 1):
        raise RuntimeError(f"invalid resource type {type}: 0 (cube cores) or 1 (vector cores)")
    return _core_limits.get((int(device), int(type)), CORE_NUMS[int(type)])


def device_uuid(index: int) -> uuid.UUID:
    """A stable identity per emulated device (the runtime's aclrtUuid, shown as torch shows CUDA's)."""
    return uuid.UUID(bytes=hashlib.sha256(f"ascend_shim emulated {DEVICE_NAME} {index}".encode()).digest()[:16])


class NPUDeviceProperties:
    """What ``torch.npu.get_device_properties`` returns (torch_npu's ``_NPUDeviceProperties``): the nominal
    figures of an Ascend 910B3; CUDA's fields that the NPU has no counterpart for are None, as torch_npu's."""

    def __init__(self, index: int):
        self.name = DEVICE_NAME
        self.total_memory = _native().total_memory()
        self.cube_core_num, self.vector_core_num = CORE_NUMS
        self.L2_cache_size = 192 << 20
        self.multi_processor_count = self.vector_core_num  # torch_npu's Module.cpp: for DataParallel's check
        self.uuid = device_uuid(index)
        self.major = self.minor = self.is_multi_gpu_board = self.is_integrated = None
        self.max_threads_per_multi_processor = self.warp_size = self.regs_per_multiprocessor = None
        self.gcnArchName = None

    def __repr__(self):
        return (f"_NPUDeviceProperties(name='{self.name}', total_memory={self.total_memory >> 20}MB, "
                f"cube_core_num={self.cube_core_num}, vector_core_num={self.vector_core_num}, "
                f"L2_cache_size={self.L2_cache_size >> 20}MB)")


NPUDeviceProperties.__name__ = NPUDeviceProperties.__qualname__ = "_NPUDeviceProperties"


class NPUDeviceMemories:
    """``_npu_getDeviceMemories``: total and free bytes (free: what the caching allocator does not hold)."""

    def __init__(self, index: int):
        self.total_memory = _native().total_memory()
        self.free_memory = self.total_memory - _native().memory_stats(int(index))["reserved_bytes"]


def empty_strided_npu(*args):
    """The allocation fast path torch_npu's inductor code uses: exactly (sizes, strides, dtype), on the current
    device."""
    if len(args) != 3:
        raise RuntimeError("_empty_strided_npu expects exactly 3 args: (sizes, strides, dtype)")
    sizes, strides, dtype = args
    if not isinstance(dtype, torch.dtype):
        raise RuntimeError("_empty_strided_npu: arg 3 must be a torch.dtype")
    return torch.empty_strided(tuple(sizes), tuple(strides), dtype=dtype,
                               device=torch.device("npu", _native().current_device()))


def erase_stream(tensor, stream_id=0, device_index=0, device_type=0) -> None:
    """Undo ``record_stream``: the emulated allocator reuses a block once freed whatever streams used it."""
    if not isinstance(tensor, torch.Tensor):
        raise RuntimeError("tensor is not torch.Tensor.")


#: ``torch_npu._C`` names with the same answer on both layers
NATIVE = {
    "_npu_getDeviceCount": _device_index.device_count,
    "_npu_set_sync_debug_mode": set_sync_debug_mode,
    "_npu_get_sync_debug_mode": lambda: _native().sync_debug_mode(),
    "_npu_getDeviceUtilizationRate": utilization,
    "_npu_set_op_timeout_ms": set_op_timeout_ms,
    "_NPUDeviceProperties": NPUDeviceProperties,
    "_npu_getDeviceProperties": lambda index: NPUDeviceProperties(int(index)),
    "_npu_getDeviceMemories": lambda index: NPUDeviceMemories(int(index)),
    "_empty_strided_npu": empty_strided_npu,
    "_npu_eraseStream": erase_stream,
    "_npu_set_device_res_limit": set_device_res_limit,
    "_npu_get_device_res_limit": get_device_res_limit,
    "_npu_hostEmptyCache": lambda: _native().host_empty_cache(),
    "_NPUStreamBase": streams._NPUStreamBase,
    "_NPUEventBase": streams._NPUEventBase,
    "_npu_getCurrentStream": streams.current_stream,
    "_npu_getDefaultStream": streams.default_stream,
    "_npu_setStream": streams.set_stream,
    "_npu_getCurrentRawStream": streams.current_raw_stream,
    "_npu_getCurrentRawStreamNoWait": streams.current_raw_stream,
}
