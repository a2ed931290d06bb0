"""``torch.multiprocessing`` for npu tensors, in the emulator's own torch_npu layer.

torch_npu replaces torch's tensor and storage reductions: an npu tensor is sent as a handle to its device memory
(``_share_npu_``) and rebuilt by the receiver on the same memory (``_new_shared_npu``), so both processes work on
the same parameters (Hogwild); a bare npu storage refuses to be pickled. Without that, torch's CPU reduction fails
with "_share_fd_: only available on CPU" -- inside the queue's feeder thread, so the receiver waits forever.

This layer installs the same reductions over :mod:`.ipc` (shared host memory), with one difference: where sharing
cannot work (a non-leaf tensor that requires grad, a bare storage, a process forked after it used the device),
the error is not left in the sender's feeder thread, where nobody waits for it: the item is sent as that error,
which the receiver raises when it takes the item, and the sender's log gets a warning.
"""
from __future__ import annotations

import warnings
import weakref

import torch

from . import ipc

_installed: dict = {}
#: (id of the shared CPU storage handle, device index) -> npu storage rebuilt on it in this process
_received: weakref.WeakValueDictionary[tuple, torch.UntypedStorage] = weakref.WeakValueDictionary()


class SharingError(RuntimeError):
    """An npu object that could not be sent to another process; raised by the receiver."""


def raise_sharing_error(message: str):
    raise SharingError(message)


def _deliver_error(what: str, exc: BaseException):
    """Send ``exc`` in place of the object: the receiving process raises it, the sender warns."""
    message = f"{what} could not be sent to another process: {type(exc).__name__}: {exc}"
    warnings.warn(message + " (the receiving process raises this error)", RuntimeWarning, stacklevel=3)
    return raise_sharing_error, (message,)


def _check_not_forked() -> None:
    from . import _extension

    if _extension.load().in_bad_fork():
        raise RuntimeError("Cannot re-initialize NPU in forked subprocess. To use NPU with multiprocessing, you must "
                           "use the 'spawn' start method")


def rebuild_npu_tensor(tensor_cls, size, stride, offset, dtype, device, handle, nbytes, offset_bytes,
                       requires_grad):
    """The receiver's npu tensor on the sender's memory."""
    _check_not_forked()
    key = (id(handle), torch.device(device).index)
    storage = _received.get(key) if handle is not None else None
    if storage is None:
        storage = ipc.new_shared_npu(device, handle, nbytes, offset_bytes)
        if handle is not None:
            _received[key] = storage
    typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True)
    tensor = torch._utils._rebuild_tensor(typed, offset, size, stride)
    if tensor_cls == torch.nn.parameter.Parameter:
        return torch.nn.parameter.Parameter(tensor, requires_grad=requires_grad)
    tensor.requires_grad = requires_grad
    return tensor


def _reduce_npu_tensor(tensor):
    if tensor.requires_grad and not tensor.is_leaf:
        raise RuntimeError("Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does "
                           "not support crossing process boundaries.  If you just want to transfer the data, call "
                           "detach() on the tensor before serializing (e.g., putting it on the queue).")
    torch.utils.hooks.warn_if_has_hooks(tensor)
    device, handle, nbytes, offset_bytes = ipc.share_npu_(tensor.untyped_storage())[:4]
    return rebuild_npu_tensor, (type(tensor), tensor.size(), tensor.stride(), tensor.storage_offset(),
                                tensor.dtype, device, handle, nbytes, offset_bytes, tensor.requires_grad)


def reduce_tensor(tensor):
    """torch's reduction for other tensors; npu tensors go as shared memory (or as the error that prevents it)."""
    if tensor.device.type != "npu" or tensor.is_nested or tensor.layout != torch.strided:
        return _installed["reduce_tensor"](tensor)
    try:
        return _reduce_npu_tensor(tensor)
    except Exception as exc:  # noqa: BLE001 - any failure must reach the receiver, not the feeder thread
        return _deliver_error(f"An npu tensor {tuple(tensor.shape)} {tensor.dtype}", exc)


def reduce_storage(storage):
    if storage.device.type == "npu":
        return _deliver_error("An npu storage", RuntimeError("Cannot pickle NPU storage; try pickling a NPU tensor "
                                                             "instead"))
    return _installed["reduce_storage"](storage)


def _storage_methods():
    """The storage methods torch_npu adds, over :mod:`.ipc`."""
    return {
        (torch.UntypedStorage, "_share_npu_"): lambda self: ipc.share_npu_(self),
        (torch.UntypedStorage, "_new_shared_npu"): ipc.new_shared_npu,
        (torch.UntypedStorage, "_release_ipc_counter_npu"): ipc.release_ipc_counter_npu,
        (torch.TypedStorage, "_share_npu_"): lambda self: ipc.share_npu_(self._untyped_storage),
        (torch.TypedStorage, "_new_shared_npu"): ipc.new_shared_npu,
        (torch.TypedStorage, "_release_ipc_counter_npu"): ipc.release_ipc_counter_npu,
    }


def install() -> None:
    """Install the reductions and the storage methods (idempotent); :func:`uninstall` gives torch's back."""
    from torch.multiprocessing import reductions

    if _installed:
        return
    _installed.update(reduce_tensor=reductions.reduce_tensor, reduce_storage=reductions.reduce_storage)
    for (cls, name), fn in _storage_methods().items():
        _installed[(cls, name)] = cls.__dict__.get(name)
        setattr(cls, name, fn)
    reductions.reduce_tensor, reductions.reduce_storage = reduce_tensor, reduce_storage
    reductions.init_reductions()


def uninstall() -> None:
    from torch.multiprocessing import reductions

    if not _installed:
        return
    reductions.reduce_tensor = _installed.pop("reduce_tensor")
    reductions.reduce_storage = _installed.pop("reduce_storage")
    reductions.init_reductions()
    for (cls, name), original in list(_installed.items()):
        if original is None:
            delattr(cls, name)
        else:
            setattr(cls, name, original)
    _installed.clear()
