"""``torch_npu.utils.collect_env``: environment facts libraries read (the ``kernels`` hub picks its CANN build
variant from ``get_cann_version()``).

The emulator has no CANN toolkit; it answers the CANN line torch_npu 2.13 pairs with, or
``ASCEND_SHIM_SIM_CANN_VERSION`` when set, in the real function's format (``"8.3.RC1"``).
"""

EMULATED_CANN_VERSION = "8.3.RC1"


def get_cann_version() -> str:
    from ascend_shim.config import setting

    return setting("sim_cann_version") or EMULATED_CANN_VERSION
