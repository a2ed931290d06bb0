"""torch devices: every place torch consumes a device lands on the NPU when given a CUDA device.

Translate once at the boundary: ``torch.device("cuda")`` itself yields an npu device, so device objects
made after activation need nothing further; strings and ints are translated where torch consumes them
(factories, ``.to``, ``.cuda``, ``torch.load`` ...). Only device-valued arguments change, never substrings:
``torch.load("ckpt_cuda.pt")`` opens that file.
"""
from __future__ import annotations

import functools

from ascend_shim import speedups
from ascend_shim.devices import translate
from ascend_shim.registry import PatchSet
from ascend_shim.report import REPORT

from ascend_shim.constructors import hook_constructor
from ._wrappers import gated, note, translate_device

REMOVE = "never while CUDA-targeted code must run unmodified on Ascend"
devices = PatchSet(
    id="torch_devices", title="CUDA device values -> npu wherever torch consumes a device",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim backend",
)


# -- torch.device and other classes constructed with a device ----------------------------------------------
# The classes stay the real ones (``type(d) is torch.device``, pickling by reference, dynamo): their C
# constructor is hooked instead of the class being replaced (see _constructors).
@devices.patch("torch:device", kind="call", fidelity="exact", covers=("device-string:cuda",),
               why="torch.device('cuda') is the boundary where CUDA code names its device; on an NPU machine a "
                   "cuda device object fails in every op it reaches.",
               what="torch.device(...) builds the real torch.device; a cuda one comes back as npu (same index). "
                    "torch.device stays the identical class (type checks, pickling, torch.compile unchanged).",
               remove_when=REMOVE)
def device(ctx):
    import torch

    device_class = torch.device
    modes = torch._C._len_torch_function_stack
    made_from: dict[tuple, tuple] = {}  # constructor arguments -> (device made, device returned): both immutable

    def make_new(original):
        def __new__(cls, *args, **kwargs):
            try:
                known = made_from.get(args) if cls is device_class and not kwargs and not modes() else None
            except TypeError:  # unhashable arguments: torch gives its own error below
                known = None
            if known is None:
                made = original(cls, args, kwargs)
                if type(made) is not device_class:  # a torch function mode may return others
                    return made
                known = (made, translate(made) if made.type == "cuda" else made)
                if cls is device_class and not kwargs and len(made_from) < 1024:
                    made_from[args] = known
            made, new = known
            if new is not made:
                note("torch.device", "device", made, new)
            return new
        return __new__

    undo = hook_constructor(device_class, make_new, probe=("cpu",))
    if not (ctx.config.speedups and speedups.BUILT):
        return undo
    # the cache hits, counted at their call sites, answered in C; everything else reaches __new__ above
    try:
        speedups.hook_device_new(device_class, made_from, modes, REPORT.per_thread, "torch.device",
                                 lambda made, new: note("torch.device", "device", made, new))
    except BaseException:
        undo()
        raise

    def unhook():
        speedups.unhook_device_new()
        undo()

    return unhook


def _device_kw_new(api):
    def make_new(original):
        def __new__(cls, *args, **kwargs):
            value = kwargs.get("device")
            if value is not None:
                new = translate(value, ints=True)
                if new is not value:
                    kwargs["device"] = new
                    note(api, "device", value, new)
            elif args:
                new = translate(args[0], ints=True)
                if new is not args[0]:
                    note(api, "device", args[0], new)
                    args = (new,) + args[1:]
            return original(cls, args, kwargs)
        return __new__
    return make_new


for _cls in ("Generator", "Stream", "Event"):
    def _make(ctx, _cls=_cls):
        import torch

        return hook_constructor(getattr(torch, _cls), _device_kw_new(f"torch.{_cls}"),
                                probe=() if _cls == "Generator" else ("cpu",))

    devices.patch(f"torch:{_cls}", kind="call",
                  why=f"torch.{_cls}(device='cuda') names a CUDA device.",
                  what=f"torch.{_cls}(...) builds the real class with a cuda device translated to npu; the class "
                       "stays the identical object.",
                  remove_when=REMOVE)(_make)


# -- factories ------------------------------------------------------------------------------------------------
FACTORIES = ("arange", "as_tensor", "asarray", "bartlett_window", "blackman_window", "empty", "empty_permuted",
             "empty_quantized", "empty_strided", "eye", "full", "hamming_window", "hann_window", "kaiser_window",
             "linspace", "logspace", "nested_tensor", "ones", "rand", "randint", "randn", "randperm", "range",
             "scalar_tensor", "sparse_bsc_tensor", "sparse_bsr_tensor", "sparse_compressed_tensor",
             "sparse_coo_tensor", "sparse_csc_tensor", "sparse_csr_tensor", "tensor", "tril_indices",
             "triu_indices", "zeros", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
             "randn_like", "randint_like", "from_file")  # torch.frombuffer has no device argument


