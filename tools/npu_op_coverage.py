"""Generate ``ascend_shim/sim/data/npu_kernels_<line>.txt``: the aten operators with NPU kernels in a torch_npu
release line, for the emulated NPU's operator coverage (:mod:`ascend_shim.sim.op_coverage`).

Run by hand, with the torch release the wheel pairs with installed (never at test time)::

    python tools/npu_op_coverage.py --wheel torch_npu-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl

Two sections:

* ``[kernels]``: the operator names of the wheel's ``torch_npu/csrc/aten/npu_native_functions*.yaml`` lists of
  operators with NPU kernels, read as the real layer reads them (``ascend_shim.sim.real_layer.prepare``);
* ``[decomposed]``: those of them that the emulated NPU runs as torch's decomposition (composite kernels) and
  whose decomposition reaches an operator without an NPU kernel, which the NPU never runs there. Measured: every
  OpInfo sample of torch's test suite (float32, forward and backward, on the emulated NPU; needs ``expecttest``)
  runs with each such composite marked, and each operator without a kernel reached inside one is attributed to
  the innermost. These composites get a scope at run time, so that their sub-operators do not warn.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def read_wheel(path: str) -> tuple[str, list[str]]:
    """(torch_npu version, operators with NPU kernels) of a torch-npu wheel."""
    from ascend_shim.sim.real_layer.prepare import npu_metadata, version_of

    with zipfile.ZipFile(path) as zf:
        return version_of(zf), npu_metadata(zf)["aten_kernels"]


def _samples_of(op, device: str):
    import torch

    dtype = torch.float32 if torch.float32 in op.dtypes else next(iter(sorted(op.dtypes, key=str)), None)
    if dtype is None:
        return []
    grad = op.supports_autograd and dtype.is_floating_point
    try:
        return list(op.sample_inputs(device, dtype, requires_grad=grad))[:8]
    except Exception:  # a sample generator that cannot build npu tensors
        return []


def _run_sample(op, sample) -> None:
    import torch

    out = op(sample.input, *sample.args, **sample.kwargs)
    flat = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    grads = [t for t in flat if t.requires_grad and t.is_floating_point()]
    if grads:
        torch.autograd.backward([g.sum() for g in grads], retain_graph=False)


def _falls_back(op: str, kernels: frozenset) -> bool:
    """Would ``op``, reaching the NPU, run through torch_npu's CPU fallback (as the emulator judges it)?"""
    import torch

    from ascend_shim.sim.op_coverage import reported_name

    composite = any(torch._C._dispatch_has_kernel_for_dispatch_key(op, key)
                    for key in ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"))
    reported = reported_name(op, composite)
    return bool(reported) and reported not in kernels


def _value_for(arg, dtype):
    """A small value of ``arg``'s type (npu tensors), or ``NotImplemented``."""
    import torch

    kind = arg.type
    if isinstance(kind, torch._C.OptionalType):
        if arg.name == "device":
            return "npu"  # factories: made on the device
        kind = kind.getElementType()
        if not isinstance(kind, (torch._C.IntType, torch._C.SymIntType, torch._C.FloatType, torch._C.NumberType,
                                 torch._C.BoolType, torch._C.ListType, torch._C.StringType)):
            return None  # an absent tensor, generator, dtype...
    if isinstance(kind, torch._C.TensorType):
        return (torch.rand(4, 4, device="npu") + 1).to(dtype)
    if isinstance(kind, torch._C.ListType):
        element = kind.getElementType()
        if isinstance(element, (torch._C.TensorType, torch._C.OptionalType)):
            return [(torch.rand(4, 4, device="npu") + 1).to(dtype) for _ in range(2)]
        return [4, 4]
    if isinstance(kind, (torch._C.IntType, torch._C.SymIntType)):
        return 4 if arg.name in ("window_length", "n", "m", "end", "num_classes") else 1
    if isinstance(kind, (torch._C.FloatType, torch._C.NumberType)):
        return 0.5
    if isinstance(kind, torch._C.BoolType):
        return False
    if isinstance(kind, torch._C.StringType):
        return "trunc" if arg.name == "rounding_mode" else "none"
    return NotImplemented


def _schema_arguments(schema, dtype):
    """Arguments for an operator built from its schema alone (small npu tensors, small numbers), or None."""
    args, kwargs = [], {}
    for arg in schema.arguments:
        writes = arg.alias_info is not None and arg.alias_info.is_write
        if arg.has_default_value() and not writes and arg.name != "device":
            continue
        value = _value_for(arg, dtype)
        if value is NotImplemented:
            return None
        if arg.kwarg_only:
            kwargs[arg.name] = value
        else:
            args.append(value)
    return args, kwargs


def _call_from_schemas(names: list[str]) -> int:
    """Call each operator in ``names`` ("aten::inverse") on arguments made from its schema, in a few dtypes;
    returns how many calls ran."""
    import torch

    ran = 0
    for full in names:
        base, _, overload = full.removeprefix("aten::").partition(".")
        packet = getattr(torch.ops.aten, base, None)
        op = getattr(packet, overload or "default", None) if packet is not None else None
        if op is None:
            continue
        for dtype in (torch.float32, torch.bool, torch.int64):
            built = _schema_arguments(op._schema, dtype)
            if built is None:
                break
            try:
                with contextlib.redirect_stderr(io.StringIO()):
                    op(*built[0], **built[1])
                ran += 1
                break
            except Exception:
                continue
    return ran


def trace_decomposed(kernels: list[str]) -> tuple[list[str], list[str], int]:
    """(the NPU kernels whose decomposition on the emulated NPU reaches operators without one, the NPU kernels run
    as a decomposition that no sample exercised, how many samples ran)."""
    os.environ["TORCH_NPU_WARNING_DISABLE"] = "1"  # the tracing run's own fallbacks are not the point
    from torch.testing._internal import common_methods_invocations as opinfos

    import ascend_shim.sim as sim
    from ascend_shim.sim import _extension, op_coverage

    sim.install()
    native = _extension.load()
    op_coverage.install_op_coverage(kernels, decomposed=[])
    candidates = native.op_coverage_decomposed_kernels()
    op_coverage.install_op_coverage(kernels, decomposed=candidates)
    native.op_coverage_set_tracing(True)
    ran = 0
    databases = (opinfos.op_db, opinfos.foreach_unary_op_db, opinfos.foreach_binary_op_db,
                 opinfos.foreach_pointwise_op_db, opinfos.foreach_reduce_op_db, opinfos.foreach_other_op_db)
    for op in (op for db in databases for op in db):
        for sample in _samples_of(op, "npu"):
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    _run_sample(op, sample)
                ran += 1
            except Exception:
                continue
    ran += _call_from_schemas(sorted(set(candidates) - set(native.op_coverage_traced()[1])))
    native.op_coverage_set_tracing(False)
    traced, entered = native.op_coverage_traced()
    listed = frozenset(f"aten::{k}" if "::" not in k else k for k in kernels)
    scoped = sorted({scope.removeprefix("aten::") for scope, op in traced if _falls_back(op, listed)})
    unexercised = sorted(c.removeprefix("aten::") for c in set(candidates) - set(entered))
    return scoped, unexercised, ran


def write(path: Path, version: str, wheel: str, kernels: list[str], decomposed: list[str], ran: int) -> None:
    import torch

    line = ".".join(version.split(".")[:2])
    head = [
        f"# Operators with NPU kernels in torch_npu {line} (torch_npu {version}, paired with torch {line}).",
        f"# Generated by tools/npu_op_coverage.py from {os.path.basename(wheel)} and torch {torch.__version__}; "
        "do not edit.",
        "#",
        "# [kernels]: aten operators (name.overload) the wheel's npu_native_functions*.yaml list as having NPU",
        "# kernels; any other operator reaching the NPU runs on the CPU through torch_npu's fallback.",
        "# [decomposed]: those of them the emulated NPU runs as torch's decomposition, reaching operators without",
        f"# NPU kernels ({ran} OpInfo samples traced); their decomposition is marked as one NPU kernel.",
    ]
    body = ["[kernels]", *kernels, "", "[decomposed]", *decomposed]
    path.write_text("\n".join(head + [""] + body) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", required=True, help="a torch-npu wheel (.whl)")
    parser.add_argument("--out", help="the file to write (default: ascend_shim/sim/data/npu_kernels_<line>.txt)")
    ns = parser.parse_args()
    version, kernels = read_wheel(ns.wheel)
    line = ".".join(version.split(".")[:2])
    import torch

    torch_line = ".".join(re.findall(r"\d+", torch.__version__)[:2])
    if torch_line != line:
        raise SystemExit(f"torch_npu {version} pairs with torch {line}, but torch {torch.__version__} is installed: "
                         f"the decompositions are torch's, install torch=={line}.*")
    start = time.time()
    decomposed, unexercised, ran = trace_decomposed(kernels)
    out = Path(ns.out) if ns.out else ROOT / "ascend_shim" / "sim" / "data" / f"npu_kernels_{line}.txt"
    write(out, version, ns.wheel, kernels, decomposed, ran)
    print(f"{out}: {len(kernels)} NPU kernels, {len(decomposed)} run as a decomposition reaching operators "
          f"without one ({ran} samples traced in {time.time() - start:.0f}s); not exercised by any sample: "
          f"{' '.join(unexercised) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
