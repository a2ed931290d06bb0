"""Option and precision switches of torch.npu (``set_option``, ``matmul.allow_hf32``, ``config``...).

They record state the way torch_npu does and read it back; the emulator computes in the CPU's native precision
whatever they say (HF32 matmuls and private NZ formats are not emulated).
"""
from __future__ import annotations

import os
import warnings
from enum import IntEnum

import torch

__all__ = ["set_option", "set_compile_mode", "is_jit_compile_false", "set_mm_bmm_format_nd",
           "get_mm_bmm_format_nd", "CubeMathType", "set_task_queue_enable", "get_task_queue_enable",
           "set_deterministic_level", "use_compatible_impl", "are_compatible_impl_enabled", "set_device_limit",
           "get_device_limit"]

_options: dict[str, str] = {}
_mm_bmm_format_nd = True


def set_option(option: dict) -> None:
    if not isinstance(option, dict):
        raise TypeError("npu option must be a dict.")
    if option.get("MM_BMM_ND_ENABLE") in ("enable", "disable"):
        set_mm_bmm_format_nd(option["MM_BMM_ND_ENABLE"] == "enable")
    _options.update({str(key): str(value) for key, value in option.items()})


def _get_option(name: str) -> str | None:
    return _options.get(name)


def set_compile_mode(jit_compile: bool = False) -> None:
    set_option({"jitCompile": "enable" if jit_compile else "disable"})


def is_jit_compile_false() -> bool:
    """True unless set_compile_mode(jit_compile=True) was called (the Atlas A2 default is no JIT)."""
    return _get_option("jitCompile") != "enable"


def set_mm_bmm_format_nd(is_nd: bool = True) -> None:
    global _mm_bmm_format_nd
    _mm_bmm_format_nd = bool(is_nd)


def get_mm_bmm_format_nd() -> bool:
    return _mm_bmm_format_nd


class _npuConfig:
    """``torch.npu.config``: ``allow_internal_format`` (default False: the emulator keeps every tensor ND)."""

    @property
    def allow_internal_format(self) -> bool:
        return _get_option("ALLOW_INTERNAL_FORMAT") == "enable"

    @allow_internal_format.setter
    def allow_internal_format(self, value: bool) -> None:
        set_option({"ALLOW_INTERNAL_FORMAT": "enable" if value else "disable"})


class _allowHF32Matmul:
    """``torch.npu.matmul.allow_hf32`` (torch_npu default: False)."""

    @property
    def allow_hf32(self) -> bool:
        return _get_option("ALLOW_MATMUL_HF32") == "enable"

    @allow_hf32.setter
    def allow_hf32(self, value: bool) -> None:
        set_option({"ALLOW_MATMUL_HF32": "enable" if value else "disable"})


class _allowHF32Conv:
    """``torch.npu.conv.allow_hf32`` (torch_npu default: True)."""

    @property
    def allow_hf32(self) -> bool:
        return _get_option("ALLOW_CONV_HF32") in (None, "", "enable")

    @allow_hf32.setter
    def allow_hf32(self, value: bool) -> None:
        set_option({"ALLOW_CONV_HF32": "enable" if value else "disable"})


class _CubeMathType(IntEnum):
    """Cube-unit precision modes of torch_npu (values as in torch_npu)."""
    KEEP_DTYPE = 0
    ALLOW_FP32_DOWN_PRECISION = 1
    USE_FP16 = 2
    USE_HF32 = 3
    FORCE_GRP_ACC_FOR_FP32 = 4
    USE_FP32_ADD = 4


CubeMathType = _CubeMathType


def _initial_task_queue_mode() -> int:
    if os.environ.get("ASCEND_LAUNCH_BLOCKING") == "1":
        return 0
    value = os.environ.get("TASK_QUEUE_ENABLE", "1")
    return int(value) if value in ("0", "1", "2") else 1


_task_queue_mode = _initial_task_queue_mode()


def set_task_queue_enable(mode) -> None:
    """Task-queue level 0/1/2. Emulated kernels run synchronously at every level: the level is recorded and
    read back (ASCEND_LAUNCH_BLOCKING=1 pins the effective level to 0, as on hardware)."""
    global _task_queue_mode
    if isinstance(mode, str):
        mode = int(mode)
    if mode not in (0, 1, 2):
        raise RuntimeError(f"mode must be 0, 1, or 2, but got {mode}.")
    _task_queue_mode = int(mode)


