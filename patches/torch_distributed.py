"""torch.distributed on the NPU: nccl -> hccl, cuda device meshes and DDP/FSDP devices -> npu, AVG on HCCL.

Backend names are translated as values: ``"nccl"`` and the ``"cpu:gloo,cuda:nccl"`` form; an ``init_method``
URL or a file path that contains "nccl" is never touched.
"""
from __future__ import annotations

import functools

from ascend_shim.registry import PatchSet

from ._wrappers import note, translate_device

REMOVE = "never while CUDA-targeted code must run unmodified on Ascend"
dist = PatchSet(
    id="torch_distributed", title="torch.distributed: nccl -> hccl, cuda meshes/devices -> npu",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim hccl backend",
)


def _backend_wrapper(orig, api):
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


@dist.patch("torch.distributed:init_process_group", covers=("nccl",),
            why="init_process_group('nccl') fails on an NPU machine (no NCCL); device_id=cuda:N names CUDA.",
            what="backend 'nccl' -> 'hccl', 'cpu:gloo,cuda:nccl' -> 'cpu:gloo,npu:hccl', device_id cuda -> npu; "
                 "init_method and other strings untouched.",
            remove_when=REMOVE)
def init_process_group(ctx):
    return _backend_wrapper(ctx.original, "torch.distributed.init_process_group")


@dist.patch("torch.distributed:new_group",
            why="new_group(backend='nccl') names NCCL.", what="backend 'nccl' -> 'hccl'.", remove_when=REMOVE)
def new_group(ctx):
    return _backend_wrapper(ctx.original, "torch.distributed.new_group")


@dist.patch("torch.distributed:new_subgroups",
            why="new_subgroups(backend='nccl') names NCCL.", what="backend 'nccl' -> 'hccl'.", remove_when=REMOVE)
def new_subgroups(ctx):
    return _backend_wrapper(ctx.original, "torch.distributed.new_subgroups")


@dist.patch("torch.distributed:is_nccl_available", kind="wrap", covers=("torch.distributed.is_nccl_available",),
            why="user code checks for NCCL before choosing the GPU path.",
            what="caller-aware: user code gets is_hccl_available(); torch and native libraries the real answer.",
            remove_when=REMOVE)
def is_nccl_available(ctx):
    import torch.distributed as d

    from ascend_shim.callers import caller_is_native

    real = ctx.original

    @functools.wraps(real)
    def is_nccl_available():
        if caller_is_native(2):
            return real()
        return bool(getattr(d, "is_hccl_available", lambda: False)())

    return is_nccl_available


@dist.patch("torch.distributed:get_backend", kind="wrap",
            why="user code compares get_backend() with 'nccl' and takes a CPU/gloo branch otherwise.",
            what="caller-aware: user code sees 'nccl' where the backend is hccl (reported); torch and native "
                 "libraries see 'hccl'.",
            remove_when=REMOVE)
def get_backend(ctx):
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


@dist.patch("torch.distributed.device_mesh:init_device_mesh",
            why="init_device_mesh('cuda', ...) fails without CUDA.", what="device_type 'cuda' -> 'npu'.",
            remove_when=REMOVE)
def init_device_mesh(ctx):
    return translate_device(ctx.original, "init_device_mesh", "device_type", ints=False)


@dist.patch("torch.distributed.device_mesh:DeviceMesh.__init__",
            why="DeviceMesh(device_type='cuda', ...) fails without CUDA.", what="device_type 'cuda' -> 'npu'.",
            remove_when=REMOVE)
def device_mesh_init(ctx):
    return translate_device(ctx.original, "DeviceMesh", "device_type", ints=False)


@dist.patch("torch.nn.parallel:DistributedDataParallel.__init__",
            why="DDP(device_ids=['cuda:0'], output_device='cuda:0') names CUDA devices.",
            what="each device_ids entry and output_device are translated (ints stay indices of the NPU).",
            remove_when=REMOVE)
def ddp_init(ctx):
    from ascend_shim.binding import bind
    from ascend_shim.devices import translate

    orig = ctx.original
    api = "DistributedDataParallel"
    ids_at, out_at = (bind(orig, name, api).index for name in ("device_ids", "output_device"))

    def translated_ids(device_ids):
        new_ids = type(device_ids)(translate(d) for d in device_ids)
        if any(a is not b for a, b in zip(new_ids, device_ids)):
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


@dist.patch("torch.distributed.fsdp:FullyShardedDataParallel.__init__",
            why="FSDP(device_id=torch.device('cuda', i) or 'cuda:i') names CUDA.",
            what="device_id is translated.", remove_when=REMOVE)
def fsdp_init(ctx):
    return translate_device(ctx.original, "FullyShardedDataParallel", "device_id", ints=False)


def _avg_fallback(ctx, api, tensor_name):
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


def _divide(tensor, size):
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.div_(size)
    else:
        tensor.floor_divide_(size)


class _DividingWork:
    """An async work handle whose completion divides the summed result (the AVG fallback)."""

    def __init__(self, work, tensor, size):
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


