"""The emulated ``torch_npu`` package: what ``import torch_npu`` returns while the sim backend is active.

Importing it installs the emulator. ``torch_npu.npu`` is ``torch.npu``; ``torch_npu.optim`` comes from
:mod:`ascend_shim.sim.ops` when that package is present, and so do the fused ops: ``torch.ops.npu.<op>``
operators (:mod:`ascend_shim.sim.ops.library`) exported as torch_npu exports its ops, ``torch_npu.<op> is
torch.ops.npu.<op>``, and ``torch.<op>`` raises torch_npu's deprecation error naming ``torch_npu.<op>``. The
storage-format helpers (``get_npu_format``, ``npu_format_cast`` ...) answer in ND, and ``torch_npu._C`` has the
device runtime's bindings (:mod:`._C`).
"""
import functools
import importlib.util

import torch

from ascend_shim import sim as _sim

_sim.install()

# after install(): the submodules are the installed device's
from . import _C as _C, npu as npu, optim as optim  # noqa: E402
from .npu.utils import _erase_stream as erase_stream  # noqa: E402
from .utils._error_code import ErrCode as _ErrCode, pta_error as _pta_error  # noqa: E402

__version__ = _sim.torch_base_version()
__all__ = ["erase_stream"]


def _deprecated_torch_alias(packet):
    """``torch.<op>``: kept by torch_npu for old callers, raising with the name to use instead."""
    @functools.wraps(packet)
    def wrapper(*args, **kwargs):
        raise RuntimeError(f"torch.{packet.__name__} is deprecated and will be removed in future version. "
                           f"Use torch_npu.{packet.__name__} instead." + _pta_error(_ErrCode.NOT_SUPPORT))

    return wrapper


def _export_ops() -> None:
    from ascend_shim.sim.ops import library

    for name in library.install():
        packet = getattr(torch.ops.npu, name)
        globals()[name] = packet
        if name in library.PUBLIC_OPS:
            __all__.append(name)
        setattr(torch, name, _deprecated_torch_alias(packet))


def _export_format_helpers() -> None:
    """``torch_npu.get_npu_format``, ``npu_format_cast``, ``empty_with_format``, ``get_storage_size``: the
    ``npu::`` storage helpers, in ND (:mod:`ascend_shim.sim.formats`)."""
    from ascend_shim.sim import formats

    for name in formats.install():
        globals()[name] = getattr(torch.ops.npu, name)
    op = torch.ops.npu.get_npu_format

    def get_npu_format(tensor):
        """The tensor's storage format, as a :class:`Format`."""
        return formats.Format(op(tensor))

    globals().update(get_npu_format=get_npu_format, Format=formats.Format)


if importlib.util.find_spec("ascend_shim.sim.ops") is not None:
    _export_ops()
_export_format_helpers()