def get_task_queue_enable() -> int:
    return 0 if os.environ.get("ASCEND_LAUNCH_BLOCKING") == "1" else _task_queue_mode


_deterministic_level = 0


def set_deterministic_level(level) -> None:
    """As torch_npu: level 0 turns torch's deterministic algorithms off, level >= 1 on (with a warning when that
    changes torch's setting); the emulator's own kernels are deterministic at every level."""
    global _deterministic_level
    enabled = torch.are_deterministic_algorithms_enabled()
    if level == 0 and enabled:
        warnings.warn("The current configuration value of 'torch_npu.npu.set_deterministic_level' conflicts with "
                      "'torch.use_deterministic_algorithms'. 'torch.use_deterministic_algorithms' has been "
                      "configured to 'False'.", stacklevel=2)
        torch.use_deterministic_algorithms(False)
    elif level >= 1 and not enabled:
        warnings.warn("The current configuration value of 'torch_npu.npu.set_deterministic_level' conflicts with "
                      "'torch.use_deterministic_algorithms'. 'torch.use_deterministic_algorithms' has been "
                      "configured to 'True'.", stacklevel=2)
        torch.use_deterministic_algorithms(True)
    _deterministic_level = int(level)
    warnings.warn("After using 'torch_npu.npu.set_deterministic_level', please do not use "
                  "'torch.use_deterministic_algorithms' anymore, as it may cause unknown errors.", stacklevel=2)


def _get_deterministic_level() -> int:
    """The level, synced with torch's switch as torch_npu does (a later use_deterministic_algorithms wins)."""
    global _deterministic_level
    enabled = torch.are_deterministic_algorithms_enabled()
    if _deterministic_level == 0 and enabled:
        _deterministic_level = 1
    elif _deterministic_level >= 1 and not enabled:
        _deterministic_level = 0
    return _deterministic_level


def use_compatible_impl(is_enable) -> None:
    set_option({"TORCH_NPU_USE_COMPATIBLE_IMPL": "1" if is_enable else "0"})


def are_compatible_impl_enabled() -> bool:
    return _get_option("TORCH_NPU_USE_COMPATIBLE_IMPL") == "1"


def _checked_device_id(device) -> int:
    from .utils import device_count

    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"device must be an int, but got {type(device).__name__}")
    if device < 0 or device >= device_count():
        raise AssertionError("Invalid device id")
    return device


class _CallOnce:
    """A function a process may call once (torch_npu's rule for ``set_device_limit``); ``called`` is public, as
    torch_npu's."""

    def __init__(self, func):
        self.func, self.called, self.result = func, False, None
        self.__name__ = self.__qualname__ = func.__name__
        self.__doc__ = func.__doc__
        self.__wrapped__ = func  # inspect.signature reads the function's parameters

    def __call__(self, *args, **kwargs):
        if self.called:
            raise RuntimeError(f"Function '{self.func.__name__}' has already been called, You can only set this "
                               f"interface once.")
        self.called = True
        self.result = self.func(*args, **kwargs)
        return self.result


@_CallOnce
def set_device_limit(device, cube_num=-1, vector_num=-1):
    """Limit the cube and vector cores the device's operators use (-1 leaves one as it is); once per process."""
    from ascend_shim.sim import runtime

    from .utils import _lazy_init

    _checked_device_id(device)
    _lazy_init()
    if cube_num != -1:
        runtime.set_device_res_limit(device, 0, cube_num)
    if vector_num != -1:
        runtime.set_device_res_limit(device, 1, vector_num)


def get_device_limit(device) -> dict[str, int]:
    """``{"cube_core_num": ..., "vector_core_num": ...}``: the device's limits (all its cores unless set)."""
    from ascend_shim.sim import runtime

    from .utils import _lazy_init

    _checked_device_id(device)
    _lazy_init()
    return {"cube_core_num": runtime.get_device_res_limit(device, 0),
            "vector_core_num": runtime.get_device_res_limit(device, 1)}
