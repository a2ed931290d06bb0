"""Python half of the emulated ``hccl`` backend: HCCL's checks, then the collective through gloo.

One ``HcclSim`` per process group and device backend. Each method is called by the C++
``ProcessGroupHCCL`` (``csrc/hccl/``) with the GIL held. Collectives run to completion (the emulated
device is synchronous, so a finished collective is what the stream order of real HCCL guarantees by
the time anything reads the result) and return None, which the C++ side turns into a completed
``Work``. Point-to-point operations (send/recv) return a ``_Pending`` instead: the peer may post its
side later, so they complete on ``Work.wait()``.

Checks and their order follow torch_npu 2.13's ``ProcessGroupHCCL.cpp`` per collective: tensor
placement and layout (``check_npu_*``), bool/uint8 promotion to int32 where torch_npu does it, the
data-type whitelist of reductions (``checkSupportedDataType``), then the reduce op
(``getHcclReduceOp``). The data moves through an internal ``ProcessGroupGloo`` on CPU views of the
npu tensors' memory (``host_view``): zero-copy through ``ascend_shim.sim.cpu_alias`` when the
device provides it, otherwise a copy to the host and back.
"""
from __future__ import annotations

import contextlib
import warnings
from datetime import timedelta
from typing import Any

import torch
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    PrefixStore,
    ReduceOp,
    ScatterOptions,
)

from ...config import setting as _setting
from ._errors import NOT_FOUND, NOT_SUPPORT, PARAM, TYPE, VALUE, hccl_error

# ---------------------------------------------------------------------------------------------
# Reduce-op policy. torch_npu <= 2.5.1 (releases up to v7.0.RC1) rejects ReduceOp.AVG with
# "Cannot use ReduceOp.AVG with HCCL"; since Ascend/pytorch commit 15629a8ae (2025-02-13, every
# release for torch >= 2.6, including the torch 2.13 line) it runs SUM and divides by the group
# size. The default follows the torch_npu line that pairs with the installed torch (the emulator plays
# torch_npu == torch's version): "sum_div" for torch >= 2.6, "reject" before.
# ---------------------------------------------------------------------------------------------
AVG_POLICIES = ("reject", "sum_div")


def _default_avg_policy() -> str:
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    return "sum_div" if (major, minor) >= (2, 6) else "reject"


_avg_policy = _setting("sim_hccl_avg") or _default_avg_policy()


def set_avg_policy(policy: str) -> None:
    global _avg_policy
    if policy not in AVG_POLICIES:
        raise ValueError(f"avg policy must be one of {AVG_POLICIES}, got {policy!r}")
    _avg_policy = policy


def get_avg_policy() -> str:
    return _avg_policy


# ---------------------------------------------------------------------------------------------
# Host views of npu memory: the one place that decides zero-copy vs copy.
# ---------------------------------------------------------------------------------------------
# Tests only: force the copy path (the one used when the device cannot alias npu memory).
_NO_ALIAS = _setting("sim_hccl_no_alias")


def _cpu_alias():
    if _NO_ALIAS:
        return None
    try:
        from ascend_shim import sim
    except Exception:
        return None
    return getattr(sim, "cpu_alias", None)


def host_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor holding ``t``'s data: the same memory if the device can alias it, else a copy."""
    if t.device.type == "cpu":
        return t
    alias = _cpu_alias()
    if alias is not None:
        return alias(t)
    return t.to("cpu")


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.data_ptr() == b.data_ptr()
        and a.numel() * a.element_size() == b.numel() * b.element_size()
        and a.is_contiguous()
        and b.is_contiguous()
    )


def _write(t: torch.Tensor, value: torch.Tensor) -> None:
    """``t[...] = value`` for a device tensor ``t`` and a CPU ``value`` with ``t``'s numel (and dtype, or castable)."""
    if t.device.type == "cpu" or _cpu_alias() is not None:
        h = host_view(t)
        if not (_same_bytes(h, value) and value.dtype == h.dtype):
            h.copy_(value.reshape(h.shape))
        return
    t.copy_(value.reshape(t.shape))


def _bytes(h: torch.Tensor) -> torch.Tensor:
    """Contiguous 1-D uint8 view (or copy, if not contiguous) of a CPU tensor."""
    h = h.contiguous()
    if h.dim() == 0:
        h = h.reshape(1)
    return h.reshape(-1).view(torch.uint8)


