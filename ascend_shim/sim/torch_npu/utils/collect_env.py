"""``torch_npu.utils.collect_env``: environment facts libraries read (the ``kernels`` hub picks its CANN build
variant from ``get_cann_version()``: ``cann85`` from ``"8.5.0"``).

The emulator has no CANN toolkit; it answers the emulated machine's CANN release, the one the real layer's
toolkit record holds (:data:`ascend_shim.sim.CANN_VERSION`), so that both layers say the same,
or ``ASCEND_SHIM_SIM_CANN_VERSION`` when set, in the real function's format (``"8.5.0"``, ``"8.3.RC1"``).
"""


def get_cann_version() -> str:
    from ascend_shim.config import setting
    from ascend_shim.sim import CANN_VERSION

    return setting("sim_cann_version") or CANN_VERSION
