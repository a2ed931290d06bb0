"""Sparse COO tensors on the emulated NPU: the ops torch_npu registers for its sparse key, and no others.

torch_npu's code generator registers for ``SparsePrivateUse1`` every sparse kernel torch shares between its CPU and
CUDA backends (device-generic code that calls other ops: constructors, accessors, ``to_dense``, ``clone``,
``mm``/``mv`` through ``addmm``/``addmv``, elementwise math...), plus four kernels of its own (``_coalesce``, ``max``,
``add.out``, ``mul.out``); any other op on a sparse npu tensor raises "CAUTION: The operator '...' is not currently
supported on the NPU backend." The emulator registers the first group as those same generic kernels (torch's
SparseCPU registration of them is the same code, run here on npu tensors, under a guard of the tensors' device as
torch_npu's generated wrappers set one), ``max`` as torch_npu computes it (the maximum of the dense tensor), the
other three as the CPU kernels run on host aliases of the npu memory, and the same error for the rest. Compressed
layouts (CSR/CSC/BSR/BSC), which torch_npu keeps under a key of their own, are not emulated: converting to them
raises that error.
"""
from __future__ import annotations

import torch

#: ops whose SparseCPU and SparseCUDA kernels are one device-generic function: torch_npu registers each for its
#: sparse key (checked against torch's native_functions.yaml by the tests); compressed-layout conversions left out
GENERIC = (
    "abs", "abs_", "abs.out", "view_as_real", "view_as_complex", "sgn", "sgn_", "sgn.out", "conj_physical.out",
    "add.Tensor", "add_.Tensor", "asinh", "asinh_", "asinh.out", "atanh", "atanh_", "atanh.out", "asin", "asin_",
    "asin.out", "atan", "atan_", "atan.out", "_sparse_broadcast_to", "cat", "ceil", "ceil_", "ceil.out", "copy_",
    "div.Tensor", "div_.Tensor", "div.out", "div.Tensor_mode", "div_.Tensor_mode", "div.out_mode",
    "empty.memory_format", "empty_like", "erf", "erf_", "erf.out", "expm1", "expm1_", "expm1.out", "floor", "floor_",
    "floor.out", "floor_divide", "floor_divide_.Tensor", "floor_divide.out", "frac", "frac_", "frac.out", "isnan",
    "nan_to_num", "nan_to_num_", "nan_to_num.out", "log1p", "log1p_", "log1p.out", "mm", "mm.out", "mul.Tensor",
    "mul_.Tensor", "mv", "narrow_copy", "permute", "rad2deg", "rad2deg_", "rad2deg.out", "deg2rad", "deg2rad_",
    "deg2rad.out", "neg", "neg_", "neg.out", "round", "round_", "round.out", "relu", "relu_", "sin", "sin_", "sin.out",
    "sinh", "sinh_", "sinh.out", "sum", "sum.dim_IntList", "sqrt", "sqrt_", "sqrt.out", "tan", "tan_", "tan.out",
    "tanh", "tanh_", "tanh.out", "threshold_backward.grad_input", "threshold_backward", "trunc", "trunc_",
    "trunc.out", "unsqueeze", "zeros.out", "native_norm", "native_norm.ScalarOpt_dim_dtype",
    "norm.ScalarOpt_dim_dtype", "norm.ScalarOpt_dim", "clone", "resize_as_sparse_", "zero_", "sub.out",
    "sub.Tensor", "sub_.Tensor", "_sparse_coo_tensor_with_dims", "_sparse_coo_tensor_with_dims_and_tensors",
    "sparse_resize_", "sparse_resize_and_clear_", "sparse_mask", "_sparse_mask_projection", "_to_dense",
    "sparse_dim", "_dimI", "dense_dim", "_dimV", "_nnz", "is_coalesced", "_indices", "_values", "_coalesced_",
    "indices", "values", "copy_sparse_to_sparse_", "_to_sparse.sparse_dim", "_to_sparse", "erfinv", "erfinv_",
    "erfinv.out", "sign", "sign_", "sign.out", "signbit", "signbit.out", "any", "pow.Tensor_Scalar_out",
    "pow.Tensor_Scalar", "isinf", "isposinf", "isposinf.out", "isneginf", "isneginf.out",
)
#: torch_npu's own sparse kernels (op-plugin) computed by the CPU kernel of a functional op on host aliases
HOST = {"_coalesce": "_coalesce", "add.out": "add.Tensor", "mul.out": "mul.Tensor"}
#: dense npu -> sparse COO: torch_npu's dense kernels (torch's CPU and CUDA share this one, ``dense_to_sparse``)
DENSE_TO_SPARSE = ("_to_sparse", "_to_sparse.sparse_dim")
#: the generic kernels that produce compressed layouts, which the emulator does not have
COMPRESSED = ("_to_sparse_csr", "_to_sparse_csc", "_to_sparse_bsr", "_to_sparse_bsc")

_SPARSE_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.SparseCPU)
_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_libraries: list = []


def install() -> None:
    """Register the kernels and the error for everything else (idempotent)."""
    if _libraries:
        return
    kernels = torch.library.Library("aten", "IMPL")
    for name in GENERIC:
        kernels.impl(name, _generic(_overload(name)), "SparsePrivateUse1")
    for name, functional in HOST.items():
        kernels.impl(name, _on_host(_overload(functional)), "SparsePrivateUse1")
    kernels.impl("max", _max, "SparsePrivateUse1")
    for name in DENSE_TO_SPARSE:
        kernels.impl(name, _dense_to_sparse(_overload(name)), "PrivateUse1")
    rest = torch.library.Library("_", "IMPL")
    rest.fallback(_not_supported, "SparsePrivateUse1")
    _libraries.extend((kernels, rest))


