"""npu_rotary_mul, npu_rms_norm, npu_swiglu and torch_npu.optim.NpuFusedAdamW vs independent references."""
import importlib.util
import inspect
from pathlib import Path

import pytest
import torch

_spec = importlib.util.spec_from_file_location("_ops_support", Path(__file__).with_name("_ops_support.py"))
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)

import ascend_shim.sim.ops as ops  # noqa: E402
from ascend_shim.sim.ops import norm_act, rotary  # noqa: E402
from ascend_shim.sim.ops.optim import NpuFusedAdamW  # noqa: E402


def rot():
    return S.op("npu_rotary_mul", "rotary")


def rms():
    return S.op("npu_rms_norm", "norm_act")


def swiglu():
    return S.op("npu_swiglu", "norm_act")


def _leaf(t):
    return S.to_dev(t).requires_grad_()


# ------------------------------------------------------------------------------------------------------ rotary

R_SHAPES_HALF = [(1, 1, 5, 8), (2, 1, 5, 8), (1, 3, 1, 8), (2, 3, 1, 8), (2, 1, 1, 8), (2, 3, 5, 8)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("mode,rshape", [("half", s) for s in R_SHAPES_HALF] +
                         [("interleave", s) for s in [(1, 1, 5, 8), (1, 3, 1, 8), (2, 1, 1, 8)]])
def test_rotary_mul_matches_reference(mode, rshape, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 8, generator=g).to(dtype)
    ang = torch.rand(*rshape, generator=g) * 6
    r1, r2 = ang.cos().to(dtype), ang.sin().to(dtype)
    xd, r1d, r2d = _leaf(x), _leaf(r1), _leaf(r2)
    out = rot()(xd, r1d, r2d, rotary_mode=mode)
    assert out.dtype == dtype and out.shape == x.shape
    xr, r1r, r2r = (t.detach().float().clone().requires_grad_() for t in (x, r1, r2))
    rotf = S.rotate_half if mode == "half" else S.rotate_interleave
    ref = xr * r1r + rotf(xr) * r2r
    S.close(out, ref, dtype)
    dy = torch.randn(x.shape, generator=g).to(dtype)
    out.backward(S.to_dev(dy))
    (ref * dy.float()).sum().backward()
    S.close(xd.grad, xr.grad, dtype, scale=2)
    S.close(r1d.grad, r1r.grad, dtype, scale=4)
    S.close(r2d.grad, r2r.grad, dtype, scale=4)


def test_rotary_half_equals_hf_rope_and_rotate_matrix():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 2, 4, 8, generator=g)
    cos = torch.rand(1, 1, 4, 8, generator=g)
    sin = torch.rand(1, 1, 4, 8, generator=g)
    out = rot()(*S.to_dev(x, cos, sin))
    torch.testing.assert_close(out.cpu(), x * cos + S.rotate_half(x) * sin)
    # explicit rotate matrix: rotate(x) = x @ rotate
    rmat = torch.zeros(8, 8)
    for i in range(4):
        rmat[i + 4, i] = -1.0  # out[i] = -x[i+4]
        rmat[i, i + 4] = 1.0  # out[i+4] = x[i]
    out2 = rot()(*S.to_dev(x, cos, sin), rotate=S.to_dev(rmat))
    torch.testing.assert_close(out2, out)
    xd = _leaf(x)
    y = rot()(xd, *S.to_dev(cos, sin), rotate=S.to_dev(rmat))
    with pytest.raises(RuntimeError, match="backward is not supported when 'rotate' is given"):
        y.sum().backward()


def test_rotary_rejections():
    x = S.to_dev(torch.randn(2, 3, 5, 8))
    r = S.to_dev(torch.randn(1, 1, 5, 8))
    with pytest.raises(RuntimeError, match="4-dimensional"):
        rot()(S.to_dev(torch.randn(3, 5, 8)), S.to_dev(torch.randn(1, 5, 8)), S.to_dev(torch.randn(1, 5, 8)))
    with pytest.raises(RuntimeError, match="must be even"):
        rot()(S.to_dev(torch.randn(2, 3, 5, 7)), S.to_dev(torch.randn(1, 1, 5, 7)), S.to_dev(torch.randn(1, 1, 5, 7)))
    with pytest.raises(RuntimeError, match="does not broadcast"):
        rot()(x, S.to_dev(torch.randn(2, 3, 5, 4)), S.to_dev(torch.randn(2, 3, 5, 4)))
    with pytest.raises(RuntimeError, match="does not broadcast"):  # interleave allows only 11SD/1S1D/S11D
        rot()(x, S.to_dev(torch.randn(2, 3, 5, 8)), S.to_dev(torch.randn(2, 3, 5, 8)), rotary_mode="interleave")
    with pytest.raises(RuntimeError, match="rotary_mode must be"):
        rot()(x, r, r, rotary_mode="neox")
    with pytest.raises(RuntimeError, match="must be the same"):
        rot()(x, r.half(), r.half())
    with pytest.raises(NotImplementedError, match="'CPU' backend"):
        rotary.npu_rotary_mul(torch.randn(2, 3, 5, 8), torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8))


