"""torch.cuda's names on torch.npu: the npu functions called as torch.cuda's are called (CUDA's keywords, a CUDA
device argument translated), properties with CUDA's fields, nvtx on mstx, and the CUDA-only facilities that raise a
clear error when used."""
from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TYPE_CHECKING

from ascend_shim.targets._shared.device_wrappers import note, translate_device
from ascend_shim.targets.torch_cuda import LEGACY_TENSORS

if TYPE_CHECKING:
    from types import ModuleType

    from ascend_shim.context import PatchContext
    from ascend_shim.report import Report


# torch.cuda arguments some torch_npu releases lack, dropped because they cannot change the NPU's answer
IGNORED_CUDA_ARGUMENTS = {
    ("is_bf16_supported", "including_emulation"): "the NPU computes bf16 natively (torch_npu ignores it where it "
                                                  "takes it)",
}


def npu_attribute(ctx: PatchContext, name: str) -> Any:
    """``torch.npu.<name>``; a name the backend knows but does not implement (the emulator raises
    NotImplementedError for those) becomes a forwarder that raises that clear error when used."""
    import torch

    try:
        return getattr(torch.npu, name)
    except NotImplementedError:
        def not_implemented(*args, **kwargs):
            return getattr(torch.npu, name)  # raises the backend's own explanation

        not_implemented.__name__ = not_implemented.__qualname__ = name
        not_implemented.unavailable = True  # type: ignore[attr-defined]  # read by device_argument_function
        return not_implemented
    except AttributeError:
        return ctx.need(torch.npu, name, "torch.npu")


class NpuDefaultGenerators(Sequence):
    """``torch.cuda.default_generators`` on the NPU: ``torch.npu.default_generators`` as it is when read. torch_npu
    fills that tuple in at the device's first use (``_lazy_init`` rebinds it, as torch does CUDA's), which comes
    after the shim patched ``torch.cuda``: a copy taken then would stay empty (megatron's ``_set_cuda_rng_state``
    then fails with an IndexError)."""

    def __getitem__(self, index):
        import torch

        return torch.npu.default_generators[index]

    def __len__(self) -> int:
        import torch

        return len(torch.npu.default_generators)

    def __iter__(self) -> Iterator:
        import torch

        return iter(torch.npu.default_generators)

    def __repr__(self) -> str:
        import torch

        return repr(torch.npu.default_generators)


def default_generators(ctx: PatchContext) -> Sequence:
    """:class:`NpuDefaultGenerators` where the backend has ``torch.npu.default_generators``."""
    import torch

    ctx.need(torch.npu, "default_generators", "torch.npu")
    return NpuDefaultGenerators()


def cuda_callable(ctx: PatchContext, name: str, fn: Any) -> Any:
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
    call.__signature__ = npu_signature.replace(parameters=[  # type: ignore[attr-defined]
        *(p.replace(name=as_cuda.get(p.name, p.name)) for p in npu_params.values()),
        *(p.replace(kind=p.POSITIONAL_OR_KEYWORD) for p in dropped)])
    return call


def device_argument_function(ctx: PatchContext, name: str, arg: str) -> Any:
    """``torch.npu.<name>`` as ``torch.cuda.<name>``, its device argument ``arg`` translated (a class stays a
    class); a name the backend does not implement raises its clear error when used."""
    fn = npu_attribute(ctx, name)
    if getattr(fn, "unavailable", False):
        return fn
    fn = cuda_callable(ctx, name, fn)
    if isinstance(fn, type):  # stays a class: `torch.cuda.Stream | None` annotations, isinstance checks
        new = translate_device(fn.__new__, f"torch.cuda.{name}", arg, ints=False)
        return type(fn.__name__, (fn,), {"__new__": new, "__module__": fn.__module__,
                                         "__qualname__": fn.__qualname__, "__doc__": fn.__doc__})
    return translate_device(fn, f"torch.cuda.{name}", arg, ints=False)


def capability(ctx: PatchContext) -> tuple[int, int]:
    """The configured CUDA capability (ASCEND_SHIM_CUDA_CAPABILITY) as (major, minor)."""
    major, minor = ctx.config.cuda_capability.split(".")
    return int(major), int(minor)


