"""The ``npu`` operator library under the real layer: every schema torch_npu's native library registers, with
the emulated device's kernels behind the ones the emulator implements.

torch_npu's ``libtorch_npu.so`` defines its ``npu::`` ops from the build-time yaml that ships in the wheel;
``fetch-torch-npu`` read those schemas into ``prepared.json``, so each release line gets its own. Kernels sit at
PrivateUse1 and AutogradPrivateUse1, as torch_npu's C++ registers them (its Python Meta registrations refuse a
CompositeImplicitAutograd kernel). An op the emulator does not implement exists with its schema and fails when
called on an npu tensor, naming the op, as a dispatch with no kernel does.
"""
from __future__ import annotations

import torch

_libraries: list[torch.library.Library] = []  # kept alive: a Library's registrations go with it


def _get_storage_size(self):
    return self.untyped_storage().nbytes() // self.element_size()


def _npu_change_data_ptr(dst, src, index):
    from ..sim import _extension

    return _extension.load().change_data_ptr(dst, src, int(index))


#: torch_npu's plain layouts (FormatHelper's non-private formats): NCHW, NHWC, ND, NDHWC, NCDHW. A tensor in one
#: of them is stored as it is indexed, which is all the emulated device stores.
BASE_FORMATS = {0: "NCHW", 1: "NHWC", 2: "ND", 27: "NDHWC", 30: "NCDHW"}


def _check_format(op: str, acl_format) -> None:
    if int(acl_format) not in BASE_FORMATS:
        from .native import NotEmulatedError

        raise NotEmulatedError(f"{op}: acl_format {acl_format} is a private NPU format (NZ, NC1HWC0 ...), which the "
                               f"emulated NPU does not store; the plain formats {sorted(BASE_FORMATS)} work")


def _get_npu_format(self):
    return 2  # ACL_FORMAT_ND: how the emulated device stores every tensor


def _npu_format_cast(self, acl_format, customize_dtype=None, input_dtype=None):
    _check_format("npu_format_cast", acl_format)
    return self


def _empty_with_format(size, dtype=None, layout=None, device=None, pin_memory=None, acl_format=2,
                       base_addr_aligned_kb=None):
    _check_format("empty_with_format", acl_format)
    return torch.empty(size, dtype=dtype, layout=layout, device=device or "npu", pin_memory=pin_memory)


#: the storage and format helpers of the native layer, by op name
HELPERS = {"get_storage_size": _get_storage_size, "npu_change_data_ptr": _npu_change_data_ptr,
           "get_npu_format": _get_npu_format, "npu_format_cast": _npu_format_cast}


def define_and_register(schemas: list[str] | None = None) -> list[str]:
    """Define ``schemas`` (default: the prepared package's) in the ``npu`` namespace and register the emulated
    kernels; returns the schemas torch refused (none expected: reported by the real layer's probe)."""
    if _libraries:
        return []
    if schemas is None:
        from . import loader

        schemas = loader.prepared_metadata()["npu_schemas"]
    definitions = torch.library.Library("npu", "DEF")
    refused = []
    for schema in schemas:
        try:
            definitions.define(schema)
        except RuntimeError as exc:
            refused.append(f"{schema.split('(', 1)[0]}: {str(exc).splitlines()[0]}")
    kernels = torch.library.Library("npu", "IMPL")
    _libraries.extend([definitions, kernels])
    from ..sim.ops import library

    emulated = set(library.register_kernels(kernels))
    for name, fn in HELPERS.items():
        kernels.impl(name, fn, "PrivateUse1")
        emulated.add(name)
    kernels.impl("empty_with_format", _empty_with_format, "BackendSelect")  # no tensor argument: by `device`
    emulated.add("empty_with_format")
    for name in sorted({schema.split("(", 1)[0] for schema in schemas}):
        if name.split(".", 1)[0] not in emulated:
            kernels.impl(name, _not_emulated(name), "PrivateUse1")
    return refused


def _not_emulated(name: str):
    def kernel(*args, **kwargs):
        from .native import NotEmulatedError

        raise NotEmulatedError(f"torch.ops.npu.{name} is not emulated: the emulated NPU implements the fused "
                               f"attention, rotary, RMSNorm and SwiGLU ops and torch_npu's storage helpers; run "
                               f"this op on an Ascend machine")
    return kernel