def _overload(name: str):
    op, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, op), overload or "default")


def _number_tensor(value):
    """A wrapped-number operand (``t * 2``) reaches a Python kernel as a Python number; it goes back to the kernel as
    the 0-dim tensor it was, with the dtype a wrapped number promotes as."""
    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.get_default_dtype())
    return torch.tensor(value, dtype=torch.complex64 if torch.get_default_dtype() == torch.float32 else
                        torch.complex128)


def _tensor_args(op, args, kwargs):
    """``args``/``kwargs`` with Python numbers in Tensor-typed arguments of ``op`` made tensors again."""
    schema = op._schema.arguments
    tensor_typed = {a.name for a in schema if isinstance(a.type, torch.TensorType)}
    args = tuple(_number_tensor(v) if i < len(schema) and schema[i].name in tensor_typed
                 and isinstance(v, (bool, int, float, complex)) else v for i, v in enumerate(args))
    kwargs = {k: _number_tensor(v) if k in tensor_typed and isinstance(v, (bool, int, float, complex)) else v
              for k, v in kwargs.items()}
    return args, kwargs


def _device_index(args, kwargs):
    """The npu device a kernel runs on: its ``device=`` argument, else its first npu tensor's (None: current)."""
    device = kwargs.get("device")
    if isinstance(device, torch.device) and device.type == "npu":
        return device.index
    for value in args:
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor) and t.device.type == "npu":
                return t.device.index
    return None


def _generic(op, keyset=_SPARSE_CPU):
    """torch's device-generic kernel of ``op`` (its registration under ``keyset``), on the npu arguments as they
    are."""

    def kernel(*args, **kwargs):
        args, kwargs = _tensor_args(op, args, kwargs)
        index = _device_index(args, kwargs)
        if index is None or index == torch.accelerator.current_device_index():
            return op.redispatch(keyset, *args, **kwargs)
        with torch.accelerator.device_index(index):
            return op.redispatch(keyset, *args, **kwargs)

    return kernel


def _dense_to_sparse(op):
    generic = _generic(op, _CPU)

    def kernel(*args, **kwargs):
        if kwargs.get("layout") not in (None, torch.sparse_coo):
            raise RuntimeError(f"CAUTION: The operator 'aten::_to_sparse' is not currently supported on the NPU "
                               f"backend for layout {kwargs['layout']} (only sparse COO is emulated).")
        return generic(*args, **kwargs)

    return kernel


def _max(self):
    """torch_npu's sparse ``max``: the maximum of the dense tensor (implicit zeros included)."""
    return torch.max(self.to_dense())


def _not_supported(op, *args, **kwargs):
    raise RuntimeError(f"CAUTION: The operator '{op._schema.name}' is not currently supported on the NPU backend.")


# -- torch_npu's own kernels: the CPU kernels on host aliases ------------------------------------------------------
def _device_of(values):
    """The one npu device of the op's tensors (0-dim CPU scalars aside), as a device kernel requires."""
    devices = {t.device for t in values
               if isinstance(t, torch.Tensor) and not (t.device.type == "cpu" and t.dim() == 0)}
    if len(devices) > 1:
        first, second = sorted(devices, key=str)[:2]
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {first} "
                           f"and {second}!")
    return devices.pop()


def to_host(t):
    """A CPU tensor over an npu tensor's memory (sparse: over its indices and values), no copy."""
    from . import cpu_alias

    if not isinstance(t, torch.Tensor) or t.device.type != "npu":
        return t
    if t.layout == torch.sparse_coo:
        return torch.ops.aten._sparse_coo_tensor_with_dims_and_tensors(
            t.sparse_dim(), t.dense_dim(), t.shape, cpu_alias(t._indices()), cpu_alias(t._values()), dtype=t.dtype,
            layout=torch.sparse_coo, device="cpu", is_coalesced=t.is_coalesced())
    return cpu_alias(t)


def to_npu(t, device):
    """An npu tensor on ``device`` adopting a CPU result's memory (sparse: its indices and values), no copy."""
    from . import npu_alias

    if not isinstance(t, torch.Tensor):
        return t
    if t.layout == torch.sparse_coo:
        return torch.ops.aten._sparse_coo_tensor_with_dims_and_tensors(
            t.sparse_dim(), t.dense_dim(), t.shape, npu_alias(t._indices(), device.index),
            npu_alias(t._values(), device.index), dtype=t.dtype, layout=torch.sparse_coo, device=device,
            is_coalesced=t.is_coalesced())
    return npu_alias(t if t.is_contiguous() else t.contiguous(), device.index)


def _on_host(op):
    """The functional ``op``'s CPU kernel on host aliases; an ``out=`` tensor receives the result (resized as the
    kernel resizes it)."""

    def kernel(*args, **kwargs):
        out = kwargs.pop("out", None)
        device = _device_of([*args, *kwargs.values(), out])
        args, kwargs = _tensor_args(op, args, kwargs)
        with torch.no_grad():
            result = op(*(to_host(a) for a in args), **{k: to_host(v) for k, v in kwargs.items()})
        result = to_npu(result, device)
        if out is None:
            return result
        if out.layout == torch.sparse_coo:
            return out.copy_(result)
        out.resize_(result.shape)
        return out.copy_(result)

    return kernel
