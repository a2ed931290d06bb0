"""``torch.npu.aclnn``: the ACLNN kernel library's version and its conv HF32 switch.

torch_npu does not report the ACLNN version (``version()`` warns and returns None on hardware too); the switch is
the ``ALLOW_CONV_HF32`` option, the same one ``torch.npu.conv.allow_hf32`` reads (HF32 itself is not emulated:
convolutions compute in their dtype whatever it says).
"""
from __future__ import annotations

import contextlib
import sys
import warnings

from torch.backends import ContextProp, PropModule

from .npu_config import _allowHF32Conv

__all__ = ["version", "flags", "set_flags"]  # and the allow_hf32 property of the module

_conv = _allowHF32Conv()


def version():
    """None: torch_npu has no way to read the ACLNN version."""
    warnings.warn("torch.npu.aclnn.version isn't implemented!", stacklevel=2)
    return None


def set_flags(_allow_hf32=None):
    """Set the switches given (None leaves one as it is); returns the previous values."""
    previous = (_conv.allow_hf32,)
    if _allow_hf32 is not None:
        _conv.allow_hf32 = _allow_hf32
    return previous


@contextlib.contextmanager
def flags(allow_hf32=True):
    previous = set_flags(allow_hf32)
    try:
        yield
    finally:
        set_flags(*previous)


def _set_allow_hf32(value) -> None:
    _conv.allow_hf32 = value


class _AclnnModule(PropModule):
    """The module with ``allow_hf32`` as a property, as torch's backend switch modules (``torch.backends.cudnn``)."""

    allow_hf32 = ContextProp(lambda: _conv.allow_hf32, _set_allow_hf32)


sys.modules[__name__] = _AclnnModule(sys.modules[__name__], __name__)
