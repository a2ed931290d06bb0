"""torch.cuda -> torch.npu: the whole public ``torch.cuda`` surface, name by name.

Each public name gets one treatment, so nothing is left on its CUDA implementation by accident (Huawei's
transfer_to_npu copies only ``torch.npu.__all__`` and leaves ~40 names on CUDA):

* alias: the npu function has the same semantics (``torch.cuda.empty_cache`` is ``torch.npu.empty_cache``);
* device argument: the npu function, with a CUDA device argument translated;
* special: caller-aware availability, a configurable capability, properties with CUDA fields,
  CUDAGraph -> NPUGraph, nvtx, legacy tensor types, default generators;
* unsupported: a CUDA-only facility (jiterator, nccl, cudart, tunable, NVML readings ...) raises
  :class:`~ascend_shim.errors.UnsupportedOnNPUError` naming the feature when used, and is reported;
* neutral: a query with a documented neutral answer (``get_arch_list() == []``), reported when used.
Names that are plain Python helpers (``typing`` re-exports, ``os``) are left alone.
"""
from __future__ import annotations

import functools
import inspect
import types

from ascend_shim.registry import PatchSet

from ._wrappers import note, translate_device

REMOVE = "never while CUDA-targeted code must run unmodified on Ascend"
cuda = PatchSet(
    id="torch_cuda", title="torch.cuda -> torch.npu, name by name",
    requires={"torch": ">=2.4,<2.15"}, checked_against="torch 2.13.0 (CPU build) with the sim backend",
)

# same semantics on torch.npu, no device argument
ALIASES = ("current_device", "device", "device_of", "empty_cache", "init", "initial_seed", "ipc_collect",
           "memory_snapshot",
           "is_initialized", "is_bf16_supported", "manual_seed", "manual_seed_all", "seed", "seed_all",
           "get_rng_state_all", "set_rng_state_all", "set_stream", "stream", "StreamContext", "Event",
           "ExternalStream", "MemPool", "use_mem_pool", "get_allocator_backend", "caching_allocator_alloc",
           "caching_allocator_delete", "get_per_process_memory_fraction", "is_current_stream_capturing", "graph",
           "graph_pool_handle", "make_graphed_callables", "host_memory_stats", "host_memory_stats_as_nested_dict",
           "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats", "get_sync_debug_mode",
           "set_sync_debug_mode", "change_current_allocator")
# npu functions with a device argument that may be a CUDA device: the argument's name in torch.cuda (its
# position is read from the function itself when the patch applies; where torch_npu names it differently,
# get_device_name(device_name=None), the CUDA keyword is renamed: see _cuda_callable)
DEVICE_ARG = {name: "device" for name in (
    "set_device", "synchronize", "get_device_name", "mem_get_info", "memory_stats", "memory_stats_as_nested_dict",
    "memory_summary", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_cached", "max_memory_cached", "reset_peak_memory_stats", "reset_max_memory_allocated",
    "reset_max_memory_cached", "reset_accumulated_memory_stats", "get_rng_state", "set_rng_state", "current_stream",
    "default_stream", "set_per_process_memory_fraction", "Stream", "utilization", "can_device_access_peer")}
