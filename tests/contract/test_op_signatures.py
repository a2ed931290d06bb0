"""The emulated fused ops have the real signatures (names, order, types, defaults, keyword-only, return arity):
the ``torch.ops.npu`` operators (``torch_npu.<op>``) and the emulator's kernels behind them; what changed between
release lines follows the emulated line, and the schemas shipped per line are the wheels'."""
from __future__ import annotations

import ast
import inspect

import pytest
import torch

import torch_npu
from ascend_shim.sim import ops as kernels
from ascend_shim.sim.ops import _release, library

from .conftest import line


def _python_name(schema_name: str) -> str:
    # torch's binding generator exposes a function's schema argument `self` as `input` (torch.add(input=...))
    return "input" if schema_name == "self" else schema_name


def _emulated_args(fn):
    params = list(inspect.signature(fn).parameters.values())
    return [(p.name, None if p.default is inspect.Parameter.empty else p.default,
             p.kind is inspect.Parameter.KEYWORD_ONLY) for p in params]


def _real_args(spec):
    return [(_python_name(name), None if default is None else ast.literal_eval(default), kwarg_only)
            for name, _type, default, kwarg_only in spec["args"]]


OPS = ("npu_fusion_attention", "npu_fusion_attention_grad", "npu_prompt_flash_attention", "npu_incre_flash_attention",
       "npu_fused_infer_attention_score", "npu_rotary_mul", "npu_rms_norm", "npu_swiglu")


def _schema_args(schema):
    return [[a.name, str(a.type), repr(a.default_value) if a.has_default_value() else None, bool(a.kwarg_only)]
            for a in schema.arguments]


@pytest.mark.parametrize("op", OPS)
def test_the_operator_has_the_paired_release_s_schema(paired, op):
    assert getattr(torch_npu, op) is getattr(torch.ops.npu, op)
    schema = getattr(torch.ops.npu, op).default._schema
    assert _schema_args(schema) == paired["ops"][op]["args"]
    assert len(schema.returns) == paired["ops"][op]["returns"]


def test_the_shipped_schemas_of_every_line_are_the_wheels(releases):
    for version, rel in releases.items():
        shipped = {s.split("(", 1)[0]: torch._C.parse_schema("npu::" + s)
                   for s in library.release_schemas(line(version))}
        for op in OPS:
            assert _schema_args(shipped[op]) == rel["ops"][op]["args"], (version, op)
            assert len(shipped[op].returns) == rel["ops"][op]["returns"], (version, op)


@pytest.mark.parametrize("op", OPS)
def test_the_kernel_takes_the_schema_s_arguments(paired, op):
    emulated, real = _emulated_args(getattr(kernels, op)), _real_args(paired["ops"][op])
    assert [a[0] for a in emulated] == [a[0] for a in real]
    for mine, theirs in zip(emulated, real, strict=True):
        assert mine[2] == theirs[2], (op, mine, theirs)
        assert mine[1] == theirs[1] and type(mine[1]) is type(theirs[1]) or \
            (isinstance(mine[1], (int, float)) and mine[1] == theirs[1]), (op, mine, theirs)


def test_npu_fused_adamw_constructor(paired):
    params = list(inspect.signature(torch_npu.optim.NpuFusedAdamW.__init__).parameters.values())[1:]
    emulated = [(p.name, None if p.default is inspect.Parameter.empty else p.default) for p in params]
    real = [(name, None if d is None else ast.literal_eval(d)) for name, d in paired["NpuFusedAdamW"]["args"]]
    assert emulated == real


def _inputs():
    q = torch.randn(1, 2, 4, 16, dtype=torch.float16, device="npu")
    return q, q.clone(), q.clone()


def _arity(result) -> int:
    return len(result) if isinstance(result, tuple) else 1