#: resident threads per multiprocessor where CUDA's table differs from 2048 (CUDA C++ Programming Guide, "Technical
#: Specifications per Compute Capability"); warps are 32 threads and multiprocessors hold 64K 32-bit registers at
#: every capability the shim can be configured to
MAX_THREADS_PER_SM = {(7, 5): 1024, (8, 6): 1536, (8, 9): 1536, (12, 0): 1536, (12, 1): 1536}


class CudaStyleProperties:
    """NPU device properties with the fields CUDA code reads (major, minor, multi_processor_count ...).

    The NPU has no warps, register file or resident-thread limit (torch_npu answers None); CUDA code reads them
    only to size launch grids and occupancy heuristics, where None stops it with a TypeError: they answer the
    limits of the configured capability, so that sizing behaves as on such a GPU. No result depends on them."""

    def __init__(self, npu_props: Any, capability: tuple[int, int]):
        self._npu = npu_props
        self.major, self.minor = capability
        self.name = getattr(npu_props, "name", "Ascend NPU")
        self.total_memory = getattr(npu_props, "total_memory", 0)
        # an Ascend AI core count stands in for the SM count (used for MFU estimates and grid sizing)
        self.multi_processor_count = int(getattr(npu_props, "cube_core_num", 0) or
                                         getattr(npu_props, "multi_processor_count", 0) or 0)
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.warp_size = 32
        self.regs_per_multiprocessor = 65536
        self.max_threads_per_multi_processor = MAX_THREADS_PER_SM.get(capability, 2048)

    def __getattr__(self, name):
        return getattr(self._npu, name)

    def __repr__(self):
        return (f"_CudaStyleNPUProperties(name={self.name!r}, major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count}, uuid={getattr(self._npu, 'uuid', None)})")


def device_properties(ctx: PatchContext) -> Callable:
    """torch.cuda.get_device_properties giving the NPU's properties with CUDA's fields."""
    import torch

    from ascend_shim.devices import translate

    npu_fn, cap = torch.npu.get_device_properties, capability(ctx)

    def get_device_properties(device=None):
        return CudaStyleProperties(npu_fn(translate(device, ints=False) if device is not None else None), cap)

    return get_device_properties


def nvtx_module(ctx: PatchContext) -> types.ModuleType:
    """torch.cuda.nvtx whose calls go to torch.npu.mstx, or are recorded no-ops where there is none."""
    import contextlib

    import torch

    try:
        mstx = torch.npu.mstx
    except Exception:  # absent, or "not emulated" on the sim backend
        mstx = None
    report = ctx.report
    shim: Any = types.ModuleType("torch.cuda.nvtx", "NVTX calls routed to mstx or recorded (ascend_shim)")
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


class _UnsupportedModule(types.ModuleType):
    """A CUDA-only namespace: any name read from it, or calling it, raises UnsupportedOnNPUError (reported)."""

    def __init__(self, name: str, feature: str, report: Report, patch_id: str):
        super().__init__(f"torch.cuda.{name}", f"unsupported on Ascend NPU: {feature}")
        self._shim_unsupported = (name, feature, report, patch_id)

    def _fail(self, api: str):
        from ascend_shim.errors import UnsupportedOnNPUError

        _, feature, report, patch_id = self._shim_unsupported
        report.unsupported(api, feature)
        raise UnsupportedOnNPUError(f"{api} ({feature})", patch_id,
                                    "Remove this call or guard it; ascend_shim cannot emulate it on Ascend.")

    def __getattr__(self, attr):
        if attr.startswith("__") or attr == "_shim_unsupported":
            raise AttributeError(attr)
        return self._fail(f"torch.cuda.{self._shim_unsupported[0]}.{attr}")

    def __call__(self, *args, **kwargs):
        return self._fail(f"torch.cuda.{self._shim_unsupported[0]}")


@functools.cache  # one per name for the process: a module made per activation would leak
def unsupported_object(name: str, feature: str, report: Report, patch_id: str) -> types.ModuleType:
    return _UnsupportedModule(name, feature, report, patch_id)


