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

from ..errors import NotEmulatedError
from .enabled import prepared_metadata

_libraries: list[torch.library.Library] = []  # kept alive: a Library's registrations go with it


def define_and_register(schemas: list[str] | None = None) -> list[str]:
    """Define ``schemas`` (default: the prepared package's) in the ``npu`` namespace and register the emulated
    kernels; returns the schemas torch refused (none expected: reported by the real layer's probe)."""
    if _libraries:
        return []
    if schemas is None:
        schemas = prepared_metadata()["npu_schemas"]
    definitions = torch.library.Library("npu", "DEF")
    refused = []
    for schema in schemas:
        try:
            definitions.define(schema)
        except RuntimeError as exc:
            refused.append(f"{schema.split('(', 1)[0]}: {str(exc).splitlines()[0]}")
    kernels = torch.library.Library("npu", "IMPL")
    _libraries.extend([definitions, kernels])
    from .. import formats
    from ..ops import library

    emulated = set(library.register_kernels(kernels))
    emulated.update(formats.register(kernels))  # the storage and format helpers, as on the builtin layer
    for name in sorted({schema.split("(", 1)[0] for schema in schemas}):
        if name.split(".", 1)[0] not in emulated:
            kernels.impl(name, _not_emulated(name), "PrivateUse1")
    return refused


def _not_emulated(name: str):
    def kernel(*args, **kwargs):
        raise NotEmulatedError(f"torch.ops.npu.{name} is not emulated: the emulated NPU implements the fused "
                               f"attention, rotary, RMSNorm, SwiGLU and GeGLU ops and torch_npu's storage helpers; run "
                               f"this op on an Ascend machine")
    return kernel
