"""The environment a test's child process starts from: this one without the shim's settings (each test sets the
ones it means), except the emulator layer the session runs on (the lane: builtin or real)."""
import os

LANE = "ASCEND_SHIM_SIM_LAYER"


def shim_free_env(*also_drop: str) -> dict[str, str]:
    """``os.environ`` without ``ASCEND_SHIM_*`` (the lane's layer kept) and without the names starting with any of
    ``also_drop`` (``"CUDA_VISIBLE"``, ``"ASCEND_RT"`` ...)."""
    drop = ("ASCEND_SHIM", *also_drop)
    return {k: v for k, v in os.environ.items() if not k.startswith(drop) or k == LANE}