# torch.cuda arguments some torch_npu releases lack, dropped because they cannot change the NPU's answer
IGNORED_CUDA_ARGUMENTS = {
    ("is_bf16_supported", "including_emulation"): "the NPU computes bf16 natively (torch_npu ignores it where it "
                                                  "takes it)",
}
# CUDA-only facilities: using them raises a clear error
UNSUPPORTED = {
    "jiterator": "CUDA jiterator (runtime-compiled CUDA kernels)", "nccl": "torch.cuda.nccl (direct NCCL calls)",
    "cudart": "the CUDA runtime API", "tunable": "TunableOp (CUDA GEMM tuning)", "gds": "GPUDirect Storage",
    "temperature": "NVML temperature", "power_draw": "NVML power draw", "clock_rate": "NVML clock rate",
    "memory_usage": "NVML memory usage", "device_memory_used": "NVML device memory used",
    "list_gpu_processes": "NVML process list", "CUDAPluggableAllocator": "a CUDA pluggable allocator",
    "GreenContext": "CUDA green contexts", "green_contexts": "CUDA green contexts",
    "check_error": "CUDA error codes", "cudaStatus": "CUDA status codes",
    "current_blas_handle": "the cuBLAS handle", "current_solver_handle": "the cuSOLVER handle",
    "get_stream_from_external": "external CUDA streams", "caching_allocator_enable": "toggling the CUDA allocator",
    "caching_allocator_disabled": "toggling the CUDA allocator",
}
STORAGES = ("BFloat16Storage", "BoolStorage", "ByteStorage", "CharStorage", "ComplexDoubleStorage",
            "ComplexFloatStorage", "DoubleStorage", "FloatStorage", "HalfStorage", "IntStorage", "LongStorage",
            "ShortStorage")
# queries with a documented neutral answer
NEUTRAL = {"get_arch_list": [], "get_gencode_flags": "", "has_half": True, "has_magma": False}
LEGACY_TENSORS = {"BFloat16Tensor": "bfloat16", "BoolTensor": "bool", "ByteTensor": "uint8", "CharTensor": "int8",
                  "DoubleTensor": "float64", "FloatTensor": "float32", "HalfTensor": "float16",
                  "IntTensor": "int32", "LongTensor": "int64", "ShortTensor": "int16"}

# The torch.npu names this set maps onto, and what its patch does where a torch_npu release lacks one:
# "skip" -- resolved through _npu(), so the patch is skipped and reported; "fallback" -- a reported fallback;
# "required" -- read directly, it must exist in every torch_npu release of the set's torch range.
# (the contract tests check this against the real releases.)
NPU_NAMES = {**{name: "skip" for name in (*ALIASES, *DEVICE_ARG, "NPUGraph", "default_generators")},
             "mstx": "fallback", "is_available": "required", "device_count": "required",
             "get_device_properties": "required"}


def _npu(ctx, name):
    """``torch.npu.<name>``; a name the backend knows but does not implement (the emulator raises
    NotImplementedError for those) becomes a forwarder that raises that clear error when used."""
    import torch

    try:
        return getattr(torch.npu, name)
    except NotImplementedError:
        def not_implemented(*args, **kwargs):
            return getattr(torch.npu, name)  # raises the backend's own explanation

        not_implemented.__name__ = not_implemented.__qualname__ = name
        not_implemented.unavailable = True
        return not_implemented
    except AttributeError:
        return ctx.need(torch.npu, name, "torch.npu")


