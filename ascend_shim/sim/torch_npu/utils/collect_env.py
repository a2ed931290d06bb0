"""``torch_npu.utils.collect_env``: environment facts libraries read (the ``kernels`` hub picks its CANN build
variant from ``get_cann_version()``).

The emulator has no CANN toolkit; it answers the CANN line torch_npu 2.13 pairs with, or
``ASCEND_SHIM_SIM_CANN_VERSION`` when set, in the real function's format (``"8.3.RC1"``).
"""
import os

EMULATED_CANN_VERSION = "8.3.RC1"


def get_cann_version() -> str:
    return os.environ.get("ASCEND_SHIM_SIM_CANN_VERSION") or EMULATED_CANN_VERSION
