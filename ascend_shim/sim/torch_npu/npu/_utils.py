"""Device-argument parsing shared by the torch.npu functions (torch.load also looks it up here); the rule lives
in the device core, which both torch_npu layers share."""
from ascend_shim.sim._device_index import _checked_index, _get_device_index, _native

__all__ = ["_checked_index", "_get_device_index", "_native"]