def _factory_wrapper(ctx, name, api):
    # ``with torch.device(...)`` recognises factories by identity in this cached set: fill it with the
    # originals before any wrapper replaces them
    import torch.utils._device

    torch.utils._device._device_constructors()
    return translate_device(ctx.original, api, compiled=ctx.config.speedups)


for _name in FACTORIES:
    _target = f"torch.nested:{_name}" if _name == "nested_tensor" else f"torch:{_name}"
    devices.patch(_target,
                  why=f"torch.{_name}(..., device='cuda') allocates on CUDA.",
                  what="the device= keyword is translated (str, torch.device, int index); nothing else is touched.",
                  remove_when=REMOVE)(
        lambda ctx, _name=_name: _factory_wrapper(ctx, _name, f"torch.{_name}"))

for _name in ("fftfreq", "rfftfreq"):
    devices.patch(f"torch.fft:{_name}",
                  why=f"torch.fft.{_name}(..., device='cuda') allocates on CUDA.",
                  what="the device= keyword is translated.", remove_when=REMOVE)(
        lambda ctx, _name=_name: _factory_wrapper(ctx, _name, f"torch.fft.{_name}"))


# -- Tensor -----------------------------------------------------------------------------------------------------
@devices.patch("torch:Tensor.to",
               why="x.to('cuda'), x.to(0), x.to(torch.device('cuda')), x.to(other, 'cuda') move data to CUDA.",
               what="a device given positionally or as device= is translated; dtype-only and tensor-argument "
                    "calls go straight through (one type check).",
               remove_when=REMOVE)
def tensor_to(ctx):
    import torch

    from ascend_shim.devices import _TorchDevice  # read now: it is bound once torch is imported

    orig = ctx.original
    dtype = torch.dtype
    missing = object()

    @functools.wraps(orig)
    def to(self, first=missing, /, *args, **kwargs):
        kind = type(first)
        if kind is dtype:  # x.to(torch.float16): the hot path
            return orig(self, first, *args, **kwargs) if args or kwargs else orig(self, first)
        if kind is str or kind is _TorchDevice or kind is int:
            new = translate(first, ints=True)
            if new is not first:
                note("Tensor.to", "device", first, new)
                first = new
        if kwargs:
            value = kwargs.get("device")
            if value is not None:
                new = translate(value, ints=True)
                if new is not value:
                    kwargs["device"] = new
                    note("Tensor.to", "device", value, new)
        if first is missing:
            return orig(self, **kwargs)
        return orig(self, first, *args, **kwargs)

    return gated(orig, "Tensor.to", "device", to, position=1, plain=dtype) if ctx.config.speedups else to


@devices.patch("torch:Tensor.cuda", kind="replace", covers=("Tensor.cuda",),
               why="x.cuda() moves data to CUDA.",
               what="x.cuda(device=None, non_blocking=False, memory_format=...) -> x.npu(...) with the index kept.",
               remove_when=REMOVE)
def tensor_cuda(ctx):
    import torch

    def cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        target = translate(device, ints=True) if device is not None else "npu"
        note("Tensor.cuda", "device", device if device is not None else "cuda", target)
        return self.to(target, non_blocking=non_blocking, memory_format=memory_format)

    return cuda


@devices.patch("torch:Tensor.is_cuda", kind="replace", covers=("Tensor.is_cuda", "device-compare:is_cuda"),
               why="`if x.is_cuda:` in user code picks the accelerator branch; it is False for npu tensors.",
               what="user code sees is_cuda True for npu tensors; torch and NPU-native libraries see the real "
                    "value (caller-aware).",
               remove_when=REMOVE)
def tensor_is_cuda(ctx):
    from ascend_shim.callers import caller_is_native

    real = ctx.original

    def is_cuda(self):
        if real.__get__(self):
            return True
        return self.device.type == "npu" and not caller_is_native(2)

    return property(is_cuda, doc=real.__doc__)


for _name in ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros"):
    devices.patch(f"torch:Tensor.{_name}",
                  why=f"x.{_name}(..., device='cuda') allocates on CUDA.", what="the device= keyword is translated.",
                  remove_when=REMOVE)(
        lambda ctx, _name=_name: translate_device(ctx.original, f"Tensor.{_name}"))

devices.patch("torch:Tensor.pin_memory",
              why="x.pin_memory('cuda') pins for the CUDA device.",
              what="the (deprecated) device argument is translated.", remove_when=REMOVE)(
    lambda ctx: translate_device(ctx.original, "Tensor.pin_memory", ints=False))


# -- nn.Module --------------------------------------------------------------------------------------------------
@devices.patch("torch.nn:Module.cuda", kind="replace", covers=("Module.cuda",),
               why="model.cuda() moves parameters to CUDA.", what="model.cuda(device=None) -> model.to('npu[:i]').",
               remove_when=REMOVE)
def module_cuda(ctx):
    def cuda(self, device=None):
        target = translate(device, ints=True) if device is not None else "npu"
        note("Module.cuda", "device", device if device is not None else "cuda", target)
        return self.to(target)

    return cuda


