"""The real layer of the emulated NPU: Huawei's torch_npu Python, unmodified, over the emulated device.

``ascend-shim fetch-torch-npu`` prepares the package (:mod:`.prepare`); under ``--simulate`` with
``ASCEND_SHIM_SIM_LAYER=real`` (or ``auto`` when prepared) the shim enables it (:mod:`.loader`) and runs its
``npu`` backend code, exactly what runs on an Ascend machine. torch_npu's native layer, which needs CANN, is
played by :mod:`.native` (runtime, memory, streams, RNG), :mod:`.c10d` (``ProcessGroupHCCL``) and :mod:`.ops`
(the ``npu::`` op library) over the emulator's device core.

The modules depend one way: loader -> native -> ops, c10d -> enabled, namespace. Importing the package, or
:mod:`.prepare`, does not import torch (the shim decides the layer before the program imports torch).
"""
from .enabled import enabled_site, prepared_metadata
from .loader import disable, enable, find_prepared, native_layer_built, prepared_problem, prepared_state

__all__ = ["enable", "disable", "enabled_site", "find_prepared", "prepared_problem", "prepared_state",
           "prepared_metadata", "native_layer_built"]