#: the NCCL release torch.cuda.nccl.version() answers: the one torch 2.4's CUDA 12 wheels (the oldest torch this
#: shim supports) ship, so version gates written for the supported torch range pass and nothing newer is claimed
NCCL_VERSION = (2, 20, 5)


@functools.cache  # one per process, like unsupported_object
def nccl_module(report: Report, patch_id: str, *, report_availability: bool = True) -> types.ModuleType:
    """torch.cuda.nccl: version() answers for HCCL, is_available() is False (no direct NCCL calls on the NPU; the
    answer reported unless ``report_availability`` is off), any other name raises UnsupportedOnNPUError."""
    module: Any = _UnsupportedModule("nccl", "torch.cuda.nccl (direct NCCL calls)", report, patch_id)

    def version() -> tuple[int, int, int]:
        report.fallback("torch.cuda.nccl.version", f"HCCL answers as NCCL {'.'.join(map(str, NCCL_VERSION))}")
        return NCCL_VERSION

    def is_available(tensors) -> bool:
        if report_availability:
            report.fallback("torch.cuda.nccl.is_available", "False: direct NCCL calls have no NPU path")
        return False

    module.version, module.is_available = version, is_available
    return module


def list_gpu_processes(ctx: PatchContext) -> Callable[..., str]:
    """torch.cuda.list_gpu_processes: the device's header line, then why the process list cannot be read here
    (torch itself answers such a line when pynvml is missing)."""
    import torch

    from ascend_shim.devices import translate

    report = ctx.report

    def list_gpu_processes(device=None) -> str:
        index = None if device is None else torch.device(translate(device, ints=True)).index
        report.fallback("torch.cuda.list_gpu_processes", "no process list on the NPU: npu-smi info shows it")
        return (f"GPU:{torch.npu.current_device() if index is None else index}\n"
                "the process list is not available on Ascend NPU (run `npu-smi info`)")

    return list_gpu_processes


@functools.cache  # one class per name for the process: a class made per activation would leak
def legacy_tensor(name: str, dtype_name: str) -> type:
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


def npu_memory(ctx: PatchContext, name: str) -> Any:
    """``torch.npu.memory.<name>``, or skip this patch (reported) where the backend lacks it."""
    import torch

    return ctx.need(torch.npu.memory, name, "torch.npu.memory")


def _npu_type_name(value: Any) -> str | None:
    """"torch.npu.HalfTensor" for "torch.cuda.HalfTensor" or the torch.cuda.HalfTensor class; else None."""
    if isinstance(value, str):
        prefix, _, name = value.rpartition(".")
        return f"torch.npu.{name}" if prefix == "torch.cuda" and name in LEGACY_TENSORS else None
    type_name = getattr(value, "__name__", None)
    if type_name in LEGACY_TENSORS and getattr(value, "is_cuda", False) is True and isinstance(value, type):
        return f"torch.npu.{type_name}"
    return None


def tensor_type(ctx: PatchContext) -> Callable:
    """Tensor.type reading and converting CUDA tensor types as the NPU's, caller-aware."""
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


#: the start of torch_npu's messages for the cases CUDA raises ValueError for
EVENT_TIMING_MESSAGES = ("Both events must be recorded", "Both events must be created with argument 'enable_timing")


@functools.cache  # one class per NPU event class for the process: a class made per activation would leak
def cuda_event_class(npu_event: Any) -> type:
    """torch.cuda.Event: ``npu_event`` whose elapsed_time raises ValueError where CUDA does (torch_npu raises
    RuntimeError); every NPU event passes isinstance checks against it (``stream.record_event()``'s too)."""

    class _CudaEventMeta(type(npu_event)):  # type: ignore[misc]
        def __instancecheck__(cls, obj):
            return isinstance(obj, npu_event)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, npu_event)

    def elapsed_time(self, end_event):
        try:
            return npu_event.elapsed_time(self, end_event)
        except RuntimeError as exc:
            if not str(exc).startswith(EVENT_TIMING_MESSAGES):
                raise
            raise ValueError(str(exc)) from None

    elapsed_time.__doc__ = npu_event.elapsed_time.__doc__
    return _CudaEventMeta(npu_event.__name__, (npu_event,), {
        "elapsed_time": elapsed_time, "__module__": npu_event.__module__, "__qualname__": npu_event.__qualname__,
        "__doc__": npu_event.__doc__})


