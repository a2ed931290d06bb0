"""Single-process multi-device data parallelism (``nn.DataParallel``, ``torch.cuda.comm``) on the NPU.

``nn.DataParallel`` scatters inputs, replicates the module and gathers outputs through ``torch._C._scatter``,
``_broadcast_coalesced`` and ``_gather``, which exist only in CUDA builds of torch; torch_npu provides none of
them. Unmodified, ``nn.DataParallel(model).cuda()`` dies with "module 'torch._C' has no attribute '_scatter'"
even with one device. With one NPU the module runs directly on it (what DataParallel does on one GPU, minus the
no-op scatter); with more the run stops with an error that points to DDP under torchrun.
"""
from __future__ import annotations

import functools
import sys

from ascend_shim.registry import PatchSet

REMOVE = "torch_npu provides the multi-device scatter/gather/broadcast kernels (torch._C._scatter ...)"
ADVICE = ("Use DistributedDataParallel with one process per NPU instead, e.g. `python -m ascend_shim run -m "
          "torch.distributed.run --nproc_per_node N train.py` with init_process_group('nccl') (it becomes hccl); "
          "or give DataParallel a single device (device_ids=[0], or ASCEND_RT_VISIBLE_DEVICES=0).")
#: the torch.cuda.comm functions that need CUDA-only kernels of torch._C (reduce_add and reduce_add_coalesced fall
#: back to plain copies and additions when NCCL is absent, and work on the NPU as they are)
COMM_FUNCTIONS = ("broadcast", "broadcast_coalesced", "scatter", "gather")

data_parallel = PatchSet(
    id="torch_data_parallel", title="nn.DataParallel on one NPU runs the module directly; more NPUs, and "
                                    "torch.cuda.comm, stop with a clear error",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim backend",
)


def _needs_npu_path() -> None:
    """Skip the patch (reported as not needed) on a CUDA build of torch: scatter/gather work there as they are."""
    import torch

    if hasattr(torch._C, "_scatter"):
        from ascend_shim.errors import NotNeeded

        raise NotNeeded("this torch build has CUDA's scatter/gather")


def _single_npu(dp) -> bool:
    src = getattr(dp, "src_device_obj", None)
    return src is not None and src.type != "cuda" and len(dp.device_ids) == 1


