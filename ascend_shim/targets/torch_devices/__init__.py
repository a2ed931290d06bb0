"""torch devices: every place torch consumes a device lands on the NPU when given a CUDA device.

Translate once at the boundary: ``torch.device("cuda")`` itself yields an npu device, so device objects
made after activation need nothing further; strings and ints are translated where torch consumes them
(factories, ``.to``, ``.cuda``, ``torch.load`` ...). Only device-valued arguments change, never substrings:
``torch.load("ckpt_cuda.pt")`` opens that file.
"""
from __future__ import annotations

from ascend_shim.registry import PatchSet


#: the shared factory: the original with its device argument translated
TRANSLATING = "ascend_shim.targets._shared.device_wrappers:translating"
REMOVE = "never: CUDA code names cuda devices, and an NPU answers only to npu"
devices = PatchSet(
    id="torch_devices", title="CUDA device values -> npu wherever torch consumes a device",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim backend",
    implementation=f"{__name__}.impl"
)


# -- torch.device and other classes constructed with a device ----------------------------------------------
# The classes stay the real ones (``type(d) is torch.device``, pickling by reference, dynamo): their C
# constructor is hooked instead of the class being replaced (see ascend_shim.constructors).
devices.patch("torch:device", kind="call", fidelity="exact", covers=("device-string:cuda",),
              why="torch.device('cuda') is the boundary where CUDA code names its device; on an NPU machine a "
                  "cuda device object fails in every op it reaches.",
              what="torch.device(...) builds the real torch.device; a cuda one comes back as npu (same index). "
                   "torch.device stays the identical class (type checks, pickling, torch.compile unchanged).",
              remove_when=REMOVE, factory="device_constructor")


for _cls in ("Generator", "Stream", "Event"):
    devices.patch(f"torch:{_cls}", kind="call",
                  why=f"torch.{_cls}(device='cuda') names a CUDA device.",
                  what=f"torch.{_cls}(...) builds the real class with a cuda device translated to npu; the class "
                       "stays the identical object.",
                  remove_when=REMOVE, factory="translating_constructor", kwargs={"name": _cls})


# -- factories ------------------------------------------------------------------------------------------------
FACTORIES = ("arange", "as_tensor", "asarray", "bartlett_window", "blackman_window", "empty", "empty_permuted",
             "empty_quantized", "empty_strided", "eye", "full", "hamming_window", "hann_window", "kaiser_window",
             "linspace", "logspace", "nested_tensor", "ones", "rand", "randint", "randn", "randperm", "range",
             "scalar_tensor", "sparse_bsc_tensor", "sparse_bsr_tensor", "sparse_compressed_tensor",
             "sparse_coo_tensor", "sparse_csc_tensor", "sparse_csr_tensor", "tensor", "tril_indices",
             "triu_indices", "zeros", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
             "randn_like", "randint_like", "from_file")  # torch.frombuffer has no device argument


for _name in FACTORIES:
    _target = f"torch.nested:{_name}" if _name == "nested_tensor" else f"torch:{_name}"
    devices.patch(_target,
                  why=f"torch.{_name}(..., device='cuda') allocates on CUDA.",
                  what="the device= keyword is translated (str, torch.device, int index); nothing else is touched.",
                  remove_when=REMOVE, factory="translating_factory", kwargs={"api": f"torch.{_name}"})

for _name in ("fftfreq", "rfftfreq"):
    devices.patch(f"torch.fft:{_name}",
                  why=f"torch.fft.{_name}(..., device='cuda') allocates on CUDA.",
                  what="the device= keyword is translated.", remove_when=REMOVE,
                  factory="translating_factory", kwargs={"api": f"torch.fft.{_name}"})


# -- Tensor -----------------------------------------------------------------------------------------------------
devices.patch("torch:Tensor.to",
              why="x.to('cuda'), x.to(0), x.to(torch.device('cuda')), x.to(other, 'cuda') move data to CUDA.",
              what="a device given positionally or as device= is translated; dtype-only and tensor-argument "
                   "calls go straight through (one type check).",
              remove_when=REMOVE, factory="tensor_to")


devices.patch("torch:Tensor.cuda", kind="replace", covers=("Tensor.cuda",),
              why="x.cuda() moves data to CUDA.",
              what="x.cuda(device=None, non_blocking=False, memory_format=...) -> x.npu(...) with the index kept.",
              remove_when=REMOVE, factory="tensor_cuda")


devices.patch("torch:Tensor.is_cuda", kind="replace", covers=("Tensor.is_cuda", "device-compare:is_cuda"),
              why="`if x.is_cuda:` in user code picks the accelerator branch; it is False for npu tensors.",
              what="user code sees is_cuda True for npu tensors; torch and NPU-native libraries see the real "
                   "value (caller-aware).",
              remove_when=REMOVE, factory="tensor_is_cuda")


