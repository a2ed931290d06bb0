"""npu_geglu and its backward op npu_geglu_grad against an independent reference, on the lane's layer.

The reference is torch's own formula on the host with torch's autograd: ``A, B = x.chunk(2, dim)``; the activated
half is B (``activate_left=True``: A), ``gelu = F.gelu(B, approximate="tanh" if approximate == 1 else "none")``,
``y = A * gelu`` (torch_npu's documentation of npu_geglu and of aclnnGeGluV3). The emulated op is reached as programs
reach it, ``torch_npu.npu_geglu`` (the ``torch.ops.npu`` operator: its derivative calls ``npu_geglu_grad``), and as
the kernel itself. The same tests run in the real lane (Huawei's torch_npu Python) and the builtin lane.
"""
from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ascend_shim.sim as sim
from ascend_shim.sim import counters
from ascend_shim.sim import ops as kernels
from ascend_shim.sim.ops import library, norm_act

_spec = importlib.util.spec_from_file_location("_ops_support", Path(__file__).with_name("_ops_support.py"))
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)

torch_npu = pytest.importorskip("torch_npu")

GEGLU = "npu_geglu(Tensor self, int dim=-1, int approximate=1, bool activate_left=False) -> (Tensor, Tensor)"
GEGLU_GRAD = ("npu_geglu_grad(Tensor grad_output, Tensor self, Tensor gelu, int dim=-1, int approximate=1, "
              "bool activate_left=False) -> Tensor")
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])


def _reference(x, dim, approximate, activate_left):
    """(y, gelu) in float32 of a float32 leaf, by torch's own ops (autograd-friendly)."""
    first, second = x.chunk(2, dim=dim)
    value, gate = (second, first) if activate_left else (first, second)
    gelu = torch.nn.functional.gelu(gate, approximate={0: "none", 1: "tanh"}[approximate])
    return value * gelu, gelu


def _check_against_reference(fn, shape, dim, approximate, activate_left, dtype):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(*shape, generator=g) * 2).to(dtype)
    xd = S.to_dev(x).requires_grad_()
    kwargs = {"dim": dim, "approximate": approximate, "activate_left": activate_left}
    y, gelu = fn(xd, **kwargs)
    half = list(shape)
    half[dim] //= 2
    assert list(y.shape) == half == list(gelu.shape)
    assert y.dtype == gelu.dtype == dtype and y.device.type == gelu.device.type == "npu"
    assert y.requires_grad and not gelu.requires_grad  # the gelu output is not differentiable (op-plugin's yaml)
    xr = x.detach().float().clone().requires_grad_()
    ref_y, ref_gelu = _reference(xr, dim, approximate, activate_left)
    S.close(y, ref_y, dtype)
    S.close(gelu, ref_gelu, dtype)
    dy = torch.randn(half, generator=g).to(dtype)
    y.backward(S.to_dev(dy))
    (ref_y * dy.float()).sum().backward()
    S.close(xd.grad, xr.grad, dtype, scale=2)
    return xd.grad


CASES = [((4, 16), -1, 1, False), ((4, 16), -1, 0, False), ((2, 6, 3), 1, 1, True), ((8,), 0, 0, True),
         ((2, 3, 4, 6), -2, 1, False), ((2, 1, 2, 1, 2, 1, 2, 4), 7, 0, False)]


@DTYPES
@pytest.mark.parametrize("shape,dim,approximate,activate_left", CASES)
def test_operator_matches_the_reference_forward_and_backward(shape, dim, approximate, activate_left, dtype):
    before = counters.op_calls()
    _check_against_reference(torch_npu.npu_geglu, shape, dim, approximate, activate_left, dtype)
    after = counters.op_calls()
    for op in ("npu_geglu", "npu_geglu_grad"):  # autograd went through the backward op, as on the NPU
        assert after.get(op, 0) - before.get(op, 0) == 1, op


@pytest.mark.parametrize("shape,dim,approximate,activate_left", CASES[:4])
def test_kernel_matches_the_reference_and_the_operator(shape, dim, approximate, activate_left):
    direct = _check_against_reference(kernels.npu_geglu, shape, dim, approximate, activate_left, torch.float32)
    through = _check_against_reference(torch_npu.npu_geglu, shape, dim, approximate, activate_left, torch.float32)
    assert torch.equal(direct, through)


def test_default_is_tanh_gelu_of_the_right_half():
    x = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    y, gelu = torch_npu.npu_geglu(S.to_dev(x))
    want_gelu = torch.nn.functional.gelu(torch.tensor([[0.5, 3.0]]), approximate="tanh")
    torch.testing.assert_close(gelu.cpu(), want_gelu)
    torch.testing.assert_close(y.cpu(), torch.tensor([[1.0, -2.0]]) * want_gelu)
    erf_gelu = torch.nn.functional.gelu(torch.tensor([[0.5, 3.0]]))
    assert not torch.allclose(gelu.cpu(), erf_gelu, rtol=0, atol=1e-6)  # tanh, not erf: the modes differ here


def test_the_backward_op_called_directly():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 10, generator=g)
    dy = torch.randn(3, 5, generator=g)
    for approximate in (0, 1):
        for left in (False, True):
            y, gelu = torch_npu.npu_geglu(S.to_dev(x), -1, approximate, left)
            dx = torch_npu.npu_geglu_grad(S.to_dev(dy), S.to_dev(x), gelu, -1, approximate, left)
            xr = x.clone().requires_grad_()
            (_reference(xr, -1, approximate, left)[0] * dy).sum().backward()
            S.close(dx, xr.grad, torch.float32)
            assert not dx.requires_grad