@devices.patch("torch.nn:Module.to",
               why="model.to('cuda') / model.to(0) moves parameters to CUDA.",
               what="a positional or device= CUDA device is translated.", remove_when=REMOVE)
def module_to(ctx):
    return translate_device(ctx.original, "Module.to")


@devices.patch("torch.nn:Module.to_empty",
               why="model.to_empty(device='cuda') materialises meta modules on CUDA.",
               what="the device= keyword is translated.", remove_when=REMOVE)
def module_to_empty(ctx):
    return translate_device(ctx.original, "Module.to_empty")


# -- serialization, default device, amp, data -------------------------------------------------------------------
@devices.patch("torch:load",
               why="checkpoints saved on GPUs restore to 'cuda:N'; map_location='cuda' names CUDA.",
               what="map_location values only (str, device, dict values) are translated, never the file name; "
                    "storages tagged cuda:N restore to npu:N (with no map_location, after a callable that returns "
                    "None, and for tags a dict does not map); a dict key cuda:N also maps npu:N tags and back.",
               remove_when=REMOVE)
def load(ctx):
    import torch.serialization as ser

    from ascend_shim.devices import untranslate

    orig = ctx.original

    def restore_cuda_on_npu(storage, location):
        if location.startswith("cuda"):
            new = translate(location)
            note("torch.load", "storage location", location, new)
            return ser.default_restore_location(storage, new)
        return None

    def after(user_map):
        def restore(storage, location):
            result = user_map(storage, location)
            return restore_cuda_on_npu(storage, location) if result is None else result
        return restore

    def mapped(mapping):
        def restore(storage, location):
            target = mapping.get(location)
            if target is None:  # a key names the tag's counterpart (cuda:N for npu:N) or nothing
                alias = translate(location) if location.startswith("cuda") else untranslate(location)
                target = mapping.get(alias, location)
            new = translate(target)
            if new is not target:
                note("torch.load", "map_location", f"{location} -> {target}", new)
            return ser.default_restore_location(storage, new)
        return restore

    @functools.wraps(orig)
    def load_(f, map_location=None, *args, **kwargs):
        if map_location is None:
            map_location = restore_cuda_on_npu
        elif isinstance(map_location, dict):
            map_location = mapped(map_location)
        elif callable(map_location):
            map_location = after(map_location)
        else:
            new = translate(map_location)
            if new is not map_location:
                note("torch.load", "map_location", map_location, new)
            map_location = new
        return orig(f, map_location, *args, **kwargs)

    return load_


devices.patch("torch:set_default_device",
              why="torch.set_default_device('cuda') makes every factory allocate on CUDA.",
              what="the device argument is translated.", remove_when=REMOVE)(
    lambda ctx: translate_device(ctx.original, "torch.set_default_device"))


@devices.patch("torch.amp.autocast_mode:autocast.__init__", covers=("torch.cuda.amp.autocast",),
               why="torch.autocast('cuda') / torch.cuda.amp.autocast() enable CUDA autocast, which does nothing "
                   "to npu tensors: mixed precision silently off.",
               what="device_type 'cuda' -> 'npu' (torch.cuda.amp.autocast passes 'cuda' and is covered too).",
               remove_when=REMOVE)
def autocast_init(ctx):
    return translate_device(ctx.original, "torch.autocast", "device_type", ints=False)


for _name in ("is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled", "set_autocast_dtype"):
    devices.patch(f"torch:{_name}",
                  why=f"torch.{_name}('cuda', ...) asks about CUDA autocast.",
                  what="device_type 'cuda' -> 'npu'.", remove_when=REMOVE)(
        lambda ctx, _name=_name: translate_device(ctx.original, f"torch.{_name}", "device_type", ints=False))


@devices.patch("torch.amp.grad_scaler:GradScaler.__init__",
               covers=("torch.amp.GradScaler", "torch.cuda.amp.GradScaler"),
               why="GradScaler('cuda') (the default device) disables itself when CUDA is unavailable: fp16 loss "
                   "scaling silently off.",
               what="device 'cuda' (given or defaulted) -> 'npu', so loss scaling really happens on the NPU.",
               remove_when=REMOVE)
def grad_scaler_init(ctx):
    return translate_device(ctx.original, "GradScaler", ints=False)


@devices.patch("torch.distributed.fsdp.sharded_grad_scaler:ShardedGradScaler.__init__",
               why="FSDP's ShardedGradScaler defaults to device 'cuda'.", what="device 'cuda' -> 'npu'.",
               remove_when=REMOVE)
def sharded_grad_scaler_init(ctx):
    return translate_device(ctx.original, "ShardedGradScaler", ints=False)


@devices.patch("torch.utils.data.dataloader:DataLoader.__init__",
               why="DataLoader(pin_memory_device='cuda') pins for CUDA.",
               what="pin_memory_device 'cuda' -> 'npu'.", remove_when=REMOVE)
def dataloader_init(ctx):
    return translate_device(ctx.original, "DataLoader", "pin_memory_device", ints=False)


PATCH_SETS = [devices]
