"""``torch.cuda.comm`` (broadcast, broadcast_coalesced, scatter, gather) by tensor copies between NPUs, with the
CUDA kernels' semantics (which device keeps the input itself, chunking, output order, streams), and the devices each
DataParallel call used, for the report.

Every one of those kernels (``torch._C._scatter`` ...) is a set of plain tensor copies between devices: torch's own
DataParallel, replicate, parallel_apply, gather and their autograd functions run unchanged on top.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

from ascend_shim.frames import caller

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext


def needs_npu_path() -> None:
    """Skip the patch (reported as not needed) on a CUDA build of torch: its kernels work there as they are."""
    import torch

    if hasattr(torch._C, "_scatter"):
        from ascend_shim.errors import NotNeeded

        raise NotNeeded("this torch build has CUDA's scatter/gather")


# -- the kernels: what torch/csrc/cuda/comm.cpp does, with tensor copies ---------------------------------------
def _device(index: int):
    import torch
    from torch._utils import _get_available_device_type

    return torch.device(_get_available_device_type(), index)


def _on_device(tensor, what: str) -> None:
    if tensor.device.type == "cpu":
        raise RuntimeError(f"{what}: expected the tensors on an NPU, got a CPU tensor")


def _copy_to(tensor, index: int):
    return tensor.to(_device(index), copy=True)


def broadcast_kernel(tensor, devices):
    """A copy of ``tensor`` for each device; a device ``tensor`` is on gets ``tensor`` itself."""
    import torch

    with torch.no_grad():
        return [tensor if tensor.device == _device(d) else _copy_to(tensor, d) for d in devices]


def broadcast_out_kernel(tensor, out):
    import torch

    for o in out:
        if o.shape != tensor.shape:
            raise RuntimeError(f"output tensor shape {tuple(o.shape)} does not match the broadcast tensor's "
                               f"{tuple(tensor.shape)}")
        _on_device(o, "broadcast")
    with torch.no_grad():
        for o in out:
            o.copy_(tensor)
    return tuple(out)


def broadcast_coalesced_kernel(tensors, devices):
    """One list per device: the first device must hold the tensors and gets them themselves, the others copies."""
    import torch

    if not devices:
        raise RuntimeError("broadcast_coalesced: expected at least one device")
    for t in tensors:
        _on_device(t, "broadcast_coalesced")
        if t.get_device() != devices[0]:
            raise RuntimeError("device of broadcasted tensors must appear as the first on devices list")
    with torch.no_grad():
        return [list(tensors)] + [[_copy_to(t, d) for t in tensors] for d in devices[1:]]


def _stream_context(streams, i):
    if streams is None or streams[i] is None:
        return contextlib.nullcontext()
    return streams[i]


def scatter_kernel(tensor, devices, chunk_sizes, dim, streams):
    """``tensor`` cut along ``dim`` (in ``chunk_sizes``, else evenly as torch.chunk) and chunk i moved to device i;
    a chunk already on its device stays a view."""
    import torch

    if not devices:
        raise RuntimeError("scatter: expected at least one device to scatter to")
    if chunk_sizes is not None:
        if len(chunk_sizes) != len(devices):
            raise RuntimeError(f"scatter: expected as many chunk sizes ({len(chunk_sizes)}) as devices "
                               f"({len(devices)})")
        if sum(chunk_sizes) != tensor.size(dim):
            raise RuntimeError(f"scatter: chunk sizes {list(chunk_sizes)} do not sum up to the size of dimension "
                               f"{dim} ({tensor.size(dim)})")
        chunks = tensor.split(list(chunk_sizes), dim)
    else:
        chunks = tensor.chunk(len(devices), dim)
    out = []
    with torch.no_grad():
        for i, chunk in enumerate(chunks):
            with _stream_context(streams, i):
                out.append(chunk.to(_device(devices[i]), non_blocking=True))
    return out


def scatter_out_kernel(tensor, out, dim, streams):
    import torch

    sizes = [o.size(dim) for o in out]
    chunks = tensor.split(sizes, dim)
    with torch.no_grad():
        for i, (chunk, o) in enumerate(zip(chunks, out, strict=False)):
            _on_device(o, "scatter")
            with _stream_context(streams, i):
                o.copy_(chunk, non_blocking=True)
    return list(out)


def gather_kernel(tensors, dim, destination):
    """The tensors concatenated along ``dim`` on ``destination`` (-1: the CPU)."""
    import torch

    if not tensors:
        raise RuntimeError("gather: expected at least one tensor")
    for t in tensors:
        _on_device(t, "gather")
    target = torch.device("cpu") if destination == -1 else _device(destination)
    with torch.no_grad():
        return torch.cat([t.to(target) for t in tensors], dim)


def gather_out_kernel(tensors, out, dim):
    import torch

    for t in tensors:
        _on_device(t, "gather")
    with torch.no_grad():
        out.copy_(torch.cat([t.to(out.device) for t in tensors], dim))
    return out


# -- torch.nn.parallel.comm with those kernels -----------------------------------------------------------------
def _comm_broadcast(tensor, devices=None, *, out=None):
    from torch._utils import _get_device_index, _handle_complex

    tensor = _handle_complex(tensor)
    if not ((devices is None) ^ (out is None)):
        raise RuntimeError(
            f"Exactly one of 'devices' and 'out' must be specified, but got devices={devices} and out={out}")
    if devices is not None:
        return tuple(broadcast_kernel(tensor, [_get_device_index(d) for d in devices]))
    return broadcast_out_kernel(tensor, out)


def _comm_broadcast_coalesced(tensors, devices, buffer_size=10485760):
    from torch._utils import _get_device_index, _handle_complex

    devices = [_get_device_index(d) for d in devices]
    return broadcast_coalesced_kernel([_handle_complex(t) for t in tensors], devices)


def _comm_scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    from torch._utils import _get_device_index, _handle_complex

    tensor = _handle_complex(tensor)
    if out is None:
        devices = [_get_device_index(d) for d in devices]
        return tuple(scatter_kernel(tensor, devices, chunk_sizes, dim, streams))
    if devices is not None:
        raise RuntimeError(f"'devices' must not be specified when 'out' is specified, but got devices={devices}")
    if chunk_sizes is not None:
        raise RuntimeError(f"'chunk_sizes' must not be specified when 'out' is specified, but got "
                           f"chunk_sizes={chunk_sizes}")
    return tuple(scatter_out_kernel(tensor, out, dim, streams))


def _comm_gather(tensors, dim=0, destination=None, *, out=None):
    import warnings

    from torch._utils import _get_device_index, _handle_complex

    tensors = [_handle_complex(t) for t in tensors]
    if out is None:
        if destination == -1:
            warnings.warn("Using -1 to represent CPU tensor is deprecated. Please use a device object or string "
                          "instead, e.g., \"cpu\".", FutureWarning, stacklevel=2)
        destination = _get_device_index(destination, allow_cpu=True, optional=True)
        return gather_kernel(tensors, dim, destination)
    if destination is not None:
        raise RuntimeError(f"'destination' must not be specified when 'out' is specified, but got "
                           f"destination={destination}")
    return gather_out_kernel(tensors, out, dim)


COMM: dict[str, Callable[..., Any]] = {"broadcast": _comm_broadcast, "broadcast_coalesced": _comm_broadcast_coalesced,
        "scatter": _comm_scatter, "gather": _comm_gather}


def comm_function(ctx: PatchContext, name: str) -> Callable:
    """``torch.nn.parallel.comm.<name>`` by device copies (not needed on a CUDA build of torch)."""
    needs_npu_path()
    return functools.wraps(ctx.original)(COMM[name])


# -- what the report says --------------------------------------------------------------------------------------
_replicas = threading.local()


def counting_replicate(ctx: PatchContext) -> Callable:
    """torch's replicate, counting the replicas made on this thread."""
    needs_npu_path()
    orig = ctx.original

    @functools.wraps(orig)
    def replicate(network, devices, detach=False):
        replicas = orig(network, devices, detach)
        _replicas.count = len(replicas)
        return replicas

    return replicate


