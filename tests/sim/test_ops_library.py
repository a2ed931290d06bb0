"""The emulated fused ops as ``torch.ops.npu`` operators (``ascend_shim.sim.ops.library``).

``torch_npu.<op> is torch.ops.npu.<op>``, the dispatcher path gives exactly what the emulated kernels give (outputs,
gradients, rejections), autograd goes through the backward ops, FakeTensor and torch.compile see single nodes with
Meta shapes, and ``torch.<op>`` raises torch_npu's deprecation error.
"""
from __future__ import annotations

import functools
import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ascend_shim.sim as sim
from ascend_shim.sim import counters
from ascend_shim.sim import ops as kernels
from ascend_shim.sim.ops import _release, library

torch_npu = pytest.importorskip("torch_npu")
builtin_only = pytest.mark.skipif(sim.layer() != "builtin", reason="the builtin layer's own schemas and Meta kernels")


def _leaf(t):
    return t.detach().clone().requires_grad_(True)


def _dev(*shape, dtype=torch.float16):
    return torch.randn(*shape, dtype=dtype, device="npu")


@functools.cache
def _causal_mask():
    return torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1).to("npu")


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


# ------------------------------------------------------------------------------------------------- the operators

@pytest.mark.parametrize("name", library.OPS)
def test_torch_npu_op_is_the_operator_packet(name):
    packet = getattr(torch.ops.npu, name)
    assert isinstance(packet, torch._ops.OpOverloadPacket)
    assert getattr(torch_npu, name) is packet


@builtin_only
def test_the_schemas_are_the_emulated_release_s():
    shipped = {s.split("(", 1)[0]: s for s in library.release_schemas()}
    assert sorted(shipped) == sorted(library.OPS)
    for name, schema in shipped.items():
        assert str(getattr(torch.ops.npu, name).default._schema) == str(torch._C.parse_schema(f"npu::{schema}"))


def test_every_shipped_release_line_has_every_op():
    lines = library._shipped()
    assert sorted(lines, key=library._line) == [f"2.{minor}" for minor in range(4, 15)]
    for line, entry in lines.items():
        assert sorted(s.split("(", 1)[0] for s in entry["schemas"]) == sorted(library.OPS), line
    # a line newer than the data takes the newest, an older one the oldest
    assert library.release_schemas((2, 99)) == library.release_schemas((2, 14))
    assert library.release_schemas((2, 1)) == library.release_schemas((2, 4))


@pytest.mark.parametrize("name", library.OPS)
def test_kernels_sit_at_the_npu_keys_not_composite(name):
    qualname = f"npu::{name}"
    for key in ("PrivateUse1", "AutogradPrivateUse1"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key), key
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CompositeImplicitAutograd")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CPU")


# ------------------------------------------------------------------------ the dispatcher path = the kernels

