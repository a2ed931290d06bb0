"""The ``hccl`` distributed backend of the emulated NPU.

``register()`` does what ``torch_npu/_init/registry/distributed.py::register_distributed_backend_for_npu``
does on a real Ascend machine::

    torch.distributed.Backend.register_backend("hccl", factory, extended_api=True, devices=["npu"])

so ``Backend.default_device_backend_map["npu"] == "hccl"``, ``init_process_group()`` without a
backend (the accelerator is npu), ``init_process_group("hccl")``, ``"cpu:gloo,npu:hccl"`` and
``device_id=torch.device("npu", i)`` resolve as on torch_npu; and it adds
``torch.distributed.is_hccl_available``. The factory returns a C++ ``c10d::Backend``
(``ProcessGroupHCCL``, see ``csrc/hccl/``) whose collectives run ``_impl.HcclSim``: torch_npu 2.13's
ProcessGroupHCCL checks and error texts, then the data movement through an internal gloo group on
CPU views of the npu tensors.

Knobs: ``set_avg_policy("reject" | "sum_div")`` (env ``ASCEND_SHIM_SIM_HCCL_AVG``) chooses between
the older torch_npu contract (ReduceOp.AVG -> "Cannot use ReduceOp.AVG with HCCL") and the one of
torch_npu >= 2.6 (AVG = SUM then divide by the group size); the default is the contract of the torch_npu
line paired with the installed torch.

Environment:
    ASCEND_SHIM_SIM_HCCL_AVG        reject | sum_div (default: per the installed torch's torch_npu line)
    ASCEND_SHIM_SIM_BUILD_DIR       build cache root, shared with the device extension
    ASCEND_SHIM_SIM_BUILD_VERBOSE   1: show the compiler output
    ASCEND_SHIM_SIM_HCCL_NO_ALIAS   1: tests only, copy through the host instead of aliasing npu memory
    GLOO_SOCKET_IFNAME              honoured by the internal gloo group (as by any gloo group)
"""
from __future__ import annotations

import contextlib
import threading

from ._impl import AVG_POLICIES, HcclSim, get_avg_policy, host_view, set_avg_policy

__all__ = [
    "register",
    "is_registered",
    "is_hccl_available",
    "build",
    "set_avg_policy",
    "get_avg_policy",
    "AVG_POLICIES",
    "ProcessGroupHCCL",
    "Options",
    "host_view",
]

_lock = threading.Lock()
_registered = False


class Options:
    """Stand-in for ``torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options``.

    Accepted as ``init_process_group(..., pg_options=...)``; the emulator keeps the values but has
    no streams or HCCL configuration to apply them to.
    """

    def __init__(self, is_high_priority_stream: bool = False):
        self.is_high_priority_stream = is_high_priority_stream
        self._timeout = None
        self.global_ranks_in_group: list[int] = []
        self.group_id = ""
        self.hccl_config: dict = {}


def build(verbose: bool = False):
    """Compile (first time on a machine) and load the C++ backend; returns its module."""
    import torch.distributed  # noqa: F401  (registers the c10d pybind types the module derives from)

    from .. import _extension

    mod = _extension.load(_extension.HCCL, verbose=verbose)
    if mod.ProcessGroupHCCL.__dict__.get("Options") is not Options:  # not the inherited Backend.Options
        with contextlib.suppress(AttributeError, TypeError):  # a pybind class that refuses it keeps Backend's
            mod.ProcessGroupHCCL.Options = Options
    return mod


def __getattr__(name):
    if name == "ProcessGroupHCCL":  # the C++ class, built on first access
        return build().ProcessGroupHCCL
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _make_factory(device_type: str):
    def _new_process_group_hccl_helper(dist_backend_opts, pg_options):
        """The extended-API factory: torch passes ``_DistributedBackendOptions`` and the user's pg_options."""
        mod = build()
        if pg_options is not None and isinstance(pg_options, Options):
            pg_options._timeout = dist_backend_opts.timeout
            pg_options.global_ranks_in_group = list(dist_backend_opts.global_ranks_in_group)
            pg_options.group_id = dist_backend_opts.group_id
        impl = HcclSim(
            dist_backend_opts.store,
            dist_backend_opts.group_rank,
            dist_backend_opts.group_size,
            dist_backend_opts.timeout,
            device_type=device_type,
            group_name=str(dist_backend_opts.group_id),
        )
        return mod.ProcessGroupHCCL(dist_backend_opts.group_rank, dist_backend_opts.group_size, impl)

    return _new_process_group_hccl_helper


def is_hccl_available() -> bool:
    """``torch_npu.distributed.is_hccl_available``: ``"hccl" in Backend.backend_list``."""
    import torch.distributed as dist

    return "hccl" in dist.Backend.backend_list


def is_registered() -> bool:
    return _registered


def register() -> None:
    """Register the ``hccl`` backend for the ``npu`` device (idempotent)."""
    global _registered
    with _lock:
        if _registered:
            return
        import torch.distributed as dist

        if not dist.is_available():
            raise RuntimeError("torch.distributed is not available in this torch build")
        plugin = dist.Backend._plugins.get("HCCL")
        if plugin is None or getattr(plugin.creator_fn, "__module__", None) != __name__:
            dist.Backend.register_backend("hccl", _make_factory("npu"), extended_api=True, devices=["npu"])
        dist.is_hccl_available = is_hccl_available  # type: ignore[attr-defined]  # torch_npu adds it to torch
        _registered = True


def _register_for_device(name: str, device_type: str) -> None:
    """Tests only: the same backend under another name for another device type (e.g. ``cpu``)."""
    import torch.distributed as dist

    dist.Backend.register_backend(name, _make_factory(device_type), extended_api=True, devices=[device_type])
