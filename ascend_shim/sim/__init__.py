"""sim: an emulated Ascend NPU on the CPU, faithful to the device contract.

``install()`` makes ``npu`` a real torch device (PrivateUse1, backed by host memory through a small C++
extension), registers ``torch.npu`` and makes ``import torch_npu`` return the emulator
(:mod:`ascend_shim.sim.torch_npu`). npu tensors are plain ``torch.Tensor``; what a real NPU rejects (mixing
devices in one op, unemulated torch_npu APIs) is rejected the same way.

Decisions where the hardware contract leaves room:

* Optimizers: torch 2.13 lists privateuse1 among the foreach and fused devices, and torch_npu registers
  ``_fused_adamw_``/``_fused_adam_`` for NPU, so AdamW default (foreach), ``foreach=True`` and ``fused=True``
  all run on npu; the fused step runs torch's CPU fused kernel on the npu memory (dtype coverage is the CPU
  kernel's, which is wider than torch_npu's NpuFusedAdamW: that one rejects bf16).
* A 0-dim CPU tensor may join any npu op (CUDA allows it only in elementwise ops); host ``indices`` are accepted
  by the indexing ops, as on CUDA.
* Kernels run synchronously, so streams are always idle and events complete when recorded; memory has no
  caching allocator, so reserved == allocated.
* Random numbers: the generator state is torch_npu's Philox (seed, offset) in 16 bytes and every random op
  advances the offset (a multiple of 4); the numbers come from the CPU kernels, seeded per op by a hash of
  (seed, offset), so they are reproducible from the state but are not Huawei's Philox stream.
* CPU and npu tensors are shallow-copy compatible, as torch_npu registers it: ``Module.to`` keeps Parameters
  (tied weights stay tied) and ``param.data = t.to("npu")`` works.

Layout: this package is the device core; two ``torch_npu`` Python layers run over it side by side, the builtin
facade (:mod:`.torch_npu`) and Huawei's package (:mod:`.real_layer`), and what the device has to say goes out as
events (:mod:`.events`). Importing the package does not import torch: the shim reads the real layer's prepared
package before the program imports torch; the device's modules come with :func:`install_device`.

Environment:
    ASCEND_SHIM_SIM_DEVICES   number of emulated devices (default 8)
    ASCEND_RT_VISIBLE_DEVICES which of them this process sees (as on the real runtime)
    ASCEND_SHIM_SIM_BUILD_DIR where the C++ extension is built and cached (see ``_extension``)
"""
from __future__ import annotations

import atexit
import functools
import os
import re
import sys
import threading
import time
from typing import TYPE_CHECKING

from .. import virtual
from . import events

if TYPE_CHECKING:
    import torch

__all__ = ["install", "uninstall", "install_device", "is_installed", "layer", "register_layer", "cpu_alias",
           "npu_alias", "DEVICE_NAME", "CANN_VERSION"]

DEVICE_NAME = "Ascend910B3"
#: the CANN release the emulated machine has (torch_npu 2.13 gates features on CANN >= 8.x / 9.1)
CANN_VERSION = "8.5.0"

_lock = threading.RLock()
_installed = False
_installing = False
_device_installed = False
_other_layer = ""  # a torch_npu Python other than the builtin one that brought the device up (register_layer)


def is_installed() -> bool:
    return _installed


def install() -> None:
    """Make the emulated NPU available with its own ``torch_npu`` layer (the builtin facade); idempotent and
    thread-safe. Nothing to do where Huawei's torch_npu Python (the real layer) has brought the device up.

    Call it before the process's first ``backward()``: torch sizes its autograd device queues once, at the first
    backward, and a device registered later cannot run backward (install() checks this and raises).
    """
    global _installed, _installing
    if _installed:
        return
    with _lock:
        # Re-entry from the same thread happens when install() imports the emulated torch_npu package, whose
        # __init__ calls install() itself.
        if _installed or _installing:
            return
        if layer() == "real":
            return  # Huawei's torch_npu Python already runs over the device in this process; one layer only
        _installing = True
        try:
            install_device()
            _install_builtin_layer()
            _installed = True
        finally:
            _installing = False


def uninstall() -> None:
    """Take the builtin ``torch_npu`` layer away (the shim's deactivation): ``import torch_npu`` and its
    distribution metadata are gone again, ``Tensor.type`` and torch's storage classes are torch's own, and listeners
    hear a ``layer`` event (what cached whether ``torch_npu`` is importable, libraries' NPU probes, is stale). The
    device stays, as after importing torch_npu: torch cannot unregister a PrivateUse1 backend or its ``torch.npu``
    module, and tensors already on the device remain usable. :func:`install` brings the layer back."""
    global _installed
    with _lock:
        if not _installed:
            return
        from . import tensor_types

        virtual.unregister_alias("torch_npu")
        virtual.unregister_distribution("torch_npu")
        tensor_types.uninstall()
        _installed = False
    events.emit("layer", layer="")