# ---------------------------------------------------------------------------------------------------- rms norm

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape,gshape", [((4, 16), (16,)), ((2, 3, 16), (16,)), ((2, 3, 4, 8), (4, 8))])
def test_rms_norm_matches_reference(shape, gshape, dtype):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(*shape, generator=g).to(dtype)
    gamma = (torch.rand(*gshape, generator=g) + 0.5).to(dtype)
    xd, gd = _leaf(x), _leaf(gamma)
    y, rstd = rms()(xd, gd, epsilon=1e-5)
    nd = len(gshape)
    dims = tuple(range(len(shape) - nd, len(shape)))
    xr, gr = (t.detach().float().clone().requires_grad_() for t in (x, gamma))
    ms = (xr * xr).mean(dim=dims, keepdim=True)
    ref = xr / torch.sqrt(ms + 1e-5) * gr
    assert y.dtype == dtype and rstd.dtype == torch.float32
    assert tuple(rstd.shape) == tuple(shape[: len(shape) - nd]) + (1,) * nd
    S.close(y, ref, dtype)
    torch.testing.assert_close(rstd.cpu(), (1 / torch.sqrt(ms + 1e-5)).detach(), atol=1e-4, rtol=1e-4)
    assert not rstd.requires_grad
    dy = torch.randn(*shape, generator=g).to(dtype)
    y.backward(S.to_dev(dy))
    (ref * dy.float()).sum().backward()
    S.close(xd.grad, xr.grad, dtype, scale=2)
    S.close(gd.grad, gr.grad, dtype, scale=4)


def test_rms_norm_rejections():
    x = S.to_dev(torch.randn(4, 16, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="gamma dtype must equal the input dtype"):
        rms()(x, S.to_dev(torch.ones(16)))
    with pytest.raises(RuntimeError, match="trailing dims"):
        rms()(x, S.to_dev(torch.ones(8, dtype=torch.bfloat16)))
    with pytest.raises(RuntimeError, match="2-8 dims"):
        rms()(S.to_dev(torch.randn(16)), S.to_dev(torch.ones(16)))
    with pytest.raises(RuntimeError, match="dtype must be one of"):
        rms()(S.to_dev(torch.randn(4, 16, dtype=torch.float64)), S.to_dev(torch.ones(16, dtype=torch.float64)))
    with pytest.raises(NotImplementedError, match="'CPU' backend"):
        norm_act.npu_rms_norm(torch.randn(4, 16), torch.ones(16))
    assert inspect.signature(norm_act.npu_rms_norm).parameters["epsilon"].default == 1e-06


# ------------------------------------------------------------------------------------------------------ swiglu

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape,dim", [((4, 16), -1), ((2, 6, 3), 1), ((8,), 0), ((2, 3, 4, 6), -2)])
def test_swiglu_matches_reference(shape, dim, dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(*shape, generator=g).to(dtype)
    xd = _leaf(x)
    out = swiglu()(xd, dim=dim)
    xr = x.detach().float().clone().requires_grad_()
    a, b = xr.chunk(2, dim=dim)  # A is the first half
    ref = a * torch.sigmoid(a) * b
    S.close(out, ref, dtype)
    dy = torch.randn(out.shape, generator=g).to(dtype)
    out.backward(S.to_dev(dy))
    (ref * dy.float()).sum().backward()
    S.close(xd.grad, xr.grad, dtype, scale=2)


def test_swiglu_rejections():
    with pytest.raises(RuntimeError, match="divisible by 2"):
        swiglu()(S.to_dev(torch.randn(4, 7)))
    with pytest.raises(RuntimeError, match="dim must be in range"):
        swiglu()(S.to_dev(torch.randn(4, 8)), dim=2)
    with pytest.raises(RuntimeError, match="dtype must be one of"):
        swiglu()(S.to_dev(torch.randn(4, 8, dtype=torch.float64)))
    with pytest.raises(NotImplementedError, match="'CPU' backend"):
        norm_act.npu_swiglu(torch.randn(4, 8))


# ----------------------------------------------------------------------------------------------- NpuFusedAdamW

def _adamw_cls():
    return NpuFusedAdamW


def _params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(5, 3, generator=g).to(dtype), torch.randn(7, generator=g).to(dtype)]


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_fused_adamw_matches_torch_adamw(dtype, amsgrad):
    kw = dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, amsgrad=amsgrad)
    ours = [S.to_dev(p).requires_grad_() for p in _params(dtype)]
    ref = [p.detach().clone().requires_grad_() for p in _params(dtype)]
    opt = _adamw_cls()(ours, **kw)
    ropt = torch.optim.AdamW(ref, foreach=False, **kw)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        grads = [torch.randn(p.shape, generator=g).to(dtype) for p in ref]
        for p, gr in zip(ours, grads, strict=True):
            if p.grad is None:
                p.grad = S.to_dev(gr)
            else:
                p.grad.copy_(S.to_dev(gr))  # the combined grads are updated in place, as autograd does
        for p, gr in zip(ref, grads, strict=True):
            p.grad = gr.clone()
        opt.step()
        ropt.step()
    t = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-3, rtol=2e-3)
    for p, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(p.detach().cpu(), r.detach(), **t)
    assert opt.state[ours[0]]["step"] == 5 and isinstance(opt.state[ours[0]]["step"], int)


