"""Option and precision switches of torch.npu (``set_option``, ``matmul.allow_hf32``, ``config``...).

They record state the way torch_npu does and read it back; the emulator computes in the CPU's native precision
whatever they say (HF32 matmuls and private NZ formats are not emulated).
"""
from __future__ import annotations

__all__ = ["set_option", "set_compile_mode", "is_jit_compile_false", "set_mm_bmm_format_nd",
           "get_mm_bmm_format_nd"]

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
