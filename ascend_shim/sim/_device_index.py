"""Device-argument parsing of the emulated device (npu indices), shared by both torch_npu layers."""
from __future__ import annotations

import torch

from ascend_shim.sim import _extension


def _native():
    return _extension.load()


def _get_device_index(device, optional: bool = False, allow_cpu: bool = False) -> int:
    """Index of an npu ``device`` given as int, "npu:1", torch.device or None (None -> current if optional)."""
    if isinstance(device, str):
        device = torch.device(device)
    index = None
    if isinstance(device, torch.device):
        if allow_cpu and device.type == "cpu":
            return -1
        if device.type != "npu":
            raise ValueError(f"Expected a npu device, but got: {device}")
        index = device.index
    elif isinstance(device, int) and not isinstance(device, bool):
        index = device
    elif device is not None:
        raise ValueError(f"Expected a torch.device, str or int for an npu device, but got: {device!r}")
    if index is None:
        if optional:
            return _native().current_device()
        raise ValueError(f"Expected a npu device with a specified index or an integer, but got: {device}")
    return index


def _checked_index(device) -> int:
    """Like _get_device_index(optional=True), and the index must name an existing device."""
    return _native().check_index(_get_device_index(device, optional=True))


def device_count() -> int:
    """The devices this process sees. Until the program first uses a device, ``ASCEND_RT_VISIBLE_DEVICES`` is read
    again on every call, as the runtime does before it initializes (a script may narrow it at its top)."""
    native = _native()
    if not native.device_count_fixed():
        from ascend_shim.config import setting
        from ascend_shim.sim import visible_devices

        native.configure_device_count(len(visible_devices(setting("sim_devices"))))
    return native.device_count()