def _cuda_callable(ctx, name, fn):
    """``fn`` (``torch.npu.<name>``) callable as ``torch.cuda.<name>`` is called (``ctx.original``'s signature).

    Where torch_npu names a positional argument differently (``get_device_name(device_name=None)``,
    ``can_device_access_peer(device_id, peer_device_id)``), CUDA's keyword reaches the npu parameter at the same
    position; a CUDA argument of :data:`IGNORED_CUDA_ARGUMENTS` that this release lacks is dropped. The result
    shows CUDA's names in its signature (the device translation binds by them). ``fn`` itself when nothing
    differs, so the common case costs nothing.
    """
    if isinstance(fn, type) or not callable(ctx.original):
        return fn
    try:
        cuda_params = list(inspect.signature(ctx.original).parameters.values())
        npu_signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn
    npu_params = npu_signature.parameters
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in npu_params.values()):
        return fn
    positional = [p for p in npu_params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    cuda_names = {p.name for p in cuda_params}
    renamed, dropped = {}, []
    for index, param in enumerate(cuda_params):
        if param.name in npu_params or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if (param.kind is param.POSITIONAL_OR_KEYWORD and index < len(positional)
                and positional[index].kind is param.POSITIONAL_OR_KEYWORD and positional[index].name not in cuda_names):
            renamed[param.name] = positional[index].name
        elif (name, param.name) in IGNORED_CUDA_ARGUMENTS and index >= len(positional):
            dropped.append(param)
    if not renamed and not dropped:
        return fn
    keep = len(positional)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if dropped and keep < len(args) <= keep + len(dropped):  # dropped CUDA arguments given by position
            args = args[:keep]
        for cuda_name, npu_name in renamed.items():
            if cuda_name in kwargs:
                kwargs[npu_name] = kwargs.pop(cuda_name)
        for param in dropped:
            kwargs.pop(param.name, None)
        return fn(*args, **kwargs)

    as_cuda = {npu_name: cuda_name for cuda_name, npu_name in renamed.items()}
    call.__signature__ = npu_signature.replace(parameters=[
        *(p.replace(name=as_cuda.get(p.name, p.name)) for p in npu_params.values()),
        *(p.replace(kind=p.POSITIONAL_OR_KEYWORD) for p in dropped)])
    return call


for _name in ALIASES:
    cuda.patch(f"torch.cuda:{_name}", kind="replace", covers=(f"torch.cuda.{_name}",),
               why=f"torch.cuda.{_name} talks to the CUDA runtime, absent on an NPU machine.",
               what=f"torch.cuda.{_name} is torch.npu.{_name} (same semantics).", remove_when=REMOVE)(
        lambda ctx, _name=_name: _cuda_callable(ctx, _name, _npu(ctx, _name)))

for _name, _arg in DEVICE_ARG.items():
    def _make(ctx, _name=_name, _arg=_arg):
        fn = _npu(ctx, _name)
        if getattr(fn, "unavailable", False):
            return fn
        fn = _cuda_callable(ctx, _name, fn)
        if isinstance(fn, type):  # stays a class: `torch.cuda.Stream | None` annotations, isinstance checks
            new = translate_device(fn.__new__, f"torch.cuda.{_name}", _arg, ints=False)
            return type(fn.__name__, (fn,), {"__new__": new, "__module__": fn.__module__,
                                             "__qualname__": fn.__qualname__, "__doc__": fn.__doc__})
        return translate_device(fn, f"torch.cuda.{_name}", _arg, ints=False)

    cuda.patch(f"torch.cuda:{_name}", kind="wrap", covers=(f"torch.cuda.{_name}",),
               why=f"torch.cuda.{_name} talks to the CUDA runtime, absent on an NPU machine.",
               what=f"torch.cuda.{_name} calls torch.npu.{_name} with a CUDA device argument translated.",
               remove_when=REMOVE)(_make)


@cuda.patch("torch.cuda:is_available", kind="wrap", covers=("torch.cuda.is_available",),
            why="user code takes its accelerator path only if CUDA is available; NPU-native libraries must see "
                "the truth or they take CUDA-only paths (accelerate#3020).",
            what="caller-aware: user code gets torch.npu.is_available(); torch and NPU-native libraries "
                 "(registered by their patch sets) get the real CUDA answer. Thread- and exception-safe.",
            remove_when=REMOVE)
def is_available(ctx):
    import torch

    from ascend_shim.callers import caller_is_native

    real, npu = ctx.original, torch.npu.is_available

    @functools.wraps(real)
    def is_available():
        return real() if caller_is_native(2) else npu()

    return is_available


@cuda.patch("torch.cuda:device_count", kind="wrap", covers=("torch.cuda.device_count",),
            why="user code sizes its device loops with device_count(); NPU-native libraries must see the truth.",
            what="caller-aware: user code gets torch.npu.device_count(), torch and native libraries the real one.",
            remove_when=REMOVE)
def device_count(ctx):
    import torch

    from ascend_shim.callers import caller_is_native

    real, npu = ctx.original, torch.npu.device_count

    @functools.wraps(real)
    def device_count():
        return real() if caller_is_native(2) else npu()

    return device_count


def _capability(ctx):
    major, minor = ctx.config.cuda_capability.split(".")
    return int(major), int(minor)


@cuda.patch("torch.cuda:get_device_capability", kind="replace", fidelity="neutral",
            covers=("torch.cuda.get_device_capability",),
            why="torch_npu answers None, so `major, minor = get_device_capability()` and `>= (8, 0)` crash "
                "(nanochat fails at import).",
            what="answers the configured capability (ASCEND_SHIM_CUDA_CAPABILITY, default 8.0: bf16 yes, fp8 and "
                 "Hopper-only kernels no).",
            remove_when="torch_npu returns a usable capability tuple")
def get_device_capability(ctx):
    cap = _capability(ctx)

    def get_device_capability(device=None):
        return cap

    return get_device_capability


class CudaStyleProperties:
    """NPU device properties with the fields CUDA code reads (major, minor, multi_processor_count ...)."""

    def __init__(self, npu_props, capability):
        self._npu = npu_props
        self.major, self.minor = capability
        self.name = getattr(npu_props, "name", "Ascend NPU")
        self.total_memory = getattr(npu_props, "total_memory", 0)
        # an Ascend AI core count stands in for the SM count (used for MFU estimates and grid sizing)
        self.multi_processor_count = int(getattr(npu_props, "cube_core_num", 0) or
                                         getattr(npu_props, "multi_processor_count", 0) or 0)
        self.is_integrated = False
        self.is_multi_gpu_board = False

    def __getattr__(self, name):
        return getattr(self._npu, name)

    def __repr__(self):
        return (f"_CudaStyleNPUProperties(name={self.name!r}, major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count})")


@cuda.patch("torch.cuda:get_device_properties", kind="wrap", covers=("torch.cuda.get_device_properties",),
            why="CUDA code reads .major/.minor/.multi_processor_count, which NPU properties lack.",
            what="the NPU's properties plus major/minor (the configured capability) and multi_processor_count "
                 "(the AI-core count); a CUDA device argument is translated.",
            remove_when=REMOVE)
def get_device_properties(ctx):
    import torch

    from ascend_shim.devices import translate

    npu_fn, cap = torch.npu.get_device_properties, _capability(ctx)

    def get_device_properties(device=None):
        return CudaStyleProperties(npu_fn(translate(device, ints=False) if device is not None else None), cap)

    return get_device_properties


@cuda.patch("torch.cuda:is_tf32_supported", kind="replace", fidelity="neutral",
            covers=("torch.cuda.is_tf32_supported",),
            why="code enables TF32 matmuls only if supported; the NPU's counterpart is HF32.",
            what="answers True (HF32 plays TF32's role; the torch_features set maps the TF32 flags onto it).",
            remove_when=REMOVE)
def is_tf32_supported(ctx):
    return lambda: True


@cuda.patch("torch.cuda:CUDAGraph", kind="replace", covers=("torch.cuda.CUDAGraph", "cuda-graph"),
            why="CUDA graphs capture CUDA streams; the NPU has its own graph type.",
            what="torch.cuda.CUDAGraph is torch.npu.NPUGraph (graph/make_graphed_callables are aliased too); "
                 "where NPU graphs are unavailable that class raises a clear error.",
            remove_when=REMOVE)
def cuda_graph(ctx):
    return _npu(ctx, "NPUGraph")


@cuda.patch("torch.cuda:default_generators", kind="replace", covers=("torch.cuda.default_generators",),
            why="code seeds or snapshots torch.cuda.default_generators directly.",
            what="the NPU's default generators.", remove_when=REMOVE)
def default_generators(ctx):
    return _npu(ctx, "default_generators")


@cuda.patch("torch.cuda:nvtx", kind="replace", fidelity="neutral", covers=("torch.cuda.nvtx",),
            why="nvtx ranges annotate CUDA profiles; NVTX does not exist on the NPU.",
            what="range_push/range_pop/range_start/range_end/mark/range go to torch.npu.mstx when it exists, "
                 "otherwise they are recorded no-ops (reported as fallbacks).",
            remove_when=REMOVE)
def nvtx(ctx):
    import contextlib

    import torch

    try:
        mstx = torch.npu.mstx
    except Exception:  # absent, or "not emulated" on the sim backend
        mstx = None
    report = ctx.report
    shim = types.ModuleType("torch.cuda.nvtx", "NVTX calls routed to mstx or recorded (ascend_shim)")
    depth = []

    def _call(name, *args):
        fn = getattr(mstx, name, None) if mstx is not None else None
        if fn is not None:
            return fn(*args)
        report.fallback(f"torch.cuda.nvtx.{name}", "no mstx here: recorded no-op")
        return None

    def range_push(msg):
        depth.append(msg)
        _call("range_push", msg)
        return len(depth) - 1

    def range_pop():
        _call("range_pop")
        return len(depth) - 1 if depth and depth.pop() is not None else -1

    shim.range_push, shim.range_pop = range_push, range_pop
    shim.range_start = lambda msg: _call("range_start", msg) or 0
    shim.range_end = lambda range_id: _call("range_end", range_id)
    shim.mark = lambda msg: _call("mark", msg)

    @contextlib.contextmanager
    def range(msg, *args, **kwargs):
        range_push(msg.format(*args, **kwargs))
        try:
            yield
        finally:
            range_pop()

    shim.range = range
    return shim


@functools.lru_cache(maxsize=None)  # one per name for the process: a class made per activation would leak
def _unsupported_object(name, feature, report, patch_id):
    from ascend_shim.errors import UnsupportedOnNPUError

    advice = "Remove this call or guard it; ascend_shim cannot emulate it on Ascend."

    def fail(*args, **kwargs):
        report.unsupported(f"torch.cuda.{name}", feature)
        raise UnsupportedOnNPUError(f"torch.cuda.{name} ({feature})", patch_id, advice)

    class _Unsupported(types.ModuleType):
        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            report.unsupported(f"torch.cuda.{name}.{attr}", feature)
            raise UnsupportedOnNPUError(f"torch.cuda.{name}.{attr} ({feature})", patch_id, advice)

        def __call__(self, *args, **kwargs):
            return fail()

    return _Unsupported(f"torch.cuda.{name}", f"unsupported on Ascend NPU: {feature}")


for _name, _feature in list(UNSUPPORTED.items()) + [(s, "CUDA typed storages") for s in STORAGES]:
    cuda.patch(f"torch.cuda:{_name}", kind="replace", fidelity="unsupported", covers=(f"torch.cuda.{_name}",),
               why=f"{_feature} has no NPU equivalent.",
               what=f"using torch.cuda.{_name} raises UnsupportedOnNPUError naming it (and is reported) instead of "
                    "a CUDA error deep inside.",
               remove_when="an NPU equivalent exists")(
        lambda ctx, _name=_name, _feature=_feature: _unsupported_object(_name, _feature, ctx.report,
                                                                        ctx.patch.id))

for _name, _value in NEUTRAL.items():
    def _make_neutral(ctx, _name=_name, _value=_value):
        report = ctx.report
        if callable(ctx.original):
            def neutral(*args, **kwargs):
                report.fallback(f"torch.cuda.{_name}", f"neutral answer {_value!r}")
                return type(_value)(_value) if isinstance(_value, list) else _value
            return neutral
        return _value

    cuda.patch(f"torch.cuda:{_name}", kind="replace", fidelity="neutral", covers=(f"torch.cuda.{_name}",),
               why=f"torch.cuda.{_name} describes the CUDA build, which the NPU does not have.",
               what=f"answers {_value!r} (documented neutral value), reported when called.",
               remove_when=REMOVE)(_make_neutral)


@functools.lru_cache(maxsize=None)  # one class per name for the process: a class made per activation would leak
def _legacy_tensor(name, dtype_name):
    import torch

    dtype = getattr(torch, dtype_name)
    cpu_type = getattr(torch, name)

    class _Meta(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, torch.Tensor) and obj.dtype == dtype and obj.device.type == "npu"

        def __call__(cls, *args, **kwargs):
            return cpu_type(*args, **kwargs).to("npu")

    return _Meta(name, (), {"__doc__": f"torch.cuda.{name} on the NPU ({dtype_name}, precision kept)",
                            "dtype": dtype, "is_cuda": True})


for _name, _dtype in LEGACY_TENSORS.items():
    cuda.patch(f"torch.cuda:{_name}", kind="replace", covers=(f"torch.cuda.{_name}",),
               why=f"legacy torch.cuda.{_name}(...) constructors and isinstance checks name CUDA.",
               what=f"builds an npu tensor of dtype {_dtype} (no silent precision change: DoubleTensor stays "
                    "float64); isinstance checks dtype and npu device.",
               remove_when=REMOVE)(lambda ctx, _name=_name, _dtype=_dtype: _legacy_tensor(_name, _dtype))

def _npu_memory(ctx, name):
    """``torch.npu.memory.<name>``, or skip this patch (reported) where the backend lacks it."""
    import torch

    return ctx.need(torch.npu.memory, name, "torch.npu.memory")


for _name in ("_record_memory_history", "_snapshot", "_dump_snapshot"):
    cuda.patch(f"torch.cuda.memory:{_name}", kind="replace", covers=(f"torch.cuda.memory.{_name}",),
               why=f"torch.cuda.memory.{_name} (memory-history snapshots) talks to the CUDA caching allocator.",
               what=f"torch.cuda.memory.{_name} is torch.npu.memory.{_name} (the NPU allocator's snapshot).",
               remove_when=REMOVE)(lambda ctx, _name=_name: _npu_memory(ctx, _name))


def _npu_type_name(value):
    """"torch.npu.HalfTensor" for "torch.cuda.HalfTensor" or the torch.cuda.HalfTensor class; else None."""
    if isinstance(value, str):
        prefix, _, name = value.rpartition(".")
        return f"torch.npu.{name}" if prefix == "torch.cuda" and name in LEGACY_TENSORS else None
    name = getattr(value, "__name__", None)
    if name in LEGACY_TENSORS and getattr(value, "is_cuda", False) is True and isinstance(value, type):
        return f"torch.npu.{name}"
    return None


@cuda.patch("torch:Tensor.type", covers=("device-compare:tensor-type",),
            why="x.type('torch.cuda.HalfTensor') and x.type(torch.cuda.HalfTensor) convert to a CUDA tensor type; "
                "CUDA code tells tensors apart by x.type() == 'torch.cuda.FloatTensor' (megatron-core's "
                "optimizers: param.type() in ['torch.cuda.FloatTensor', ...]).",
            what="the CUDA type (string or class) becomes the NPU's (torch.npu.HalfTensor): same dtype, on the NPU; "
                 "other arguments pass through. x.type() of an NPU tensor reads 'torch.cuda.FloatTensor' ... to "
                 "CUDA code (the user's and every library that is not NPU-native) and 'torch.npu.FloatTensor' to "
                 "torch and NPU-native libraries (caller-aware, like is_available()).",
            remove_when=REMOVE)
def tensor_type(ctx):
    from ascend_shim.callers import caller_is_native

    original = ctx.original

    @functools.wraps(original)
    def type(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None:
            name = original(self, **kwargs) if kwargs else original(self)
            if name.startswith("torch.npu.") and not caller_is_native(2):
                cuda_name = "torch.cuda." + name[len("torch.npu."):]
                note("Tensor.type", "type", name, cuda_name)
                return cuda_name
            return name
        new = _npu_type_name(dtype)
        if new is not None:
            note("Tensor.type", "dtype", dtype if isinstance(dtype, str) else f"torch.cuda.{dtype.__name__}", new)
            dtype = new
        return original(self, dtype, non_blocking, **kwargs)

    return type


for _name in ("custom_fwd", "custom_bwd"):
    cuda.patch(f"torch.amp:{_name}", covers=(f"torch.cuda.amp.{_name}",),
               why=f"@torch.amp.{_name}(device_type='cuda') (and torch.cuda.amp.{_name}) bind to CUDA autocast.",
               what="device_type 'cuda' -> 'npu'.", remove_when=REMOVE)(
        lambda ctx, _name=_name: translate_device(ctx.original, f"torch.amp.{_name}", "device_type", ints=False))

PATCH_SETS = [cuda]