# ---------------------------------------------------------------------------------------------
# Data types (HCCLUtils.cpp kScalarTypeToHcclDataType / kHcclDataTypeToStringMap)
# ---------------------------------------------------------------------------------------------
_HCCL_TYPE_NAME = {
    torch.uint8: "at::kByte/at::kBool",
    torch.bool: "at::kByte/at::kBool",
    torch.int8: "at::kChar",
    torch.int16: "at::kShort",
    torch.int32: "at::kInt",
    torch.int64: "at::kLong",
    torch.float16: "at::kHalf",
    torch.float32: "at::kFloat",
    torch.float64: "at::kDouble",
    torch.bfloat16: "at::kBFloat16",
}
for _name, _text in (
    ("uint16", "at::ScalarType::UInt16"),
    ("uint32", "at::ScalarType::UInt32"),
    ("uint64", "at::ScalarType::UInt64"),
    ("float8_e4m3fn", "at::ScalarType::Float8_e4m3fn"),
    ("float8_e5m2", "at::ScalarType::Float8_e5m2"),
):
    if hasattr(torch, _name):
        _HCCL_TYPE_NAME[getattr(torch, _name)] = _text

# checkSupportedDataType: what HCCL can *reduce* (allgather/broadcast/p2p move any mapped type).
_REDUCE_DTYPES = {torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32, torch.bfloat16}
# gloo cannot reduce int16: reduce it in int32 (exact, wraps like int16 after the cast back).
_GLOO_REDUCE_DTYPE = {torch.int16: torch.int32}
_PREMUL_DTYPES = {torch.float16, torch.float32, torch.bfloat16, torch.float64}

# c10d::ReduceOp::RedOpType values
SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR, PREMUL_SUM = range(9)
_RED_NAME = {BAND: "BAND", BOR: "BOR", BXOR: "BXOR"}
_GLOO_OP = {SUM: ReduceOp.SUM, PRODUCT: ReduceOp.PRODUCT, MIN: ReduceOp.MIN, MAX: ReduceOp.MAX}


def _hccl_type(dtype: torch.dtype) -> str:
    """getHcclDataType: every collective maps the dtype first; unmapped types fail everywhere."""
    name = _HCCL_TYPE_NAME.get(dtype)
    if name is None:
        raise hccl_error("Unsupported data type for HCCL process group", NOT_SUPPORT)
    return name


def _check_reduce_dtype(dtype: torch.dtype, function_name: str) -> None:
    name = _hccl_type(dtype)
    if dtype not in _REDUCE_DTYPES:
        raise hccl_error(f"HCCL {function_name}: Unsupported data type {name}", NOT_SUPPORT)


class _Plan:
    """What a ReduceOp becomes on HCCL: the native op, a pre-scale (PREMUL_SUM), a post-divide (AVG)."""

    __slots__ = ("op", "premul", "divide")

    def __init__(self, op, premul=None, divide=None):
        self.op, self.premul, self.divide = op, premul, divide


def _is_non_overlapping_and_dense(t: torch.Tensor) -> bool:
    """``Tensor::is_non_overlapping_and_dense()`` (what HCCL's check reads): some permutation of the dimensions
    is contiguous. Asked on sizes and strides, as torch's own Python helper (renamed across releases) does."""
    if t.is_contiguous():
        return True
    expected = 1
    for d in sorted(range(t.dim()), key=t.stride):
        if t.size(d) < 2:  # an empty or single-element dimension has any stride
            continue
        if t.stride(d) != expected:
            return False
        expected *= t.size(d)
    return True


def _is_contiguous_suggested(t: torch.Tensor) -> bool:
    # t.is_contiguous(t.suggest_memory_format())
    if t.is_contiguous():
        return True
    if t.dim() == 4:
        return t.is_contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.is_contiguous(memory_format=torch.channels_last_3d)
    return False