def cuda_event(ctx: PatchContext) -> type:
    """torch.cuda.Event on the NPU (see :func:`cuda_event_class`)."""
    import torch

    return cuda_event_class(torch.npu.Event)


def cuda_stream(ctx: PatchContext) -> None:
    """NPU streams (torch.cuda.Stream's and current_stream()'s alike) get cuda_stream: the raw handle npu_stream
    gives."""
    import torch

    def cuda_stream(self) -> int:
        return self.npu_stream

    ctx.replace(torch.npu.Stream, "cuda_stream",
                property(cuda_stream, doc="the raw NPU stream handle (torch_npu's npu_stream)"), allow_missing=True)


def set_default_tensor_type(ctx: PatchContext) -> Callable[..., None]:
    """torch.set_default_tensor_type taking CUDA tensor types: their dtype becomes the default dtype and the NPU
    the default device (torch has no NPU tensor type it accepts here); a CPU type afterwards ends that."""
    import torch

    original, report = ctx.original, ctx.report
    on_npu = [False]

    @functools.wraps(original)
    def set_default_tensor_type(t):
        name = _npu_type_name(t)
        if name is None:
            original(t)
            if on_npu[0]:
                torch.set_default_device(None)
                on_npu[0] = False
            return
        cpu_type = getattr(torch, name.rpartition(".")[2])
        original(cpu_type)  # torch's own checks and message: only floating-point types
        torch.set_default_device("npu")
        on_npu[0] = True
        report.translated("torch.set_default_tensor_type",
                          f"{name.replace('npu', 'cuda')} -> default dtype {torch.get_default_dtype()}, "
                          "default device npu")

    return set_default_tensor_type


def is_available(ctx: PatchContext) -> Callable[..., Any]:
    import torch

    from ascend_shim.callers import caller_is_native

    real, npu = ctx.original, torch.npu.is_available

    @functools.wraps(real)
    def is_available():
        return real() if caller_is_native(2) else npu()

    return is_available


def device_count(ctx: PatchContext) -> Callable[..., Any]:
    import torch

    from ascend_shim.callers import caller_is_native

    real, npu = ctx.original, torch.npu.device_count

    @functools.wraps(real)
    def device_count():
        return real() if caller_is_native(2) else npu()

    return device_count


def get_device_capability(ctx: PatchContext) -> Callable[..., Any]:
    cap = capability(ctx)

    def get_device_capability(device=None):
        return cap

    return get_device_capability


def is_tf32_supported(ctx: PatchContext) -> Callable[..., Any]:
    return lambda: True


def cuda_graph(ctx: PatchContext) -> object:
    return npu_attribute(ctx, "NPUGraph")


def nccl(ctx: PatchContext) -> ModuleType:
    return nccl_module(ctx.report, ctx.patch.id)


def alias(ctx: PatchContext, name: str) -> object:
    return cuda_callable(ctx, name, npu_attribute(ctx, name))


def unsupported(ctx: PatchContext, name: str, feature: str) -> ModuleType:
    return unsupported_object(name, feature, ctx.report, ctx.patch.id)


def legacy_tensor_class(ctx: PatchContext, name: str, dtype_name: str) -> type:
    return legacy_tensor(name, dtype_name)


def neutral_answer(ctx: PatchContext, name: str, value: object) -> object:
    """``value`` in place of ``torch.cuda.<name>`` (a function answering it, reported when called)."""
    report = ctx.report
    if callable(ctx.original):
        def neutral(*args, **kwargs):
            report.fallback(f"torch.cuda.{name}", f"neutral answer {value!r}")
            return type(value)(value) if isinstance(value, list) else value
        return neutral
    return value
