"""The emulated torch.npu has exactly the paired release's torch_npu.npu.__all__; every name answers hasattr."""
from __future__ import annotations

import inspect

import pytest
import torch

from ascend_shim.sim.errors import NotEmulatedError
from ascend_shim.sim.torch_npu import npu as emulated

from .conftest import builtin_layer_only

pytestmark = builtin_layer_only


def test_all_equals_the_paired_release(paired):
    assert list(emulated.__all__) == paired["npu_all"]


def test_every_name_exists_and_hasattr_never_raises(paired):
    for name in paired["npu_all"]:
        assert hasattr(torch.npu, name), name
        assert getattr(torch.npu, name) is not None, name


def _required_arguments(obj) -> dict:
    """A value for each argument a call of ``obj`` needs (placeholders check the call as the real function)."""
    return {p.name: None for p in inspect.signature(obj).parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def test_each_unemulated_name_raises_when_used_not_when_looked_up(paired):
    names = emulated.unemulated_names()
    assert names and set(names) < set(paired["npu_all"])
    for name in names:
        obj = getattr(torch.npu, name)
        with pytest.raises(NotEmulatedError, match=f"{name} is not emulated by ascend_shim's sim backend"):
            obj(**_required_arguments(obj))


def test_a_placeholder_refuses_a_call_the_real_function_refuses():
    with pytest.raises(TypeError, match="missing a required argument: 'cfg_file'"):
        torch.npu.set_dump()
    with pytest.raises(TypeError, match="unexpected keyword argument 'device'"):
        torch.npu.MemPool(device=0)
    with pytest.raises(NotEmulatedError):
        torch.npu.restart_device(0, rebuild_all_resources=True)


def test_implemented_names_are_not_placeholders():
    names = set(emulated.unemulated_names())
    for name in ("utilization", "mstx", "FloatTensor", "memory_snapshot", "ipc_collect", "set_task_queue_enable",
                 "get_task_queue_enable", "caching_allocator_alloc", "set_deterministic_level", "SyncLaunchStream"):
        assert name not in names
