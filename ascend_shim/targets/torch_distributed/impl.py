"""torch.distributed on the NPU: backend and device arguments translated, ReduceOp.AVG on HCCL releases that reject
it (SUM, then a division), float64 all-reduces (which HCCL cannot reduce) gathered and reduced on each rank."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

from ascend_shim.targets._shared.device_wrappers import note

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext


def translating_backend(orig: Callable, api: str) -> Callable:
    """``orig`` with its ``backend`` argument (nccl -> hccl) and ``device_id`` (cuda -> npu) translated."""
    from ascend_shim.binding import bind
    from ascend_shim.devices import translate, translate_backend

    position = bind(orig, "backend", api).index

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        if len(args) > position:
            value = args[position]
            new = translate_backend(value)
            if new is not value and new != value:
                note(api, "backend", value, new)
                args = args[:position] + (new,) + args[position + 1:]
        elif kwargs.get("backend") is not None:
            value = kwargs["backend"]
            new = translate_backend(value)
            if new != value:
                note(api, "backend", value, new)
                kwargs["backend"] = new
        device_id = kwargs.get("device_id")
        if device_id is not None:
            new = translate(device_id, ints=False)
            if new is not device_id:
                note(api, "device_id", device_id, new)
                kwargs["device_id"] = new
        return orig(*args, **kwargs)

    return wrapper


def translating_ddp_devices(ctx: PatchContext) -> Callable:
    """DistributedDataParallel.__init__ with each device_ids entry and output_device translated."""
    from ascend_shim.binding import bind
    from ascend_shim.devices import translate

    orig = ctx.original
    api = "DistributedDataParallel"
    ids_at, out_at = (bind(orig, name, api).index for name in ("device_ids", "output_device"))

    def translated_ids(device_ids):
        new_ids = type(device_ids)(translate(d) for d in device_ids)
        if any(a is not b for a, b in zip(new_ids, device_ids, strict=False)):
            note(api, "device_ids", device_ids, new_ids)
        return new_ids

    def translated_output(output_device):
        new = translate(output_device)
        if new is not output_device:
            note(api, "output_device", output_device, new)
        return new

    @functools.wraps(orig)
    def __init__(*args, **kwargs):
        for name, at, change in (("device_ids", ids_at, translated_ids),
                                 ("output_device", out_at, translated_output)):
            if len(args) > at:
                if args[at] is not None:
                    args = args[:at] + (change(args[at]),) + args[at + 1:]
            elif kwargs.get(name) is not None:
                kwargs[name] = change(kwargs[name])
        return orig(*args, **kwargs)

    return __init__


def avg_as_sum(ctx: PatchContext, api: str, tensor_name: str) -> Callable:
    """torch_npu < 2.6 rejects ReduceOp.AVG on HCCL: run SUM and divide by the group size (floor division
    for integers, as torch_npu >= 2.6 does). Newer torch_npu lines accept AVG: then nothing is patched."""
    import torch.distributed as d

    from ascend_shim.errors import NotNeeded
    from ascend_shim.versions import installed_version, satisfies

    npu_version = installed_version("torch_npu") or installed_version("torch-npu")
    if npu_version and satisfies(npu_version, ">=2.6"):
        raise NotNeeded(f"torch_npu {npu_version} accepts ReduceOp.AVG on HCCL")
    orig, report = ctx.original, ctx.report

    from ascend_shim.binding import bind
    from ascend_shim.callers import native_scope

    tensor_pos, op_pos, group_pos = (bind(orig, name, api).index for name in (tensor_name, "op", "group"))

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        op = args[op_pos] if len(args) > op_pos else kwargs.get("op")
        if op != d.ReduceOp.AVG:
            return orig(*args, **kwargs)
        group = args[group_pos] if len(args) > group_pos else kwargs.get("group")
        with native_scope():  # the real backend name, not the one user code is shown
            backend = d.get_backend(group)
        if backend != "hccl":
            return orig(*args, **kwargs)
        report.fallback(api, f"ReduceOp.AVG on hccl (torch_npu {npu_version or '?'}) -> SUM / world size")
        if len(args) > op_pos:
            args = args[:op_pos] + (d.ReduceOp.SUM,) + args[op_pos + 1:]
        else:
            kwargs["op"] = d.ReduceOp.SUM
        out = args[tensor_pos] if len(args) > tensor_pos else kwargs.get(tensor_name)
        size = d.get_world_size(group)
        work = orig(*args, **kwargs)
        if work is None:
            _divide(out, size)
            return None
        return _DividingWork(work, out, size)

    return wrapper


def _divide(tensor: Any, size: int) -> None:
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.div_(size)
    else:
        tensor.floor_divide_(size)


class _DividingWork:
    """An async work handle whose completion divides the summed result (the AVG fallback)."""

    def __init__(self, work: Any, tensor: Any, size: int):
        self._work, self._tensor, self._size, self._done = work, tensor, size, False

    def wait(self, *args, **kwargs):
        result = self._work.wait(*args, **kwargs)
        if not self._done:
            _divide(self._tensor, self._size)
            self._done = True
        return result

    def get_future(self):
        return self._work.get_future().then(lambda fut: (self.wait(), [self._tensor])[1])

    def __getattr__(self, name):
        return getattr(self._work, name)


_FLOAT64_REDUCE = {"SUM": lambda t: t.sum(0), "AVG": lambda t: t.mean(0), "PRODUCT": lambda t: t.prod(0),
                   "MIN": lambda t: t.amin(0), "MAX": lambda t: t.amax(0)}


def float64_all_reduce(ctx: PatchContext) -> Callable:
    """all_reduce whose blocking float64 reductions on hccl are an all_gather and a float64 reduction per rank."""
    import torch
    import torch.distributed as d

    from ascend_shim.binding import bind
    from ascend_shim.callers import native_scope

    orig, report, api = ctx.original, ctx.report, "torch.distributed.all_reduce"
    tensor_pos, op_pos, group_pos, async_pos = (bind(orig, name, api).index
                                                for name in ("tensor", "op", "group", "async_op"))

    def arg(args, kwargs, pos, name, default=None):
        return args[pos] if len(args) > pos else kwargs.get(name, default)

    @functools.wraps(orig)
    def all_reduce(*args, **kwargs):
        tensor = arg(args, kwargs, tensor_pos, "tensor")
        if getattr(tensor, "dtype", None) is not torch.float64 or tensor.device.type != "npu" \
                or arg(args, kwargs, async_pos, "async_op", False):
            return orig(*args, **kwargs)
        op, group = arg(args, kwargs, op_pos, "op", d.ReduceOp.SUM), arg(args, kwargs, group_pos, "group")
        name = getattr(op, "name", None) or str(op).rpartition(".")[2]
        with native_scope():  # the real backend name, not the one user code is shown
            backend = d.get_backend(group)
        if backend != "hccl" or name not in _FLOAT64_REDUCE:
            return orig(*args, **kwargs)
        parts = [torch.empty_like(tensor) for _ in range(d.get_world_size(group))]
        d.all_gather(parts, tensor.contiguous(), group=group)
        tensor.copy_(_FLOAT64_REDUCE[name](torch.stack(parts)))
        report.fallback(api, f"float64 {name} on hccl -> all_gather + float64 {name.lower()} on each rank")
        return None

    return all_reduce


def init_process_group(ctx: PatchContext) -> Callable[..., Any]:
    return translating_backend(ctx.original, "torch.distributed.init_process_group")


def new_group(ctx: PatchContext) -> Callable[..., Any]:
    return translating_backend(ctx.original, "torch.distributed.new_group")


def new_subgroups(ctx: PatchContext) -> Callable[..., Any]:
    return translating_backend(ctx.original, "torch.distributed.new_subgroups")


def is_nccl_available(ctx: PatchContext) -> Callable[..., Any]:
    import torch.distributed as d

    from ascend_shim.callers import caller_is_native

    real = ctx.original

    @functools.wraps(real)
    def is_nccl_available():
        if caller_is_native(2):
            return real()
        return bool(getattr(d, "is_hccl_available", lambda: False)())

    return is_nccl_available


def get_backend(ctx: PatchContext) -> Callable[..., Any]:
    from ascend_shim.callers import caller_is_native

    real, report = ctx.original, ctx.report

    @functools.wraps(real)
    def get_backend(*args, **kwargs):
        backend = real(*args, **kwargs)
        if backend == "hccl" and not caller_is_native(2):
            report.translated("torch.distributed.get_backend", "'hccl' answered as 'nccl' to user code")
            return "nccl"
        return backend

    return get_backend


def get_default_backend_for_device(ctx: PatchContext) -> Callable[..., Any]:
    from ascend_shim.callers import caller_is_native

    real, report = ctx.original, ctx.report

    @functools.wraps(real)
    def get_default_backend_for_device(device):
        backend = real(device)
        if backend == "hccl" and not caller_is_native(2):
            report.translated("torch.distributed.get_default_backend_for_device",
                              "'hccl' answered as 'nccl' to user code")
            return "nccl"
        return backend

    return get_default_backend_for_device
