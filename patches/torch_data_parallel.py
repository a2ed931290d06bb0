"""Single-process multi-device data parallelism (``nn.DataParallel``, ``data_parallel``, ``torch.cuda.comm``) on NPUs.

``nn.DataParallel`` scatters its inputs, replicates the module, runs the replicas in threads and gathers their
outputs; the device-to-device part is ``torch.cuda.comm`` (``broadcast``, ``broadcast_coalesced``, ``scatter``,
``gather``), whose kernels (``torch._C._scatter`` ...) exist only in CUDA builds of torch; torch_npu provides none
of them, so ``nn.DataParallel(model).cuda()`` died at its first forward, even on one NPU. Every one of those
kernels is a set of plain tensor copies between devices: this set gives ``torch.nn.parallel.comm`` those copies,
with the CUDA kernels' semantics (which device keeps the input itself, chunking, output order, streams), and
torch's own DataParallel, replicate, parallel_apply, gather and their autograd functions run unchanged on top.
The report says how many devices each DataParallel call used.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading

from ascend_shim.registry import PatchSet

REMOVE = "torch_npu provides the multi-device scatter/gather/broadcast kernels (torch._C._scatter ...)"

data_parallel = PatchSet(
    id="torch_data_parallel", title="nn.DataParallel and torch.cuda.comm over NPUs by device copies",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim backend",
)


def _needs_npu_path() -> None:
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
        for i, (chunk, o) in enumerate(zip(chunks, out)):
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


COMM = {"broadcast": _comm_broadcast, "broadcast_coalesced": _comm_broadcast_coalesced,
        "scatter": _comm_scatter, "gather": _comm_gather}


def _declare_comm(name: str) -> None:
    @data_parallel.patch(
        f"torch.nn.parallel.comm:{name}", kind="replace", covers=(f"torch.cuda.comm.{name}",),
        id=f"torch_data_parallel.comm.{name}",
        why=f"torch.cuda.comm.{name} calls a CUDA-only kernel of torch._C (nn.DataParallel and replicate use it); "
            "with torch_npu it fails with an AttributeError.",
        what=f"torch.cuda.comm.{name} (and torch.nn.parallel.comm.{name}) does what the CUDA kernel does with "
             "plain tensor copies between NPUs: same outputs, same device order, same views.",
        remove_when=REMOVE)
    def comm(ctx):
        _needs_npu_path()
        return functools.wraps(ctx.original)(COMM[name])


for _name in COMM:
    _declare_comm(_name)


# -- what the report says --------------------------------------------------------------------------------------
_replicas = threading.local()


@data_parallel.patch(
    "torch.nn.parallel.replicate:replicate", id="torch_data_parallel.replicate_count",
    why="the report says how many devices a DataParallel call used (the replicas made for it).",
    what="records the number of replicas made (no change to replicate itself).",
    remove_when=REMOVE)
def replicate_count(ctx):
    _needs_npu_path()
    orig = ctx.original

    @functools.wraps(orig)
    def replicate(network, devices, detach=False):
        replicas = orig(network, devices, detach)
        _replicas.count = len(replicas)
        return replicas

    return replicate


def _report_devices(report, api: str, count: int, output_device, frame) -> None:
    detail = (f"{count} devices: scatter, replicate, parallel_apply, gather on {output_device} (device copies)"
              if count > 1 else "1 device: the module runs on it")
    report.event("translated", api, detail, frame=frame)


def _counting(call):
    """Run ``call()``, returning its result and the replicas it made (1 when it ran the module directly)."""
    _replicas.count = 1
    return call(), _replicas.count


@data_parallel.patch(
    "torch.nn.parallel.data_parallel:DataParallel.forward", id="torch_data_parallel.DataParallel.forward",
    covers=("torch.nn.DataParallel",),
    why="nn.DataParallel over NPUs runs on the device copies of torch.cuda.comm (this set); which devices took part "
        "is worth reporting (pytorch/examples take this path whenever more than one device is visible).",
    what="torch's own forward runs unchanged; each call site is reported with the number of devices used.",
    remove_when=REMOVE)
def dp_forward(ctx):
    _needs_npu_path()
    import sys

    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def forward(self, *inputs, **kwargs):
        if not self.device_ids:
            return orig(self, *inputs, **kwargs)
        out, count = _counting(lambda: orig(self, *inputs, **kwargs))
        _report_devices(report, "nn.DataParallel", count, self.src_device_obj.type + f":{self.output_device}",
                        sys._getframe(1))
        return out

    return forward


@data_parallel.patch(
    "torch.nn.parallel.data_parallel:data_parallel", id="torch_data_parallel.data_parallel",
    covers=("torch.nn.parallel.data_parallel",),
    why="the functional data_parallel() runs on the device copies of torch.cuda.comm (this set); which devices "
        "took part is worth reporting.",
    what="torch's own data_parallel runs unchanged; each call site is reported with the number of devices used.",
    remove_when=REMOVE)
def functional_data_parallel(ctx):
    _needs_npu_path()
    import sys

    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None):
        out, count = _counting(lambda: orig(module, inputs, device_ids, output_device, dim, module_kwargs))
        where = getattr(out, "device", output_device)
        _report_devices(report, "torch.nn.parallel.data_parallel", count, where, sys._getframe(1))
        return out

    return data_parallel


@data_parallel.patch(
    "torch.nn.parallel.parallel_apply:parallel_apply", id="torch_data_parallel.parallel_apply_autocast",
    why="parallel_apply runs each replica under autocast only if torch.is_autocast_enabled() -- CUDA's autocast "
        "state; under `torch.autocast('cuda')` on an NPU it is the NPU's autocast that is on, so the replicas "
        "would run in full precision while the same code on CUDA runs them in autocast.",
    what="when the accelerator's autocast is on and CUDA's is not, parallel_apply sees autocast as on (the "
         "replicas run under the accelerator's autocast, as on CUDA); otherwise unchanged.",
    remove_when="parallel_apply reads the accelerator's autocast state")
def parallel_apply_autocast(ctx):
    _needs_npu_path()
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


PATCH_SETS = [data_parallel]