def test_refusals_as_on_the_npu():
    x = S.to_dev(torch.randn(4, 8))
    with pytest.raises(RuntimeError, match="dtype must be one of \\[float16, bfloat16, float32\\], but got float64"):
        torch_npu.npu_geglu(S.to_dev(torch.randn(4, 8, dtype=torch.float64)))
    with pytest.raises(RuntimeError, match="dtype must be one of"):
        kernels.npu_geglu(S.to_dev(torch.ones(4, 8, dtype=torch.int32)))
    with pytest.raises(RuntimeError, match="divisible by 2"):
        torch_npu.npu_geglu(S.to_dev(torch.randn(4, 7)))
    with pytest.raises(RuntimeError, match="out of range \\[-2, 1\\]"):
        torch_npu.npu_geglu(x, dim=2)
    with pytest.raises(RuntimeError, match="approximate must be 0 \\(none\\) or 1 \\(tanh\\)"):
        torch_npu.npu_geglu(x, approximate=2)
    with pytest.raises(RuntimeError, match="out of range \\[1, 8\\]"):
        torch_npu.npu_geglu(S.to_dev(torch.randn(2, 1, 1, 1, 1, 1, 1, 1, 2)))
    with pytest.raises(NotImplementedError, match="Could not run 'npu::npu_geglu' with arguments from the 'CPU'"):
        torch_npu.npu_geglu(torch.randn(4, 8))
    with pytest.raises(NotImplementedError, match="'CPU' backend"):
        norm_act.npu_geglu(torch.randn(4, 8))
    y, gelu = torch_npu.npu_geglu(x)
    with pytest.raises(RuntimeError, match="grad_output shape \\[4, 8\\] must be the output shape \\[4, 4\\]"):
        torch_npu.npu_geglu_grad(x, x, gelu)
    with pytest.raises(RuntimeError, match="the dtypes of grad_output, input, gelu must be the same"):
        torch_npu.npu_geglu_grad(y.half(), x, gelu)


def test_the_operators_have_torch_npu_s_schemas():
    assert torch_npu.npu_geglu is torch.ops.npu.npu_geglu
    assert torch_npu.npu_geglu_grad is torch.ops.npu.npu_geglu_grad
    assert str(torch.ops.npu.npu_geglu.default._schema) == f"npu::{GEGLU}"
    assert str(torch.ops.npu.npu_geglu_grad.default._schema) == f"npu::{GEGLU_GRAD}"
    for line in library._shipped().values():  # the same schema in every release line (op-plugin 6.0.0 on)
        assert GEGLU in line["schemas"] and GEGLU_GRAD in line["schemas"]
    for name in ("npu_geglu", "npu_geglu_grad"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"npu::{name}", "AutogradPrivateUse1")
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(f"npu::{name}", "CompositeImplicitAutograd")
    assert "npu_geglu" not in torch_npu.__all__  # torch_npu 2.13's __all__ does not list it
    for name in ("npu_geglu", "npu_geglu_grad"):  # the kernels take the schema's arguments (self as `input`)
        schema = getattr(torch.ops.npu, name).default._schema
        want = [("input" if a.name == "self" else a.name, a.default_value if a.has_default_value() else None)
                for a in schema.arguments]
        params = inspect.signature(getattr(norm_act, name)).parameters.values()
        assert [(p.name, None if p.default is p.empty else p.default) for p in params] == want, name


def test_fake_tensors_get_the_kernel_s_shapes():
    x = S.to_dev(torch.randn(2, 6, 4, dtype=torch.bfloat16))
    real = torch_npu.npu_geglu(x, 1, 0, True)
    with FakeTensorMode() as mode:
        fake = torch_npu.npu_geglu(mode.from_tensor(x), 1, 0, True)
    assert [(t.shape, t.dtype, t.device) for t in fake] == [(t.shape, t.dtype, t.device) for t in real]


@pytest.mark.builtin_layer  # a layer difference docs/emulator.md lists: the real layer keeps torch_npu's Meta kernels
def test_opcheck_with_the_builtin_meta_kernels():
    x = S.to_dev(torch.randn(3, 8)).requires_grad_()
    result = torch.library.opcheck(torch.ops.npu.npu_geglu.default, (x,), {"dim": -1, "approximate": 1},
                                   test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.skipif(sim.layer() != "real", reason="torch_npu's own Meta kernel of npu_geglu_grad (the real layer's)")
def test_torch_npu_s_meta_kernel_of_the_backward_op_fails_as_on_hardware():
    # torch_npu 2.13's npu_geglu_backward_meta requires dim and approximate, which the dispatcher leaves out at their
    # defaults, and returns two tensors where the schema returns one: FakeTensor (torch.compile) through npu_geglu's
    # backward fails with torch_npu on an NPU too; the real layer keeps torch_npu's Meta kernels
    if library._builtin:  # the builtin facade was imported in this process (tests/contract collects it)
        pytest.skip("the builtin layer's Meta kernels were registered over torch_npu's in this process")
    x = S.to_dev(torch.randn(3, 8))
    with FakeTensorMode() as mode:
        fx = mode.from_tensor(x)
        with pytest.raises(TypeError, match="missing 2 required positional arguments: 'dim' and 'approximate'"):
            torch.ops.npu.npu_geglu_grad(fx[:, :4], fx, fx[:, :4])
        with pytest.raises(RuntimeError, match="Unable to cast"):
            torch.ops.npu.npu_geglu_grad(fx[:, :4], fx, fx[:, :4], 1, 0)
