"""Sharing npu storages between processes, as torch_npu's native ``_share_npu_`` / ``_new_shared_npu`` do.

On an Ascend device, torch_npu exports an npu allocation through the runtime's IPC and the receiving process maps
the same device memory: writes on either side are seen by both (Hogwild training relies on it). The emulated
device's memory is host memory, so the same semantics are shared host memory: the first time an npu storage is
shared, its bytes move, in place, onto a CPU storage in shared memory (every tensor and view on the storage keeps
working, now on the shared bytes); the handle sent to the other process is that CPU storage, which torch's own CPU
sharing passes (file descriptor or file name, with its reference counting), and the receiver wraps the mapped
memory as an npu storage of the same device. The signatures are torch_npu's, so either torch_npu layer over the
emulated device can call them.
"""
from __future__ import annotations

import weakref

import torch

#: npu storage -> the shared CPU storage it lives in
_shared: weakref.WeakKeyDictionary[torch.UntypedStorage, torch.UntypedStorage] = weakref.WeakKeyDictionary()


def _bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over the whole storage."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (storage.nbytes(),), (1,))


def share_npu_(storage: torch.UntypedStorage):
    """torch_npu's ``_share_npu_``: ``(device, handle, size, offset, ref_counter_handle, ref_counter_offset,
    event_handle, event_sync_required)`` for an npu storage, its memory moved into shared memory on first use."""
    from . import _extension, cpu_alias

    if storage.device.type != "npu":
        raise RuntimeError("_share_npu_: only available on NPU.")
    nbytes = storage.nbytes()
    if nbytes == 0:
        return storage.device, None, 0, 0, None, 0, None, False
    host = _shared.get(storage)
    if host is None:
        _extension.load()  # the native side defines the move
        npu_bytes = _bytes(storage)
        host = torch.UntypedStorage(nbytes)
        host.copy_(cpu_alias(npu_bytes).untyped_storage())
        host.share_memory_()
        torch.ops.ascend_sim_ipc.adopt_host_storage(npu_bytes, _bytes(host))
        _shared[storage] = host
    return storage.device, host, nbytes, 0, None, 0, None, False


def new_shared_npu(device, handle, size, offset, ref_counter_handle=None, ref_counter_offset=0, event_handle=None,
                   event_sync_required=False):
    """torch_npu's ``_new_shared_npu``: the npu storage over a handle made by :func:`share_npu_` in another
    process (the same shared bytes, on the same device)."""
    from . import npu_alias

    device = torch.device(device) if not isinstance(device, int) else torch.device("npu", device)
    if handle is None or size == 0:
        return torch.UntypedStorage(0, device=device)
    host = torch.empty(0, dtype=torch.uint8).set_(handle, offset, (size,), (1,))
    return npu_alias(host, device.index).untyped_storage()


def release_ipc_counter_npu(ref_counter_handle=None, ref_counter_offset=0, *, device=None):
    """torch_npu's ``_release_ipc_counter_npu``: nothing to release, the shared memory is reference-counted by the
    CPU sharing that carries it."""