def _run(fn, inputs, backward_weight=None, rng_state=None, **kwargs):
    """Call fn on fresh leaves of ``inputs`` (tensors), the npu generator at ``rng_state``, and backprop a weighted
    sum of the first output."""
    leaves = [_leaf(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    if rng_state is not None:
        torch.npu.set_rng_state(rng_state)
    out = fn(*leaves, **kwargs)
    first = out[0] if isinstance(out, tuple) else out
    (first.float() * (backward_weight if backward_weight is not None else 1.0)).square().sum().backward()
    grads = [t.grad for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]
    return (out if isinstance(out, tuple) else (out,)), grads


CASES = {
    "rms_norm": ("npu_rms_norm", lambda: [_dev(2, 3, 16), _dev(16)], {"epsilon": 1e-5}),
    "rms_norm_2d_gamma": ("npu_rms_norm", lambda: [_dev(2, 3, 16, dtype=torch.bfloat16),
                                                   _dev(3, 16, dtype=torch.bfloat16)], {}),
    "swiglu": ("npu_swiglu", lambda: [_dev(2, 6, 8, dtype=torch.float32)], {"dim": 1}),
    "rotary_half": ("npu_rotary_mul", lambda: [_dev(2, 3, 5, 8), _dev(1, 1, 5, 8), _dev(1, 1, 5, 8)], {}),
    "rotary_interleave": ("npu_rotary_mul", lambda: [_dev(2, 3, 5, 8, dtype=torch.float32),
                                                     _dev(1, 3, 1, 8, dtype=torch.float32),
                                                     _dev(1, 3, 1, 8, dtype=torch.float32)],
                          {"rotary_mode": "interleave"}),
    "fa_bnsd_pse_dropout": ("npu_fusion_attention",
                            lambda: [_dev(1, 2, 16, 16), _dev(1, 2, 16, 16), _dev(1, 2, 16, 16), 2, "BNSD",
                                     _dev(1, 2, 16, 16)],
                            {"atten_mask": _causal_mask(), "scale": 0.25, "keep_prob": 0.9, "sparse_mode": 2}),
    "fa_bsh_gqa": ("npu_fusion_attention", lambda: [_dev(2, 8, 64), _dev(2, 8, 32), _dev(2, 8, 32), 4, "BSH"],
                   {"scale": 0.25}),
    "fa_tnd": ("npu_fusion_attention", lambda: [_dev(10, 2, 16), _dev(10, 2, 16), _dev(10, 2, 16), 2, "TND"],
               {"atten_mask": _causal_mask(), "scale": 0.25, "sparse_mode": 3, "actual_seq_qlen": [4, 10],
                "actual_seq_kvlen": [4, 10]}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_outputs_and_gradients_equal_the_kernels(case):
    name, make, kwargs = CASES[case]
    inputs = make()
    state = torch.npu.get_rng_state()  # the same dropout draw on both paths
    want_out, want_grads = _run(getattr(kernels, name), inputs, rng_state=state, **kwargs)
    got_out, got_grads = _run(getattr(torch_npu, name), inputs, rng_state=state, **kwargs)
    assert len(got_out) == len(want_out) and len(got_grads) == len(want_grads) > 0
    for a, b in zip(got_out + tuple(got_grads), want_out + tuple(want_grads), strict=True):
        assert _same(a, b)


def test_backward_runs_through_the_backward_ops():
    before = dict(counters.op_calls())
    for case in ("rms_norm", "swiglu", "rotary_half", "fa_bsh_gqa"):
        name, make, kwargs = CASES[case]
        _run(getattr(torch_npu, name), make(), **kwargs)
    after = counters.op_calls()
    for op in ("npu_rms_norm", "npu_rms_norm_backward", "npu_swiglu", "npu_swiglu_backward", "npu_rotary_mul",
               "npu_rotary_mul_backward", "npu_fusion_attention", "npu_fusion_attention_grad"):
        assert after.get(op, 0) - before.get(op, 0) == 1, op


def test_non_differentiable_ops_give_outputs_without_grad():
    q = _leaf(_dev(1, 2, 16, 16))
    out = torch_npu.npu_prompt_flash_attention(q, q, q, num_heads=2, input_layout="BNSD", scale_value=0.25)
    assert not out.requires_grad
    assert _same(out, kernels.npu_prompt_flash_attention(q, q, q, num_heads=2, input_layout="BNSD",
                                                         scale_value=0.25))
    out, lse = torch_npu.npu_fused_infer_attention_score(q[:, :, :1], q, q, num_heads=2, input_layout="BNSD",
                                                         scale=0.25, softmax_lse_flag=True)
    assert not out.requires_grad and not lse.requires_grad
    fa = torch_npu.npu_fusion_attention(q, q, q, 2, "BNSD", scale=0.25)
    grads = torch_npu.npu_fusion_attention_grad(q, q, q, fa[0], 2, "BNSD", softmax_max=fa[1], softmax_sum=fa[2],
                                                attention_in=fa[0], scale_value=0.25)
    assert not any(g is not None and g.requires_grad for g in grads)


def test_rotate_matrix_has_no_backward():
    x = _leaf(_dev(1, 2, 4, 8, dtype=torch.float32))
    r = _dev(1, 1, 4, 8, dtype=torch.float32)
    y = torch_npu.npu_rotary_mul(x, r, r, rotate=torch.eye(8, device="npu"))
    with pytest.raises(RuntimeError, match="backward is not supported when 'rotate' is given"):
        y.sum().backward()


# ------------------------------------------------------------------------------------------------ rejections

def test_host_tensors_are_rejected_by_the_dispatcher_as_on_the_npu():
    with pytest.raises(NotImplementedError, match="Could not run 'npu::npu_rms_norm' with arguments from the 'CPU'"):
        torch_npu.npu_rms_norm(torch.randn(2, 8), torch.ones(8))


def test_mixed_devices_and_bad_arguments_get_the_kernels_messages():
    x, g = _dev(2, 8), _dev(8)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch_npu.npu_rms_norm(x, g.cpu())
    with pytest.raises(RuntimeError, match="gamma dtype must equal the input dtype"):
        torch_npu.npu_rms_norm(x, g.float())
    with pytest.raises(RuntimeError, match="2-8 dims"):
        torch_npu.npu_rms_norm(_dev(8), g)
    with pytest.raises(RuntimeError, match="divisible by 2"):
        torch_npu.npu_swiglu(_dev(2, 7))


def test_arguments_are_parsed_by_the_schema():
    q = _dev(10, 2, 16)
    # int[]? takes host ints: a device (or host) tensor is refused before any kernel runs, as torch_npu's op does
    with pytest.raises(RuntimeError, match="Expected a value of type 'Optional\\[List\\[int\\]\\]' for argument "
                                           "'actual_seq_qlen'"):
        torch_npu.npu_fusion_attention(q, q, q, 2, "TND", actual_seq_qlen=torch.tensor([4, 10]),
                                       actual_seq_kvlen=[4, 10])
    # the schema's name of the first argument is `self`
    with pytest.raises(RuntimeError, match="missing value for argument 'self'"):
        torch_npu.npu_rms_norm(input=_dev(2, 8), gamma=_dev(8))
    assert torch_npu.npu_rms_norm(self=_dev(2, 8), gamma=_dev(8))[0].shape == (2, 8)


# ------------------------------------------------------------------------------ FakeTensor, Meta, torch.compile

META_CASES = {
    **{case: (name, make, kwargs) for case, (name, make, kwargs) in CASES.items()},
    "fa_sbh": ("npu_fusion_attention", lambda: [_dev(8, 2, 64), _dev(8, 2, 64), _dev(8, 2, 64), 4, "SBH"], {}),
    "fa_bsnd": ("npu_fusion_attention", lambda: [_dev(2, 8, 4, 16), _dev(2, 6, 2, 16), _dev(2, 6, 2, 16), 4,
                                                 "BSND"], {}),
    "pfa_bsh": ("npu_prompt_flash_attention", lambda: [_dev(2, 8, 64), _dev(2, 8, 64), _dev(2, 8, 64)],
                {"num_heads": 4, "input_layout": "BSH", "scale_value": 0.25}),
    "ifa_bnsd": ("npu_incre_flash_attention", lambda: [_dev(2, 4, 1, 16), _dev(2, 2, 8, 16), _dev(2, 2, 8, 16)],
                 {"num_heads": 4, "num_key_value_heads": 2, "input_layout": "BNSD", "scale_value": 0.25}),
    "fia_bnsd_bsnd_lse": ("npu_fused_infer_attention_score",
                          lambda: [_dev(2, 4, 8, 16), _dev(2, 4, 8, 16), _dev(2, 4, 8, 16)],
                          {"num_heads": 4, "input_layout": "BNSD_BSND", "scale": 0.25, "softmax_lse_flag": True}),
    "fia_decode": ("npu_fused_infer_attention_score", lambda: [_dev(2, 1, 64), _dev(2, 8, 64), _dev(2, 8, 64)],
                   {"num_heads": 4, "input_layout": "BSH", "scale": 0.25}),
    "rms_backward": ("npu_rms_norm_backward", lambda: [_dev(2, 3, 16), _dev(2, 3, 16), _dev(16),
                                                       _dev(2, 3, 1, dtype=torch.float32)], {}),
    "swiglu_backward": ("npu_swiglu_backward", lambda: [_dev(2, 4), _dev(2, 8)], {}),
    "rotary_backward": ("npu_rotary_mul_backward", lambda: [_dev(2, 3, 5, 8), _dev(2, 3, 5, 8), _dev(1, 1, 5, 8),
                                                            _dev(1, 1, 5, 8)], {}),
}


# torch_npu's own Meta kernels (the real layer keeps them) answer numels 0 and an unused lse of shape [0]
REAL_META_DIFFERS = {"fa_bnsd_pse_dropout", "fa_bsh_gqa", "fa_tnd", "fa_sbh", "fa_bsnd", "fia_decode"}


def _described(out):
    return [(tuple(t.shape), t.dtype, t.device) if isinstance(t, torch.Tensor) else t
            for t in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("case", list(META_CASES))
def test_fake_tensors_get_the_kernels_shapes_dtypes_and_devices(case):
    if sim.layer() != "builtin" and case in REAL_META_DIFFERS:
        pytest.skip("torch_npu's own Meta kernel differs from the emulated kernel in an unused output")
    name, make, kwargs = META_CASES[case]
    inputs = make()
    op = getattr(torch.ops.npu, name)
    real = op(*inputs, **kwargs)
    with FakeTensorMode() as mode:
        fake = op(*[mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs],
                  **{k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
    fake, real = _described(fake), _described(real)
    if kwargs.get("keep_prob", 1.0) < 1.0:  # dropout: the kernel draws (seed, offset); Meta answers the arguments
        assert fake[4:6] == [0, 0] and real[4:6] != [0, 0]
        fake, real = fake[:4] + fake[6:], real[:4] + real[6:]
    assert fake == real


def test_torch_compile_fullgraph_sees_the_op_and_its_backward_op_as_single_nodes():
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def keep(gm, _inputs):
        graphs.append(gm.code)
        return make_boxed_func(gm.forward)

    def f(x, gamma):
        y, rstd = torch.ops.npu.npu_rms_norm(x, gamma)
        return y * 2 + rstd

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep))
    x, gamma = _dev(2, 3, 16, dtype=torch.float32), _dev(16, dtype=torch.float32)
    got, want = (_leaf(x), _leaf(gamma)), (_leaf(x), _leaf(gamma))
    out = compiled(*got)
    out.square().sum().backward()
    ref = f(*want)
    ref.square().sum().backward()
    assert torch.equal(out, ref) and torch.equal(got[0].grad, want[0].grad) and torch.equal(got[1].grad, want[1].grad)
    torch._dynamo.reset()  # the traced (fake) tensors go with the compiled code
    assert len(graphs) == 2
    assert "torch.ops.npu.npu_rms_norm.default" in graphs[0]
    assert "torch.ops.npu.npu_rms_norm_backward.default" in graphs[1]
    assert "pow" not in graphs[0] and "rsqrt" not in graphs[0]  # not decomposed


def test_torch_compile_of_fusion_attention_with_a_mask_reads_no_device_data_while_tracing():
    mask = _causal_mask()

    def f(q, k, v):
        return torch_npu.npu_fusion_attention(q, k, v, 2, "BNSD", atten_mask=mask, scale=0.25, sparse_mode=2)[0]

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    q = _dev(1, 2, 16, 16)
    got, want = [_leaf(q) for _ in range(3)], [_leaf(q) for _ in range(3)]
    out, ref = compiled(*got), f(*want)
    out.float().sum().backward()
    ref.float().sum().backward()
    torch._dynamo.reset()
    assert torch.equal(out, ref)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize("case", ["rms_norm", "swiglu", "rotary_half", "fa_bnsd_pse_dropout"])
def test_opcheck(case):
    if sim.layer() != "builtin" and case in REAL_META_DIFFERS:
        pytest.skip("torch_npu's own Meta kernel answers numels 0 (the traced value differs from eager)")
    name, make, kwargs = CASES[case]
    if "keep_prob" in kwargs:
        kwargs = {**kwargs, "keep_prob": 1.0}  # opcheck compares two runs: no fresh dropout between them
    args = [_leaf(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in make()]
    result = torch.library.opcheck(getattr(torch.ops.npu, name).default, args, kwargs,
                                   test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    assert set(result.values()) == {"SUCCESS"}, result


# ------------------------------------------------------------------------------------ register_kernels, reused

@pytest.fixture
def old_line_namespace(monkeypatch):
    """A namespace holding the 2.5 line's schemas of a few ops, kernels registered by register_kernels."""
    monkeypatch.setattr(_release, "EMULATED_LINE", (2, 5))
    ns = "ascend_shim_test_npu25"
    schemas = [s for s in library.release_schemas((2, 5))
               if s.split("(", 1)[0] in ("npu_fusion_attention", "npu_fusion_attention_grad", "npu_rms_norm")]
    definitions = torch.library.Library(ns, "FRAGMENT")
    assert sorted(library.define_schemas(definitions, schemas)) == ["npu_fusion_attention",
                                                                    "npu_fusion_attention_grad", "npu_rms_norm"]
    assert library.define_schemas(definitions, schemas) == []  # already defined: left as is
    impl = torch.library.Library(ns, "IMPL")
    registered = library.register_kernels(impl)
    yield getattr(torch.ops, ns), registered
    impl._destroy()
    definitions._destroy()


def test_register_kernels_fills_the_ops_a_namespace_defines(old_line_namespace):
    ops, registered = old_line_namespace
    assert sorted(registered) == ["npu_fusion_attention", "npu_fusion_attention_grad", "npu_rms_norm"]
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(f"{ops.name}::npu_rms_norm", "Meta")
    q = _dev(1, 2, 8, 16)
    assert "sink" not in {a.name for a in ops.npu_fusion_attention_grad.default._schema.arguments}
    ql = _leaf(q)
    fa = ops.npu_fusion_attention(ql, ql, ql, 2, "BNSD", scale=0.25)
    grads = ops.npu_fusion_attention_grad(q, q, q, fa[0], 2, "BNSD", softmax_max=fa[1], softmax_sum=fa[2],
                                          attention_in=fa[0], scale_value=0.25)
    assert len(grads) == 4  # (dq, dk, dv, dpse) up to 2.5
    fa[0].float().sum().backward()  # the derivative calls this namespace's 2.5 grad op
    assert ql.grad is not None and ql.grad.shape == q.shape


# --------------------------------------------------------------------------------------- torch.<op> deprecated

def test_torch_op_names_raise_the_deprecation_error(monkeypatch):
    wrapper = torch.npu_rms_norm
    assert wrapper.__name__ == "npu_rms_norm" and wrapper.__wrapped__ is torch.ops.npu.npu_rms_norm
    with pytest.raises(RuntimeError) as info:
        torch.npu_fusion_attention(_dev(1, 2, 4, 16), _dev(1, 2, 4, 16), _dev(1, 2, 4, 16), 2, "BNSD")
    message = str(info.value)
    assert message.startswith("torch.npu_fusion_attention is deprecated and will be removed in future version. "
                              "Use torch_npu.npu_fusion_attention instead.")
    assert re.search(r"\n\[ERROR\] \d{4}-\d\d-\d\d-\d\d:\d\d:\d\d \(PID:\d+, Device:-?\d+, RankID:-1\) "
                     r"ERR00007 PTA feature not supported$", message), message
    monkeypatch.setenv("TORCH_NPU_COMPACT_ERROR_OUTPUT", "1")
    with pytest.raises(RuntimeError) as info:
        torch.npu_rms_norm(_dev(2, 8), _dev(8))
    assert str(info.value).endswith("Use torch_npu.npu_rms_norm instead.")


@builtin_only
def test_torch_npu_all_lists_the_public_ops():
    assert [n for n in torch_npu.__all__ if n.startswith("npu_")] == [
        "npu_fusion_attention", "npu_prompt_flash_attention", "npu_incre_flash_attention", "npu_rotary_mul",
        "npu_rms_norm", "npu_swiglu"]