for _name in ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros"):
    devices.patch(f"torch:Tensor.{_name}",
                  why=f"x.{_name}(..., device='cuda') allocates on CUDA.", what="the device= keyword is translated.",
                  remove_when=REMOVE,
                  factory=TRANSLATING, kwargs={"api": f"Tensor.{_name}"})

devices.patch("torch:Tensor.pin_memory",
              why="x.pin_memory('cuda') pins for the CUDA device.",
              what="the (deprecated) device argument is translated.", remove_when=REMOVE,
              factory=TRANSLATING, kwargs={"api": "Tensor.pin_memory", "ints": False})


# -- nn.Module --------------------------------------------------------------------------------------------------
devices.patch("torch.nn:Module.cuda", kind="replace", covers=("Module.cuda",),
              why="model.cuda() moves parameters to CUDA.", what="model.cuda(device=None) -> model.to('npu[:i]').",
              remove_when=REMOVE, factory="module_cuda")


devices.patch("torch.nn:Module.to",
              why="model.to('cuda') / model.to(0) moves parameters to CUDA.",
              what="a positional or device= CUDA device is translated.", remove_when=REMOVE,
              factory=TRANSLATING, kwargs={"api": "Module.to"})


devices.patch("torch.nn:Module.to_empty",
              why="model.to_empty(device='cuda') materialises meta modules on CUDA.",
              what="the device= keyword is translated.", remove_when=REMOVE,
              factory=TRANSLATING, kwargs={"api": "Module.to_empty"})


# -- serialization, default device, amp, data -------------------------------------------------------------------
devices.patch("torch:load",
              why="checkpoints saved on GPUs restore to 'cuda:N'; map_location='cuda' names CUDA.",
              what="map_location values only (str, device, dict values) are translated, never the file name; "
                   "storages tagged cuda:N restore to npu:N (with no map_location, after a callable that returns "
                   "None, and for tags a dict does not map); a dict key cuda:N also maps npu:N tags and back.",
              remove_when=REMOVE, factory="load_onto_npu")


devices.patch("torch:set_default_device",
              why="torch.set_default_device('cuda') makes every factory allocate on CUDA.",
              what="the device argument is translated.", remove_when=REMOVE,
              factory=TRANSLATING, kwargs={"api": "torch.set_default_device"})


devices.patch("torch.amp.autocast_mode:autocast.__init__", covers=("torch.cuda.amp.autocast",),
              why="torch.autocast('cuda') / torch.cuda.amp.autocast() enable CUDA autocast, which does nothing "
                  "to npu tensors: mixed precision silently off.",
              what="device_type 'cuda' -> 'npu' (torch.cuda.amp.autocast passes 'cuda' and is covered too).",
              remove_when=REMOVE,
              factory=TRANSLATING, kwargs={"api": "torch.autocast", "name": "device_type", "ints": False})


for _name in ("is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled", "set_autocast_dtype"):
    devices.patch(f"torch:{_name}",
                  why=f"torch.{_name}('cuda', ...) asks about CUDA autocast.",
                  what="device_type 'cuda' -> 'npu'.", remove_when=REMOVE,
                  factory=TRANSLATING,
                  kwargs={"api": f"torch.{_name}", "name": "device_type", "ints": False})


devices.patch("torch.amp.grad_scaler:GradScaler.__init__",
              covers=("torch.amp.GradScaler", "torch.cuda.amp.GradScaler"),
              why="GradScaler('cuda') (the default device) disables itself when CUDA is unavailable: fp16 loss "
                  "scaling silently off.",
              what="device 'cuda' (given or defaulted) -> 'npu', so loss scaling really happens on the NPU.",
              remove_when=REMOVE, factory=TRANSLATING, kwargs={"api": "GradScaler", "ints": False})


devices.patch("torch.distributed.fsdp.sharded_grad_scaler:ShardedGradScaler.__init__",
              why="FSDP's ShardedGradScaler defaults to device 'cuda'.", what="device 'cuda' -> 'npu'.",
              remove_when=REMOVE, factory=TRANSLATING, kwargs={"api": "ShardedGradScaler", "ints": False})


devices.patch("torch.utils.data.dataloader:DataLoader.__init__",
              why="DataLoader(pin_memory_device='cuda') pins for CUDA.",
              what="pin_memory_device 'cuda' -> 'npu'.", remove_when=REMOVE,
              factory=TRANSLATING, kwargs={"api": "DataLoader", "name": "pin_memory_device", "ints": False})


PATCH_SETS = [devices]