def _calls(ops=torch_npu):
    """One call of each op through ``ops``: torch_npu (the operators), or the kernels themselves."""
    q, k, v = _inputs()
    fa = ops.npu_fusion_attention(q, k, v, 2, "BNSD", scale=0.25)
    x = torch.randn(1, 4, 2, 16, dtype=torch.float16, device="npu")
    cos = torch.randn(1, 4, 1, 16, dtype=torch.float16, device="npu")
    return {
        "npu_fusion_attention": fa,
        "npu_fusion_attention_grad": ops.npu_fusion_attention_grad(
            q, k, v, fa[0], 2, "BNSD", softmax_max=fa[1], softmax_sum=fa[2], attention_in=fa[0], scale_value=0.25),
        "npu_prompt_flash_attention": ops.npu_prompt_flash_attention(q, k, v, num_heads=2, input_layout="BNSD",
                                                                     scale_value=0.25),
        "npu_incre_flash_attention": ops.npu_incre_flash_attention(q[:, :, :1], k, v, num_heads=2,
                                                                   input_layout="BNSD", scale_value=0.25),
        "npu_fused_infer_attention_score": ops.npu_fused_infer_attention_score(
            q, k, v, num_heads=2, input_layout="BNSD", scale=0.25),
        "npu_rotary_mul": ops.npu_rotary_mul(x, cos, cos),
        "npu_rms_norm": ops.npu_rms_norm(x, torch.ones(16, dtype=torch.float16, device="npu")),
        "npu_swiglu": ops.npu_swiglu(x),
    }


def test_return_arity_equals_the_paired_release(paired):
    for op, result in _calls().items():
        assert _arity(result) == paired["ops"][op]["returns"], op


@pytest.fixture
def emulate_line(monkeypatch):
    def set_line(version):
        monkeypatch.setattr(_release, "EMULATED_LINE", line(version))
    return set_line


def test_every_release_line_gets_its_return_arity(releases, emulate_line):
    # the kernels directly: the operators carry the paired line's schemas (another line is another namespace)
    for version, rel in releases.items():
        emulate_line(version)
        for op, result in _calls(kernels).items():
            assert _arity(result) == rel["ops"][op]["returns"], (version, op)


_NON_DEFAULT = {"sink": lambda: torch.zeros(2, device="npu"), "dropout_mask": lambda: torch.zeros(1, device="npu"),
                "seed": lambda: 1, "offset": lambda: 1, "softmax_layout": lambda: "TND",
                "rotate": lambda: torch.zeros(1, device="npu")}


def test_arguments_a_release_line_lacks_are_refused_like_unexpected_keywords(releases, emulate_line):
    newest = releases[max(releases, key=line)]
    checked = 0
    for version, rel in releases.items():
        emulate_line(version)
        for op in ("npu_fusion_attention", "npu_fusion_attention_grad", "npu_rotary_mul"):
            missing = {a[0] for a in newest["ops"][op]["args"]} - {a[0] for a in rel["ops"][op]["args"]}
            assert {name for (o, name) in _release.ARGUMENT_SINCE if o == op and
                    not _release.at_least(_release.ARGUMENT_SINCE[(o, name)][0])} == missing, (version, op)
            for name in missing:
                with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
                    _release.check_arguments(op, **{name: _NON_DEFAULT[name]()})
                checked += 1
            for name in {a[0] for a in rel["ops"][op]["args"]} & set(_NON_DEFAULT):
                _release.check_arguments(op, **{name: _NON_DEFAULT[name]()})  # present in this line: accepted
    assert checked >= 14


def test_an_old_line_refuses_a_new_argument_at_the_op(emulate_line):
    emulate_line("2.6.0.post5")
    x = torch.randn(1, 4, 2, 16, dtype=torch.float16, device="npu")
    cos = torch.randn(1, 4, 1, 16, dtype=torch.float16, device="npu")
    with pytest.raises(TypeError, match="npu_rotary_mul\\(\\) got an unexpected keyword argument 'rotate'"):
        torch_npu.npu_rotary_mul(x, cos, cos, rotate=torch.eye(16, dtype=torch.float16, device="npu"))
    assert torch_npu.npu_rotary_mul(x, cos, cos).shape == x.shape