def install_device() -> None:
    """The emulated device alone, under whichever ``torch_npu`` Python layer runs over it: the native
    extension loaded, PrivateUse1 named ``npu``, host kernels registered, counters wired (idempotent).

    The builtin layer (:func:`install`) adds the emulator's own ``torch.npu``/``torch_npu``; the real layer
    (:mod:`.real_layer`) lets Huawei's torch_npu package register its own, as it does on hardware.
    """
    global _device_installed
    if _device_installed:
        return
    with _lock:
        if _device_installed:
            return
        from ..config import setting
        from . import _extension, counters, torch_npu_kernels

        count = len(visible_devices(setting("sim_devices")))  # a bad value is a one-line ConfigError first
        native = _extension.load()
        native.configure_device_count(count)
        _name_privateuse1()
        native.register_host_kernels()
        torch_npu_kernels.install()
        counters.set_native_source(_native_snapshot, _native_reset)
        _count_print_as_one_transfer(native)
        atexit.register(_let_autograd_threads_finish)
        _device_installed = True


def layer() -> str:
    """Which ``torch_npu`` Python runs over the emulated device: ``builtin`` (the emulator's own), ``real``
    (Huawei's, enabled by :mod:`.real_layer`) or ``""`` (none yet)."""
    return _other_layer or ("builtin" if _installed else "")


def register_layer(name: str) -> None:
    """Called by a ``torch_npu`` layer other than the builtin one once its native layer is built over the device
    (the real layer: ``"real"``): :func:`layer` answers it from then on, and :func:`install` leaves the device to it
    (torch cannot take a registered device module back)."""
    global _other_layer
    _other_layer = name


def visible_devices(physical: int, environ=None) -> list[int]:
    """The physical devices this process sees, in order: ``ASCEND_RT_VISIBLE_DEVICES`` read as the runtime reads it
    (torch_npu's ``_device_count_ascend_hal``): ids up to the first character that is neither a digit nor a comma,
    up to an empty entry or the first id the machine lacks; ids must ascend, else no device is visible. Unset
    means every device."""
    raw = (os.environ if environ is None else environ).get("ASCEND_RT_VISIBLE_DEVICES")
    if raw is None:
        return list(range(physical))
    seen: list[int] = []
    for entry in re.match(r"[0-9,]*", raw).group(0).split(","):  # type: ignore[union-attr]  # [0-9,]* always matches
        if not entry:
            break
        device = int(entry)
        if seen and device <= seen[-1]:
            return []
        if device >= physical:
            break
        seen.append(device)
    return seen


def torch_base_version() -> str:
    """torch's release without local tags ("2.13.0+cpu" -> "2.13.0"): the torch_npu version paired with it."""
    import torch

    match = re.match(r"\d+(\.\d+)*", torch.__version__)
    return match.group(0) if match else torch.__version__


def _install_builtin_layer() -> None:
    import torch

    _generate_npu_methods()
    from . import reductions, tensor_types
    from .torch_npu import npu as npu_module

    tensor_types.install(npu_module)
    if getattr(torch, "npu", None) is not npu_module:
        torch._register_device_module("npu", npu_module)
    for name, module in list(sys.modules.items()):  # `import torch.npu.amp` must find the same objects
        if name.startswith(npu_module.__name__ + "."):
            sys.modules["torch.npu" + name[len(npu_module.__name__):]] = module

    virtual.register_alias("torch_npu", f"{__name__}.torch_npu")
    virtual.register_distribution("torch_npu", torch_base_version(), "Emulated torch_npu (ascend_shim sim backend)")
    from .torch_npu.npu import utils

    check_autograd_engine(utils)
    _register_hccl()
    reductions.install()
    events.emit("layer", layer="builtin")
    from .op_coverage import install_builtin as _install_op_coverage

    _install_op_coverage()  # which ops the NPU has kernels for: torch_npu's CPU-fallback warning per op


def check_autograd_engine(npu_state) -> None:
    """Fail clearly when the device came up after the process's first backward (see :func:`install`).

    The probe is the emulator's use of the device, not the program's: afterwards the device state is
    uninitialized again (``npu_state._initialized``, the torch_npu layer's flag behind ``torch.npu.is_initialized()``)
    until the program itself makes an npu tensor or asks for the runtime."""
    import torch

    from . import _extension

    native = _extension.load()
    if not native.device_count():  # a process that sees no device (ASCEND_RT_VISIBLE_DEVICES="") has no backward
        return
    # checked again on a later activation: a device the program already uses keeps its state (forgetting it would
    # queue torch.manual_seed for an initialization that never comes again, and clear the program's statistics)
    in_use = bool(getattr(npu_state, "_initialized", False))
    # made in C++, not by a factory: a factory would run torch's once-per-process lazy init of the device (which
    # calls torch_npu's _lazy_init, and is never repeated), and the program's first tensor must be the one that does
    probe = native.npu_alias(torch.ones(1), -1).requires_grad_()
    try:
        probe.sum().backward()
    except RuntimeError as exc:
        raise RuntimeError(
            "ascend_shim.sim.install() ran after the process's first autograd backward(): torch sized its "
            "autograd device queues without the npu device, so npu tensors cannot run backward in this process. "
            "Install the emulator earlier (before any backward), e.g. through `ascend_shim run` or at import."
        ) from exc
    del probe
    if in_use:
        return
    for index in range(native.device_count()):
        native.empty_cache(index)
        native.reset_accumulated(index)
        native.reset_peak(index)
    native.forget_use()
    npu_state._initialized = False