class HcclSim:
    """The collectives of one emulated HCCL communicator (one process group, npu tensors only)."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta, device_type: str = "npu",
                 group_name: str = ""):
        from torch._C._distributed_c10d import ProcessGroupGloo

        self.rank = rank
        self.size = size
        self.device_type = device_type
        self.group_name = group_name
        self.timeout = timeout
        # Any: torch's .pyi gives ProcessGroupGloo its options only, not the collectives it has; None once closed
        self._gloo: Any = ProcessGroupGloo(PrefixStore("ascend_shim_hccl_sim/", store), rank, size, timeout)

    # ----------------------------------------------------------------- checks (ProcessGroupHCCL.cpp)
    def _is_npu(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.device.type == self.device_type and t.layout == torch.strided

    def _check_single(self, t) -> None:
        """check_npu_single_tensor"""
        if not self._is_npu(t):
            raise hccl_error("Tensors must be NPU and dense", TYPE)
        if not _is_contiguous_suggested(t):
            raise hccl_error("Tensors must be contiguous", TYPE)

    def _check_different_devices(self, tensors) -> torch.Tensor:
        """check_npu_tensors_different_devices; HCCL drives one NPU per process, so exactly one tensor."""
        if len(tensors) == 0:
            raise hccl_error("Tensor list must be nonempty", PARAM)
        if len(tensors) != 1:
            raise hccl_error("Tensor list mustn't be larger than the number of available NPUs", VALUE)
        self._check_single(tensors[0])
        return tensors[0]

    def _check_same_device(self, tensors) -> None:
        """check_npu_tensors_same_device"""
        if len(tensors) == 0:
            raise hccl_error("Tensor list must be nonempty", PARAM)
        first = tensors[0]
        for t in tensors:
            if not self._is_npu(t):
                raise hccl_error("Tensors must be NPU and dense", TYPE)
            if t.dtype != first.dtype:
                raise hccl_error("Tensors must have identical type", TYPE)
            if not _is_non_overlapping_and_dense(t):
                raise hccl_error("Tensors must be non-overlapping and dense", TYPE)
            if t.device != first.device:
                raise hccl_error("Tensors must be on same NPU device", TYPE)

    def _check_flatten(self, tensor_list, other) -> None:
        """flatten_for_scatter_gather's checks (equal-size lists only)."""
        if len(tensor_list) != self.size:
            raise hccl_error(
                "Tensor list input to scatter/gather must match number of collective participants", PARAM
            )
        if tensor_list[0].device != other.device:
            raise hccl_error(
                "Corresponding input/output tensors to scatter/gather must all reside on the same device", PARAM
            )
        for t in tensor_list:
            if t.numel() != other.numel():
                raise hccl_error("All tensor operands to scatter/gather must have the same size", PARAM)

    def _plan(self, op_args, dtype) -> _Plan:
        """getHcclReduceOp (plus the PREMUL_SUM pre-scale and the AVG post-divide around it)."""
        op, factor = op_args
        if op == AVG:
            if _avg_policy == "reject":
                raise hccl_error("Cannot use ReduceOp.AVG with HCCL", NOT_SUPPORT)
            return _Plan(ReduceOp.SUM, divide=self.size)
        if op == PREMUL_SUM:
            if dtype not in _PREMUL_DTYPES:
                raise hccl_error("PreMulSum Data type must be half, float, bfloat16 or double", TYPE)
            if isinstance(factor, torch.Tensor):
                factor = float(factor.detach().to("cpu").reshape(()).item())
            return _Plan(ReduceOp.SUM, premul=float(factor))
        if op in _RED_NAME:
            raise hccl_error(f"Cannot use ReduceOp.{_RED_NAME[op]} with HCCL", NOT_SUPPORT)
        if op not in _GLOO_OP:
            raise hccl_error("Unhandled ReduceOp", NOT_FOUND)
        return _Plan(_GLOO_OP[op])

    # ----------------------------------------------------------------- gloo primitives on CPU tensors
    def _allreduce_host(self, x: torch.Tensor, plan: _Plan) -> torch.Tensor:
        """All-reduce a CPU tensor; returns the result (``x`` itself when it could be done in place)."""
        orig = x.dtype
        work = _GLOO_REDUCE_DTYPE.get(orig, orig)
        y = x.contiguous()
        if work != orig:
            y = y.to(work)
        if plan.premul is not None:
            y = y * plan.premul
        opts = AllreduceOptions()
        opts.reduceOp = plan.op
        self._gloo.allreduce([y], opts).wait()
        if plan.divide is not None:
            if y.is_floating_point():
                y.div_(plan.divide)
            else:  # integer AVG: torch_npu's own test expects floor division (unverified on hardware)
                y = torch.div(y, plan.divide, rounding_mode="floor")
        return y.to(orig) if y.dtype != orig else y

    def _allgather_bytes(self, inp: torch.Tensor, out_nbytes: list[int]) -> list[torch.Tensor]:
        """Gather each rank's bytes; ``out_nbytes[r]`` is rank r's byte count (known to every rank)."""
        src = _bytes(inp)
        m = max(out_nbytes) if out_nbytes else 0
        if src.numel() < m:
            src = torch.cat([src, src.new_zeros(m - src.numel())])
        outs = [torch.empty(m, dtype=torch.uint8) for _ in range(self.size)]
        self._gloo.allgather([outs], [src], AllgatherOptions()).wait()
        return [o[:n] for o, n in zip(outs, out_nbytes, strict=True)]

    def _exchange_numels(self, n: int) -> list[int]:
        t = torch.tensor([n], dtype=torch.int64)
        outs = [torch.empty(1, dtype=torch.int64) for _ in range(self.size)]
        self._gloo.allgather([outs], [t], AllgatherOptions()).wait()
        return [int(o.item()) for o in outs]

    # ----------------------------------------------------------------- collectives
    def allreduce(self, tensors, op_args):
        t = self._check_different_devices(tensors)
        with torch.no_grad():
            t = t.detach()
            work_dtype = torch.int32 if t.dtype in (torch.bool, torch.uint8) else t.dtype
            _check_reduce_dtype(work_dtype, "allreduce")
            plan = self._plan(op_args, work_dtype)
            h = host_view(t)
            r = self._allreduce_host(h.to(work_dtype) if work_dtype != t.dtype else h, plan)
            _write(t, r)

    def allreduce_coalesced(self, tensors, op_args):
        self._check_same_device(tensors)
        with torch.no_grad():
            ts = [t.detach() for t in tensors]
            work_dtype = torch.int32 if ts[0].dtype in (torch.bool, torch.uint8) else ts[0].dtype
            _check_reduce_dtype(work_dtype, "allreduce_coalesced")
            plan = self._plan(op_args, work_dtype)
            flat = torch.cat([host_view(t).reshape(-1).to(work_dtype) for t in ts])
            r = self._allreduce_host(flat, plan)
            off = 0
            for t in ts:
                _write(t, r[off:off + t.numel()])
                off += t.numel()

    def reduce(self, tensors, root_rank, root_tensor, op_args):
        t = self._check_different_devices(tensors)
        with torch.no_grad():
            t = t.detach()
            work_dtype = torch.int32 if t.dtype in (torch.bool, torch.uint8) else t.dtype
            _check_reduce_dtype(work_dtype, "reduce")
            plan = self._plan(op_args, work_dtype)
            h = host_view(t)
            r = self._allreduce_host(h.to(work_dtype, copy=True), plan)  # a copy: non-roots keep their input
            if self.rank == root_rank:
                _write(t, r)
            elif plan.premul is not None or plan.divide is not None:
                # torch_npu scales tensors_cp (= the caller's tensor) on every rank, root or not:
                # the PREMUL_SUM pre-hook multiplies and the AVG post-hook divides in place.
                x = h.to(work_dtype)
                if plan.premul is not None:
                    x = x * plan.premul
                if plan.divide is not None:
                    x = x / plan.divide if x.is_floating_point() else torch.div(x, plan.divide, rounding_mode="floor")
                _write(t, x)

    def broadcast(self, tensors, root_rank, root_tensor):
        t = self._check_different_devices(tensors)
        _hccl_type(t.dtype)
        with torch.no_grad():
            t = t.detach()
            h = host_view(t)
            b = _bytes(h)
            opts = BroadcastOptions()
            opts.rootRank = root_rank
            self._gloo.broadcast([b], opts).wait()
            if self.rank != root_rank:
                _write(t, b.view(t.dtype))

    def allgather(self, output_lists, inputs):
        outs = output_lists[-1] if output_lists else []
        self._check_same_device(outs)
        inp = self._check_different_devices(inputs)
        _hccl_type(inp.dtype)
        same_size = all(o.shape == outs[0].shape for o in outs)
        if same_size:
            self._check_flatten(outs, inp)
        else:
            _warn_once(
                "allgather_shape",
                "The current allgather operator has a defect in handling different tensor shape, "
                "        the work event forces a wait operation, "
                "and the allgather wait on the python side would be fake",
            )
            if len(outs) != self.size:
                raise hccl_error(
                    "Tensor list input to scatter/gather must match number of collective participants", PARAM
                )
        with torch.no_grad():
            nbytes = [o.numel() * o.element_size() for o in outs]
            got = self._allgather_bytes(host_view(inp.detach()), nbytes)
            for o, g in zip(outs, got, strict=True):
                _write(o.detach(), g.view(o.dtype))

    def _allgather_base(self, output, input):
        if input.dtype != output.dtype:
            raise hccl_error("output tensor must have the same type as input tensor", PARAM)
        if input.numel() * self.size != output.numel():
            raise hccl_error("output tensor size must be equal to world_size times input tensor size", PARAM)
        self._check_different_devices([input])
        self._check_different_devices([output])
        _hccl_type(input.dtype)
        with torch.no_grad():
            n = input.numel() * input.element_size()
            got = self._allgather_bytes(host_view(input.detach()), [n] * self.size)
            _write(output.detach(), torch.cat(got).view(output.dtype))

    def allgather_coalesced(self, output_lists, inputs):
        # ProcessGroupHCCL does not override it: c10d::Backend's default error.
        raise RuntimeError("Backend hccl does not support allgather_coalesced")

    def allgather_into_tensor_coalesced(self, outputs, inputs):
        for o, i in zip(outputs, inputs, strict=True):
            self._allgather_base(o, i)

    def gather(self, output_lists, inputs, root_rank):
        """torch_npu replaces ``dist.gather`` by an all-gather (distributed_c10d._gather); so does this."""
        inp = self._check_different_devices(inputs)
        _hccl_type(inp.dtype)
        if self.rank == root_rank:
            if len(output_lists) != 1:
                raise ValueError(
                    "ProcessGroupHCCL::gather: requires a single-element output list containing a list with "
                    f"{self.size} tensors."
                )
            if len(output_lists[0]) != self.size:
                raise ValueError(
                    f"ProcessGroupHCCL::gather: Incorrect output list size {len(output_lists[0])}. "
                    f"Output list size should be {self.size}, same as size of the process group."
                )
            warnings.warn("HCCL doesn't support gather at the moment. Implemented with allgather instead.",
                          stacklevel=2)
        elif len(output_lists) != 0:
            raise ValueError("ProcessGroupHCCL::gather: requires empty output on non-root")
        with torch.no_grad():
            nbytes = self._exchange_numels(inp.numel() * inp.element_size())
            got = self._allgather_bytes(host_view(inp.detach()), nbytes)
            if self.rank == root_rank:
                for o, g in zip(output_lists[0], got, strict=True):
                    if o.numel() * o.element_size() != g.numel():
                        raise ValueError("ProcessGroupHCCL::gather: Tensor size mismatch")
                    _write(o.detach(), g.view(o.dtype))

    def scatter(self, outputs, input_lists, root_rank):
        out = self._check_different_devices(outputs)
        _hccl_type(out.dtype)
        if self.rank == root_rank:
            if len(input_lists) != 1:
                raise ValueError(
                    "ProcessGroupHCCL::scatter: requires a single-element input list containing a list with "
                    f"{self.size} tensors."
                )
            if len(input_lists[0]) != self.size:
                raise ValueError(
                    f"ProcessGroupHCCL::scatter: Incorrect input list size {len(input_lists[0])}. "
                    f"Input list size should be {self.size}, same as size of the process group."
                )
            for t in input_lists[0]:
                if t.dtype != out.dtype or t.shape != out.shape or t.device != out.device:
                    raise ValueError("ProcessGroupHCCL::scatter: Tensors must have the same type and size")
        elif len(input_lists) != 0:
            raise ValueError("ProcessGroupHCCL::scatter: requires empty input on non-root")
        with torch.no_grad():
            recv = torch.empty(out.numel() * out.element_size(), dtype=torch.uint8)
            ins = [[_bytes(host_view(t.detach())) for t in input_lists[0]]] if self.rank == root_rank else []
            opts = ScatterOptions()
            opts.rootRank = root_rank
            self._gloo.scatter([recv], ins, opts).wait()
            _write(out.detach(), recv.view(out.dtype))

    def _reduce_scatter_host(self, flat: torch.Tensor, counts: list[int], plan: _Plan) -> torch.Tensor:
        """Reduce the whole buffer, keep this rank's chunk (same values as a reduce-scatter)."""
        r = self._allreduce_host(flat, plan)
        off = sum(counts[: self.rank])
        return r[off:off + counts[self.rank]]

    def reduce_scatter(self, outputs, input_lists, op_args):
        out = self._check_different_devices(outputs)
        ins = input_lists[-1] if input_lists else []
        self._check_same_device(ins)
        if all(t.shape == ins[0].shape for t in ins):
            self._check_flatten(ins, out)
        else:
            _warn_once(
                "reduce_scatter_shape",
                "The current reduce_scatter operator has a defect in handling different tensor shape,"
                "the work event forces a wait operation in c++ side, and the reduce_scatter wait on the python "
                "side would be fake",
            )
            if len(ins) != self.size:
                raise hccl_error(
                    "Tensor list input to scatter/gather must match number of collective participants", PARAM
                )
        _check_reduce_dtype(ins[0].dtype, "reduce_scatter")
        plan = self._plan(op_args, ins[0].dtype)
        with torch.no_grad():
            flat = torch.cat([host_view(t.detach()).reshape(-1) for t in ins])
            mine = self._reduce_scatter_host(flat, [t.numel() for t in ins], plan)
            _write(out.detach(), mine)

    def _reduce_scatter_base(self, output, input, op_args):
        self._check_single(input)
        if input.dtype != output.dtype:
            raise hccl_error("input tensor must be the same type as the output tensor.", TYPE)
        if input.numel() != output.numel() * self.size:
            raise hccl_error("input tensor must be the same size as output size times world size", PARAM)
        self._check_single(output)
        _check_reduce_dtype(input.dtype, "_reduce_scatter_base")
        plan = self._plan(op_args, input.dtype)
        with torch.no_grad():
            flat = host_view(input.detach()).reshape(-1).clone()  # the input must survive
            mine = self._reduce_scatter_host(flat, [output.numel()] * self.size, plan)
            _write(output.detach(), mine)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, op_args):
        self._check_same_device(outputs)
        self._check_same_device(inputs)
        _check_reduce_dtype(inputs[0].dtype, "reduce_scatter_tensor_coalesced")
        for o, i in zip(outputs, inputs, strict=True):
            self._reduce_scatter_base(o, i, op_args)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes):
        self._check_single(output)
        self._check_single(input)
        if not input_split_sizes and not output_split_sizes:
            if output.numel() != input.numel() or output.dtype != input.dtype:
                raise hccl_error("Tensors are not equal in size or data type", PARAM)
            if input.dim() < 1 or output.dim() < 1:
                raise hccl_error(
                    "Scalar tensors (0-dim tensors) are not supported in alltoall. "
                    f"inputTensor.dim()={input.dim()}, outputTensor.dim()={output.dim()}. "
                    "Please reshape tensors to at least 1-D before calling alltoall.",
                    NOT_SUPPORT,
                )
            if output.size(0) % self.size != 0:
                raise hccl_error("Tensor's dim 0 does not divide equally across group size", PARAM)
        else:
            for splits, t in ((input_split_sizes, input), (output_split_sizes, output)):
                if not splits:
                    if t.size(0) % self.size != 0:
                        raise hccl_error("Tensor's dim 0 does not divide equally across group size", PARAM)
                else:
                    if len(splits) != self.size:
                        raise hccl_error("Number of tensor splits not equal to group size", TYPE)
                    if sum(splits) != t.size(0):
                        raise hccl_error("Split sizes doesn't match total dim 0 size", TYPE)
        _hccl_type(input.dtype)
        with torch.no_grad():
            hin = host_view(input.detach()).contiguous()
            rows_in = hin.size(0) if hin.dim() else 1
            rows_out = output.size(0) if output.dim() else 1
            row_bytes_in = (hin.numel() * hin.element_size()) // max(rows_in, 1)
            row_bytes_out = (output.numel() * output.element_size()) // max(rows_out, 1)
            bin_ = _bytes(hin).reshape(rows_in, row_bytes_in)
            bout = torch.empty(rows_out, row_bytes_out, dtype=torch.uint8)
            self._gloo.alltoall_base(
                bout, bin_, list(output_split_sizes), list(input_split_sizes), AllToAllOptions()
            ).wait()
            _write(output.detach(), bout.reshape(-1).view(output.dtype))

    def alltoall(self, outputs, inputs):
        if len(outputs) != self.size:
            raise hccl_error("the size of output_tensors and worldsize must equal", PARAM)
        if len(outputs) != len(inputs):
            raise hccl_error("the size of input_tensors and output_tensors must equal", PARAM)
        device = outputs[0].device
        for o, i in zip(outputs, inputs, strict=True):
            self._check_single(o)
            self._check_single(i)
            if o.device != device or i.device != device:
                raise hccl_error("tensors must be on the same device", PARAM)
        _hccl_type(inputs[0].dtype)
        with torch.no_grad():
            ins = [_bytes(host_view(i.detach())) for i in inputs]
            in_splits = [b.numel() for b in ins]
            out_splits = [o.numel() * o.element_size() for o in outputs]
            bout = torch.empty(sum(out_splits), dtype=torch.uint8)
            self._gloo.alltoall_base(bout, torch.cat(ins), out_splits, in_splits, AllToAllOptions()).wait()
            off = 0
            for o, n in zip(outputs, out_splits, strict=True):
                _write(o.detach(), bout[off:off + n].view(o.dtype))
                off += n

    # HCCL point-to-point ignores tags (hcclSend/hcclRecv take none): gloo always gets tag 0.
    # send/recv stay in flight until wait() (the peer may post its side later): they return a
    # _Pending, which the C++ side turns into a Work that completes on wait().
    def send(self, tensors, dst_rank, tag):
        t = self._check_different_devices(tensors)
        _hccl_type(t.dtype)
        with torch.no_grad():
            buf = _bytes(host_view(t.detach()))
            return _Pending(self._gloo.send([buf], dst_rank, 0), keep=buf)

    def recv(self, tensors, src_rank, tag):
        t = self._check_different_devices(tensors)
        _hccl_type(t.dtype)
        buf = torch.empty(t.numel() * t.element_size(), dtype=torch.uint8)
        work = self._gloo.recv([buf], src_rank, 0)

        def finish():
            with torch.no_grad():
                _write(t.detach(), buf.view(t.dtype))

        return _Pending(work, finish)

    def recv_anysource(self, tensors, tag):
        raise hccl_error("ProcessGroupHCCL does not support recv", NOT_SUPPORT)

    def batch_isend_irecv(self, op_types, tensors, remote_ranks):
        """torch_npu's ProcessGroupHCCL.batch_isend_irecv(op_type, tensors, remote_rank_list)."""
        works, recvs = [], []
        with torch.no_grad():
            for op, t, peer in zip(op_types, tensors, remote_ranks, strict=True):
                self._check_different_devices([t])
                _hccl_type(t.dtype)
                if op == "isend":
                    works.append(self._gloo.send([_bytes(host_view(t.detach()))], int(peer), 0))
                elif op == "irecv":
                    buf = torch.empty(t.numel() * t.element_size(), dtype=torch.uint8)
                    works.append(self._gloo.recv([buf], int(peer), 0))
                    recvs.append((t, buf))
                else:
                    raise ValueError(f"Invalid ``op``. Expected ``op`` to be of type ``isend`` or ``irecv``, got {op}")
            for w in works:
                w.wait()
            for t, buf in recvs:
                _write(t.detach(), buf.view(t.dtype))

    def barrier(self, device_ids, device):
        # ProcessGroupHCCL::barrier is an all-reduce of a 1-element npu tensor; gloo's barrier orders the same way.
        self._gloo.barrier(BarrierOptions()).wait()

    def set_timeout(self, timeout_ms):
        self.timeout = timedelta(milliseconds=timeout_ms)

    def abort(self):
        self._close("abort")

    def shutdown(self):
        self._close("shutdown")

    def _close(self, how):
        g, self._gloo = self._gloo, None
        if g is not None:
            with contextlib.suppress(Exception):  # best effort: the group may already be broken
                getattr(g, how)()


class _Pending:
    """An operation still in flight: ``wait()`` waits for gloo, then runs ``finish`` (the copy back)."""

    def __init__(self, work, finish=None, keep=None):
        self._work, self._finish, self._keep = work, finish, keep
        self._done = False

    def is_completed(self) -> bool:
        return self._done or self._work.is_completed()

    def wait(self) -> bool:
        if not self._done:
            self._work.wait()
            if self._finish is not None:
                self._finish()
            self._done = True
            self._work = self._finish = self._keep = None
        return True


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    """TORCH_NPU_WARN_ONCE: once per process, at the line that called the process group's operation."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)
