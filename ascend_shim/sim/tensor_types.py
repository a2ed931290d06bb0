"""Legacy typed tensor and storage classes of torch.npu (``torch.npu.FloatTensor``, ``torch.npu.HalfStorage``...).

Part of the device core: torch_npu's C++ creates them when its extension initializes, so both torch_npu layers
over the emulated device get them from here (:func:`install`).

torch_npu creates them in C++ like ``torch.cuda.FloatTensor``: ``isinstance(t, torch.npu.FloatTensor)`` is true
for a float32 npu tensor, ``torch.npu.FloatTensor(2, 3)`` builds one on the current device, and
``t.type(torch.npu.HalfTensor)`` converts (the string form ``t.type("torch.npu.HalfTensor")`` is torch's own).
The storages are typed storages on the npu device, as torch_npu's ``_LegacyStorage`` subclasses.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.storage import _LegacyStorage

from ._device_index import _get_device_index, _native

TENSOR_DTYPES = {"BoolTensor": torch.bool, "ByteTensor": torch.uint8, "CharTensor": torch.int8,
                 "ShortTensor": torch.int16, "IntTensor": torch.int32, "LongTensor": torch.int64,
                 "HalfTensor": torch.float16, "FloatTensor": torch.float32, "DoubleTensor": torch.float64,
                 "BFloat16Tensor": torch.bfloat16}
STORAGE_DTYPES = {name.replace("Tensor", "Storage"): dtype for name, dtype in TENSOR_DTYPES.items()}

__all__ = list(TENSOR_DTYPES) + list(STORAGE_DTYPES)


class _NPUTensorType(type):
    """Metaclass of the typed tensor classes: instance checks and legacy construction, like torch.tensortype."""

    dtype: torch.dtype  # each class's

    def __instancecheck__(cls, obj):
        return (isinstance(obj, torch.Tensor) and obj.device.type == "npu" and obj.dtype == cls.dtype
                and obj.layout == torch.strided)

    def __call__(cls, *args, device=None, **kwargs):
        index = _native().current_device() if device is None else _get_device_index(device, optional=True)
        cpu_type = getattr(torch, cls.__name__)
        return cpu_type(*args, **kwargs).to(torch.device("npu", index))

    def __repr__(cls):
        return f"<class 'torch.npu.{cls.__name__}'>"


def _tensor_type(name: str, dtype: torch.dtype):
    return _NPUTensorType(name, (), {"__module__": "torch.npu", "__qualname__": name, "dtype": dtype,
                                     "is_npu": True, "is_sparse": False,
                                     "__doc__": f"npu tensors of dtype {dtype} (legacy typed-tensor class)"})


class _NPULegacyStorage(_LegacyStorage):
    """Base of the typed storages; torch builds them on the device named by ``__module__`` ("torch.npu")."""

    @classmethod
    def from_buffer(cls, *args, **kwargs):
        raise RuntimeError("from_buffer: Not available for NPU storage")

    @classmethod
    def _new_with_weak_ptr(cls, *args, **kwargs):
        raise RuntimeError("_new_with_weak_ptr: Not available for NPU storage")

    @classmethod
    def _new_shared_filename(cls, manager, obj, size, *, device=None, dtype=None):
        raise RuntimeError("_new_shared_filename: Not available for NPU storage")


def _storage_type(name: str, dtype: torch.dtype):
    from torch._utils import classproperty

    return type(name, (_NPULegacyStorage,), {"__module__": "torch.npu", "__qualname__": name,
                                             "_dtype": classproperty(lambda cls, d=dtype: d),
                                             "dtype": classproperty(lambda cls, d=dtype: d)})


TYPES = {name: _tensor_type(name, dtype) for name, dtype in TENSOR_DTYPES.items()}
STORAGES = {name: _storage_type(name, dtype) for name, dtype in STORAGE_DTYPES.items()}
# bound by name, as torch.npu re-exports them
BoolTensor, BoolStorage = TYPES["BoolTensor"], STORAGES["BoolStorage"]
ByteTensor, ByteStorage = TYPES["ByteTensor"], STORAGES["ByteStorage"]
CharTensor, CharStorage = TYPES["CharTensor"], STORAGES["CharStorage"]
ShortTensor, ShortStorage = TYPES["ShortTensor"], STORAGES["ShortStorage"]
IntTensor, IntStorage = TYPES["IntTensor"], STORAGES["IntStorage"]
LongTensor, LongStorage = TYPES["LongTensor"], STORAGES["LongStorage"]
HalfTensor, HalfStorage = TYPES["HalfTensor"], STORAGES["HalfStorage"]
FloatTensor, FloatStorage = TYPES["FloatTensor"], STORAGES["FloatStorage"]
DoubleTensor, DoubleStorage = TYPES["DoubleTensor"], STORAGES["DoubleStorage"]
BFloat16Tensor, BFloat16Storage = TYPES["BFloat16Tensor"], STORAGES["BFloat16Storage"]


def tensor_type_name(obj):
    """"torch.npu.HalfTensor" for the class torch.npu.HalfTensor, else None."""
    if isinstance(obj, _NPUTensorType):
        return f"torch.npu.{obj.__name__}"
    return None


def install(npu_module) -> None:
    """Give ``npu_module`` (``torch.npu``) the typed classes, make the storages known to torch and let
    ``Tensor.type`` accept the classes, as torch_npu's extension initialization does (idempotent)."""
    for name, cls in {**TYPES, **STORAGES}.items():
        setattr(npu_module, name, cls)
    for storage in STORAGES.values():
        torch._storage_classes.add(storage)
    install_type_method()


def uninstall() -> None:
    """Undo :func:`install`'s changes to torch (the classes stay on the npu module, which goes with the layer)."""
    for storage in STORAGES.values():
        torch._storage_classes.discard(storage)
    current = torch.Tensor.type
    if getattr(current, "_ascend_shim_sim", False):
        torch.Tensor.type = current.__wrapped__  # type: ignore[attr-defined,method-assign]  # our wrapper's original


def install_type_method() -> None:
    """Let ``Tensor.type`` accept the typed classes (torch only knows its own C++ tensor types); idempotent, and
    the same wrapper each time the layer comes back."""
    global _type_method
    original = torch.Tensor.type
    if getattr(original, "_ascend_shim_sim", False):
        return
    method = _type_method
    if method is None or getattr(method, "__wrapped__", None) is not original:  # torch's method was replaced

        @functools.wraps(original)
        def type(self, dtype=None, non_blocking=False, **kwargs):
            name = tensor_type_name(dtype)
            if name is not None:
                dtype = name
            if dtype is None:
                return original(self, **kwargs) if kwargs else original(self)
            return original(self, dtype, non_blocking, **kwargs)

        type._ascend_shim_sim = True  # type: ignore[attr-defined]  # marks the wrapper as ours
        method = _type_method = type
    torch.Tensor.type = method  # type: ignore[method-assign]  # as torch_npu's C++ extends it


_type_method: Callable[..., Any] | None = None