def _name_privateuse1() -> None:
    import torch

    backend = torch._C._get_privateuse1_backend_name()
    if backend != "npu":
        if backend != "privateuseone":
            raise RuntimeError(f"PrivateUse1 is already taken by the {backend!r} backend; the sim NPU needs it")
        torch.utils.rename_privateuse1_backend("npu")


def _generate_npu_methods() -> None:
    """``Tensor.npu``/``is_npu`` and friends, which torch_npu's own registration generates (the real layer's)."""
    import torch

    if not hasattr(torch.Tensor, "is_npu"):
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    _register_python_side()


def _register_python_side() -> None:
    """What torch_npu's backend registration sets in torch besides the device module (idempotent).

    Lazy modules may call ``.npu()`` on uninitialized parameters, and activation checkpointing stashes and
    restores the npu RNG state when no input names a device. (CPU/npu shallow-copy compatibility, which keeps
    Parameters and tied weights through ``Module._apply`` and ``param.data =``, is registered by the C++ side.)
    """
    import torch
    from torch.nn.parameter import UninitializedTensorMixin  # type: ignore[attr-defined]  # not in torch's .pyi
    from torch.utils.checkpoint import DefaultDeviceType

    to_npu = torch.Tensor.npu  # type: ignore[attr-defined]  # added by the backend; torch's types know cuda()
    if to_npu not in UninitializedTensorMixin._allowed_methods:
        UninitializedTensorMixin._allowed_methods.append(to_npu)
    DefaultDeviceType.set_device_type("npu")


def _native_snapshot() -> dict:
    from . import _extension

    native = _extension.load()
    live, peak = {}, {}
    for index in range(native.device_count()):
        stats = native.memory_stats(index)
        live[index], peak[index] = stats["live_bytes"], stats["peak_bytes"]
    return {"d2h_syncs": native.d2h_syncs(), "live_bytes": live, "peak_bytes": peak}


def _native_reset() -> None:
    from . import _extension

    native = _extension.load()
    native.reset_d2h()
    for index in range(native.device_count()):
        native.reset_peak(index)


def _count_print_as_one_transfer(native) -> None:
    """Printing an npu tensor reads it element by element; to the user that is one transfer, so count one."""
    import torch

    original = torch._tensor_str._str
    if getattr(original, "_ascend_shim_sim", False):
        return

    @functools.wraps(original)
    def _str(self, *args, **kwargs):
        if self.device.type != "npu":
            return original(self, *args, **kwargs)
        native.d2h_scope_enter()
        try:
            return original(self, *args, **kwargs)
        finally:
            native.d2h_scope_exit()

    _str._ascend_shim_sim = True  # type: ignore[attr-defined]  # marks the wrapper as ours
    torch._tensor_str._str = _str


def _let_autograd_threads_finish() -> None:
    """Work around a torch race at exit (any device backend, not only this one).

    Each backward stashes a Python object in the graph task's thread-local state. When an autograd device thread
    drops the last reference to that task, it needs the GIL to release the object; if the main thread is
    already finalizing the interpreter, taking the GIL ends the thread with pthread_exit and the process aborts
    ("terminate called without an active exception"). Releasing the GIL briefly before finalization lets such
    a thread finish first.
    """
    time.sleep(0.02)


def _register_hccl() -> None:
    try:
        from . import hccl
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.hccl":
            raise
        return
    hccl.register()


def cpu_alias(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor sharing memory with npu tensor ``t`` (same sizes, strides, storage offset; zero-copy).

    The alias keeps ``t``'s storage alive; writes through either are visible through both.
    """
    from . import _extension

    install_device()
    return _extension.load().cpu_alias(t)


def npu_alias(cpu_t: torch.Tensor, index: int | None = None) -> torch.Tensor:
    """An npu tensor on ``npu:index`` (default: current device) sharing memory with CPU tensor ``cpu_t``.

    The alias keeps ``cpu_t``'s storage alive and counts as live bytes of that device while it exists.
    """
    from . import _extension

    install_device()
    return _extension.load().npu_alias(cpu_t, -1 if index is None else int(index))