@dist.patch("torch.distributed:all_reduce", fidelity="fallback", covers=("ReduceOp.AVG",),
            why="HCCL of torch_npu < 2.6 rejects ReduceOp.AVG ('Cannot use ReduceOp.AVG with HCCL'); nanochat "
                "and others use it.",
            what="with such a torch_npu, all_reduce(op=AVG) on hccl runs SUM then divides by the group size "
                 "(reported); not applied where torch_npu accepts AVG.",
            remove_when="torch_npu < 2.6 is no longer supported")
def all_reduce(ctx):
    return _avg_fallback(ctx, "torch.distributed.all_reduce", "tensor")


@dist.patch("torch.distributed:reduce_scatter_tensor", fidelity="fallback", covers=("ReduceOp.AVG",),
            why="HCCL of torch_npu < 2.6 rejects ReduceOp.AVG in reduce-scatter too.",
            what="with such a torch_npu, reduce_scatter_tensor(op=AVG) on hccl runs SUM then divides the output "
                 "by the group size; not applied where torch_npu accepts AVG.",
            remove_when="torch_npu < 2.6 is no longer supported")
def reduce_scatter_tensor(ctx):
    return _avg_fallback(ctx, "torch.distributed.reduce_scatter_tensor", "output")


_FLOAT64_REDUCE = {"SUM": lambda t: t.sum(0), "AVG": lambda t: t.mean(0), "PRODUCT": lambda t: t.prod(0),
                   "MIN": lambda t: t.amin(0), "MAX": lambda t: t.amax(0)}


@dist.patch("torch.distributed:all_reduce", id="torch_distributed.all_reduce_float64", fidelity="fallback",
            why="HCCL cannot reduce float64 ('HCCL allreduce: Unsupported data type at::kDouble'); CUDA code "
                "reduces float64 where fp32 is too coarse (Megatron-LM all-reduces its start-up timestamps with "
                "MIN: epoch seconds need float64).",
            what="a blocking all_reduce of a float64 npu tensor on hccl with SUM, AVG, PRODUCT, MIN or MAX "
                 "gathers the group's tensors (HCCL moves float64) and reduces them in float64 on each rank, in "
                 "rank order (reported); everything else, async_op=True included, goes to HCCL unchanged.",
            remove_when="HCCL reduces float64")
def all_reduce_float64(ctx):
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


# -- environment ---------------------------------------------------------------------------------------------
ENV = {
    "CUDA_VISIBLE_DEVICES": "ASCEND_RT_VISIBLE_DEVICES",
    "PYTORCH_ALLOC_CONF": "PYTORCH_NPU_ALLOC_CONF",  # first: torch prefers it to the deprecated CUDA name
    "PYTORCH_CUDA_ALLOC_CONF": "PYTORCH_NPU_ALLOC_CONF",
    "CUDA_LAUNCH_BLOCKING": "ASCEND_LAUNCH_BLOCKING",
    "NCCL_SOCKET_IFNAME": "HCCL_SOCKET_IFNAME",
}
#: read by the NPU runtime only when torch starts it, and often set by a script's own first lines (nanochat's
#: base_train, chat_sft) after activation but before ``import torch``: translated when torch is imported
AT_TORCH_IMPORT = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
environment = PatchSet(id="environment", title="CUDA/NCCL environment variables -> Ascend/HCCL counterparts")


def _env_factory(cuda_var, npu_var):
    import os

    marker = f"ASCEND_SHIM_DERIVED_{cuda_var}"  # the value a parent's shim translated; children inherit it

    def factory(ctx):
        value, current = os.environ.get(cuda_var), os.environ.get(npu_var)
        if value is None:
            return None  # nothing to translate
        if current is not None and not (current == os.environ.get(marker) and value != current):
            return None  # the user set the NPU variable (it wins), or the parent's translation still holds
        # unset, or inherited from a parent's translation while this child got its own CUDA value (AReaL / TRL
        # start each vLLM server with CUDA_VISIBLE_DEVICES=<its card>)
        ctx.set_env(npu_var, value, f"{npu_var} set from {cuda_var}={value!r}")
        old_marker = os.environ.get(marker)
        os.environ[marker] = value
        ctx.on_undo(lambda: os.environ.__setitem__(marker, old_marker) if old_marker is not None
                    else os.environ.pop(marker, None))
        return None

    return factory


for _cuda_var, _npu_var in ENV.items():
    _late = _cuda_var in AT_TORCH_IMPORT
    environment.patch("torch" if _late else f"env:{_cuda_var}", kind="env", covers=(f"env:{_cuda_var}",),
                      why=f"{_cuda_var} configures CUDA; the NPU runtime reads {_npu_var}."
                          + (" Scripts often set it in their first lines, before importing torch." if _late else ""),
                      what=f"{_npu_var} is set from {_cuda_var} when it is unset ("
                           + ("when torch is imported, before torch_npu starts" if _late else "at activation")
                           + "); a value the user set wins.",
                      remove_when=REMOVE, id=f"environment.{_cuda_var}")(_env_factory(_cuda_var, _npu_var))

PATCH_SETS = [dist, environment]
