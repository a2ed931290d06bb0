"""torch_npu's storage-format helpers over the emulated device, which stores every tensor as it is indexed (ND).

Both torch_npu layers register these kernels behind the ``npu::`` schemas (the real layer's from the prepared
wheel, the builtin layer's from :data:`SCHEMAS`, the emulated release's): ``get_npu_format`` answers ND, a cast
to one of the plain layouts is the tensor itself, and a private layout (FRACTAL_NZ, NC1HWC0 ...) raises
:class:`NotEmulatedError`, since the emulated device cannot store it.
"""
from __future__ import annotations

from enum import IntEnum

import torch

from . import _extension
from .errors import NotEmulatedError

#: torch_npu's plain layouts (FormatHelper's non-private formats): NCHW, NHWC, ND, NDHWC, NCDHW. A tensor in one
#: of them is stored as it is indexed, which is all the emulated device stores.
BASE_FORMATS = {0: "NCHW", 1: "NHWC", 2: "ND", 27: "NDHWC", 30: "NCDHW"}
ACL_FORMAT_ND = 2

class Format(IntEnum):
    """``torch_npu.Format``: torch_npu's storage formats, printed by name (what ``get_npu_format`` returns)."""

    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33
    NC = 35
    NCL = 47
    FRACTAL_NZ_C0_16 = 50
    FRACTAL_NZ_C0_32 = 51
    FRACTAL_NZ_C0_2 = 52
    FRACTAL_NZ_C0_4 = 53
    FRACTAL_NZ_C0_8 = 54

    def __str__(self):
        return self.name


#: the helpers' schemas in torch_npu 2.13.0 (``npu_native_functions_by_codegen.yaml``)
SCHEMAS = (
    "get_npu_format(Tensor self) -> int",
    "npu_format_cast(Tensor self, int acl_format, *, int? customize_dtype=None, int? input_dtype=None) -> Tensor",
    "empty_with_format(int[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
    "bool? pin_memory=None, int acl_format=2, int? base_addr_aligned_kb=None) -> Tensor",
    "get_storage_size(Tensor self) -> int",
)


def check_format(op: str, acl_format) -> None:
    if int(acl_format) not in BASE_FORMATS:
        raise NotEmulatedError(f"{op}: acl_format {acl_format} is a private NPU format (NZ, NC1HWC0 ...), which the "
                               f"emulated NPU does not store; the plain formats {sorted(BASE_FORMATS)} work")


def get_storage_size(self):
    return self.untyped_storage().nbytes() // self.element_size()


def npu_change_data_ptr(dst, src, index):
    return _extension.load().change_data_ptr(dst, src, int(index))


def get_npu_format(self):
    return ACL_FORMAT_ND  # how the emulated device stores every tensor


def npu_format_cast(self, acl_format, customize_dtype=None, input_dtype=None):
    check_format("npu_format_cast", acl_format)
    return self


def empty_with_format(size, dtype=None, layout=None, device=None, pin_memory=None, acl_format=2,
                      base_addr_aligned_kb=None):
    check_format("empty_with_format", acl_format)
    return torch.empty(size, dtype=dtype, layout=layout, device=device or "npu", pin_memory=pin_memory)


#: the storage and format helpers with a tensor argument, by op name (registered at PrivateUse1)
HELPERS = {"get_storage_size": get_storage_size, "npu_change_data_ptr": npu_change_data_ptr,
           "get_npu_format": get_npu_format, "npu_format_cast": npu_format_cast}


def register(kernels: torch.library.Library) -> list[str]:
    """Register the helpers whose schemas ``kernels``' namespace defines; returns their names."""
    done = []
    for name, fn in HELPERS.items():
        if _defined(f"{kernels.ns}::{name}"):
            kernels.impl(name, fn, "PrivateUse1")
            done.append(name)
    if _defined(f"{kernels.ns}::empty_with_format"):
        kernels.impl("empty_with_format", empty_with_format, "BackendSelect")  # no tensor argument: by `device`
        done.append("empty_with_format")
    return done


def _defined(qualname: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(qualname, "")
    except RuntimeError:
        return False
    return True


_builtin: list[torch.library.Library] = []  # the builtin layer's libraries, kept alive


def install() -> list[str]:
    """The builtin layer's helpers: :data:`SCHEMAS` defined in ``npu`` (unless defined already) and their kernels
    (idempotent). Returns the op names, which ``torch_npu`` exports."""
    names = [schema.split("(", 1)[0] for schema in SCHEMAS]
    if not _builtin:
        definitions = torch.library.Library("npu", "FRAGMENT")
        for name, schema in zip(names, SCHEMAS, strict=True):
            if not _defined(f"npu::{name}"):
                definitions.define(schema)
        kernels = torch.library.Library("npu", "IMPL")
        register(kernels)
        kernels.impl("get_npu_format", lambda self: ACL_FORMAT_ND, "Meta")
        kernels.impl("npu_format_cast", npu_format_cast, "Meta")
        _builtin.extend([definitions, kernels])
    return names