def _to_device(obj, device):
    """What DataParallel's scatter does for one device: tensors (also inside tuples, lists, dicts, namedtuples)
    moved to ``device``; other objects passed as they are."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_to_device(o, device) for o in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_device(o, device) for o in obj) if obj else obj
    if isinstance(obj, dict):
        return type(obj)((k, _to_device(v, device)) for k, v in obj.items())
    return obj


def _too_many(report, patch_id: str, what: str, ids):
    from ascend_shim.errors import UnsupportedOnNPUError

    feature = f"{what} over {len(ids)} NPUs (device_ids={list(ids)})"
    report.unsupported(what, f"{len(ids)} devices: torch_npu has no multi-device scatter/gather")
    return UnsupportedOnNPUError(feature, patch_id, "torch_npu has no single-process multi-device scatter/gather "
                                                    "(torch._C._scatter). " + ADVICE)


@data_parallel.patch(
    "torch.nn.parallel.data_parallel:DataParallel.__init__", id="torch_data_parallel.DataParallel",
    fidelity="unsupported", covers=("torch.nn.DataParallel",),
    why="DataParallel over several devices scatters and gathers through torch._C._scatter/_gather, which only "
        "CUDA builds of torch have; on an NPU it fails with an AttributeError at the first forward.",
    what="DataParallel over more than one NPU (the default: every visible NPU) raises UnsupportedOnNPUError "
         "at construction, pointing to DDP under torchrun (reported); one NPU is accepted.",
    remove_when=REMOVE)
def dp_init(ctx):
    _needs_npu_path()
    orig, report, pid = ctx.original, ctx.report, ctx.patch.id

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        src = getattr(self, "src_device_obj", None)
        if src is not None and src.type != "cuda" and len(self.device_ids) > 1:
            raise _too_many(report, pid, "nn.DataParallel", self.device_ids)

    return __init__


@data_parallel.patch(
    "torch.nn.parallel.data_parallel:DataParallel.forward", id="torch_data_parallel.DataParallel.forward",
    why="with one device DataParallel still scatters its inputs through torch._C._scatter, which only CUDA "
        "builds of torch have: nn.DataParallel(model).cuda() fails at the first forward even on one NPU.",
    what="with one NPU the inputs are moved to it (tensors inside tuples, lists, dicts too) and the module runs "
         "directly, as DataParallel does on one GPU (reported).",
    remove_when=REMOVE)
def dp_forward(ctx):
    _needs_npu_path()
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def forward(self, *inputs, **kwargs):
        if not _single_npu(self):
            return orig(self, *inputs, **kwargs)
        import torch

        device = self.src_device_obj
        with torch.autograd.profiler.record_function("DataParallel.forward"):
            for t in self.module.parameters():
                if t.device != device:
                    raise RuntimeError("module must have its parameters and buffers on device "
                                       f"{device} (device_ids[0]) but found one of them on device: {t.device}")
            report.event("translated", "nn.DataParallel", f"1 device: module runs directly on {device}",
                         frame=sys._getframe(1))
            return self.module(*_to_device(inputs, device), **_to_device(kwargs, device))

    return forward


@data_parallel.patch(
    "torch.nn.parallel.data_parallel:data_parallel", id="torch_data_parallel.data_parallel",
    covers=("torch.nn.parallel.data_parallel",),
    why="the functional data_parallel() scatters and gathers through torch._C._scatter/_gather (CUDA builds "
        "only), also with one device.",
    what="with one NPU the module runs directly on it and the output is moved to output_device (reported); "
         "more NPUs raise UnsupportedOnNPUError pointing to DDP under torchrun.",
    remove_when=REMOVE)
def functional_data_parallel(ctx):
    _needs_npu_path()
    orig, report, pid = ctx.original, ctx.report, ctx.patch.id

    @functools.wraps(orig)
    def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None):
        from torch._utils import _get_all_device_indices, _get_available_device_type, _get_device_index

        import torch

        device_type = _get_available_device_type()
        if device_type in (None, "mps", "cuda"):
            return orig(module, inputs, device_ids, output_device, dim, module_kwargs)
        ids = [_get_device_index(x, True) for x in (device_ids if device_ids is not None
                                                     else _get_all_device_indices())]
        if len(ids) > 1:
            raise _too_many(report, pid, "torch.nn.parallel.data_parallel", ids)
        device = torch.device(device_type, ids[0])
        out_device = torch.device(device_type, _get_device_index(output_device, True)) \
            if output_device is not None else device
        if not isinstance(inputs, tuple):
            inputs = (inputs,) if inputs is not None else ()
        report.event("translated", "torch.nn.parallel.data_parallel", f"1 device: module runs directly on {device}",
                     frame=sys._getframe(1))
        out = module(*_to_device(inputs, device), **_to_device(module_kwargs or {}, device))
        return _to_device(out, out_device)

    return data_parallel


def _declare_comm(name: str) -> None:
    @data_parallel.patch(
        f"torch.nn.parallel.comm:{name}", kind="replace", fidelity="unsupported",
        covers=(f"torch.cuda.comm.{name}",),
        id=f"torch_data_parallel.comm.{name}",
        why=f"torch.cuda.comm.{name} calls a CUDA-only kernel of torch._C; with torch_npu it fails with an "
            "AttributeError.",
        what=f"torch.cuda.comm.{name} raises UnsupportedOnNPUError naming it and the way out (torch.distributed "
             "collectives over hccl, or tensor.to(device) copies) (reported).",
        remove_when=REMOVE)
    def comm(ctx):
        _needs_npu_path()
        from ascend_shim.errors import UnsupportedOnNPUError

        report, pid = ctx.report, ctx.patch.id
        feature = f"torch.cuda.comm.{name}"

        @functools.wraps(ctx.original)
        def unsupported(*args, **kwargs):
            report.unsupported(feature, "no single-process multi-device kernels in torch_npu")
            raise UnsupportedOnNPUError(feature, pid, "torch_npu has no single-process multi-device "
                                                      "broadcast/scatter/gather kernels. Use torch.distributed "
                                                      "collectives (one process per NPU, hccl) or copy with "
                                                      "tensor.to(device).")

        return unsupported


for _name in COMM_FUNCTIONS:
    _declare_comm(_name)

PATCH_SETS = [data_parallel]