def _report_devices(report: Any, api: str, count: int, output_device: Any, frame: Any) -> None:
    detail = (f"{count} devices: scatter, replicate, parallel_apply, gather on {output_device} (device copies)"
              if count > 1 else "1 device: the module runs on it")
    report.event("translated", api, detail, frame=frame)


def _counting(call: Callable[[], Any]) -> tuple[Any, int]:
    """Run ``call()``, returning its result and the replicas it made (1 when it ran the module directly)."""
    _replicas.count = 1
    return call(), _replicas.count


def reporting_forward(ctx: PatchContext) -> Callable:
    """DataParallel.forward, unchanged, reporting the devices each call used at its call site."""
    needs_npu_path()
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def forward(self, *inputs, **kwargs):
        if not self.device_ids:
            return orig(self, *inputs, **kwargs)
        out, count = _counting(lambda: orig(self, *inputs, **kwargs))
        _report_devices(report, "nn.DataParallel", count, self.src_device_obj.type + f":{self.output_device}",
                        caller())
        return out

    return forward


def reporting_data_parallel(ctx: PatchContext) -> Callable:
    """The functional data_parallel, unchanged, reporting the devices each call used at its call site."""
    needs_npu_path()
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None):
        out, count = _counting(lambda: orig(module, inputs, device_ids, output_device, dim, module_kwargs))
        where = getattr(out, "device", output_device)
        _report_devices(report, "torch.nn.parallel.data_parallel", count, where, caller())
        return out

    return data_parallel


def comm_nccl(ctx: PatchContext) -> object:
    from ascend_shim.targets.torch_cuda.impl import nccl_module

    return nccl_module(ctx.report, ctx.patch.id, report_availability=False)


def parallel_apply_autocast(ctx: PatchContext) -> Callable[..., Any]:
    # not gated on the comm kernels: builds that have them (torch_npu registers them) still read CUDA's autocast
    orig = ctx.original

    @functools.wraps(orig)
    def parallel_apply(modules, inputs, kwargs_tup=None, devices=None):
        import torch

        accelerator = torch.accelerator.current_accelerator()
        if accelerator is None or accelerator.type == "cuda" or torch.is_autocast_enabled() \
                or not torch.is_autocast_enabled(accelerator.type):
            return orig(modules, inputs, kwargs_tup, devices)
        set_enabled = inspect.unwrap(torch.set_autocast_enabled)  # CUDA's own flag, not translated to the NPU's
        set_enabled("cuda", True)  # what torch reads; nothing here runs on CUDA
        try:
            return orig(modules, inputs, kwargs_tup, devices)
        finally:
            set_enabled("cuda", False)

    return parallel_apply