def test_fused_adamw_rejects_bf16_and_set_to_none():
    p = S.to_dev(torch.randn(4, dtype=torch.bfloat16)).requires_grad_()
    opt = _adamw_cls()([p])  # the real class checks lazily, when params and grads are combined
    p.grad = torch.ones_like(p)
    with pytest.raises(TypeError, match="Fused optimizer's parameters must be either float32 or float16"):
        opt.step()
    q = S.to_dev(torch.randn(4)).requires_grad_()
    opt2 = _adamw_cls()([q])
    with pytest.raises(ValueError, match="set_to_none is not supported in fused optimizers"):
        opt2.zero_grad(set_to_none=True)
    assert inspect.signature(NpuFusedAdamW.zero_grad).parameters["set_to_none"].default is False
    with pytest.raises(ValueError, match="Invalid learning rate"):
        NpuFusedAdamW([q], lr=-1)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
        NpuFusedAdamW([q], betas=(0.9, 1.0))
    sig = inspect.signature(NpuFusedAdamW.__init__).parameters
    assert [n for n in sig][1:] == ["params", "lr", "betas", "eps", "weight_decay", "amsgrad"]
    assert sig["weight_decay"].default == 1e-2


def test_fused_adamw_zero_grad_in_place_and_frozen_param_set():
    a = S.to_dev(torch.ones(3)).requires_grad_()
    b = S.to_dev(torch.ones(3)).requires_grad_()
    opt = _adamw_cls()([a, b], lr=0.1, weight_decay=0.0)
    a.grad = torch.ones_like(a)
    opt.step()  # combines now: only `a` has a gradient
    g = a.grad
    opt.zero_grad()
    assert a.grad is g and torch.count_nonzero(a.grad.cpu()) == 0  # zeroed in place, not set to None
    b.grad = torch.ones_like(b)
    before = b.detach().clone()
    opt.step()
    torch.testing.assert_close(b.detach(), before)  # not in the combined set: never updated (as on hardware)


def test_fused_adamw_rejects_host_params():
    p = torch.randn(3, requires_grad=True)
    p.grad = torch.ones(3)
    with pytest.raises(RuntimeError, match="Tensors to combine must be on NPU"):
        NpuFusedAdamW([p]).step()


def test_all_names():
    assert set(ops.__all__) == {"npu_fusion_attention", "npu_fusion_attention_grad", "npu_prompt_flash_attention",
                                "npu_incre_flash_attention", "npu_fused_infer_attention_score", "npu_rotary_mul",
                                "npu_rms_norm", "npu_swiglu", "npu_geglu"}
    for name in ops.__all__:
        assert callable(getattr(ops, name))
    sig = inspect.signature(ops.npu_rotary_mul).parameters
    assert list(sig) == ["input", "r1", "r2", "rotary_mode", "rotate"] and sig["rotary_mode"].default == "half"
    assert list(inspect.signature(ops.npu_swiglu).parameters) == ["input", "dim"]
    assert list(inspect.signature(ops.npu_geglu).parameters) == ["input", "dim", "approximate", "activate_left"]
