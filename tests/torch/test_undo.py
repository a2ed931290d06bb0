"""Deactivation restores torch exactly: every public attribute of every module and patched class."""
import sys

import torch
import torch.distributed
import torch.distributed.device_mesh
import torch.nn.parallel
import torch.utils.data

import ascend_shim
from ascend_shim.report import REPORT

CLASSES = [torch.Tensor, torch.nn.Module, torch.utils.data.DataLoader, torch.amp.GradScaler,
           torch.amp.autocast_mode.autocast, torch.distributed.device_mesh.DeviceMesh,
           torch.nn.parallel.DistributedDataParallel]


def snapshot():
    state = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.startswith(("ascend_shim", "shimtest")):
            continue
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for key, value in items:
            state[(name, key)] = value
    for cls in CLASSES:
        for key, value in vars(cls).items():
            state[(cls.__qualname__, key)] = value
    return state


def test_deactivate_restores_every_attribute_identically(clean_shim):
    import ascend_shim.sim

    ascend_shim.sim.install()  # the backend itself stays (torch cannot un-register it); patches must not
    before = snapshot()
    real_is_available = torch.cuda.is_available
    ascend_shim.activate(backend="sim", inherit=False)
    applied = [p for p, info in REPORT.patches.items() if info["status"] == "applied"]
    assert len(applied) > 150, len(applied)
    assert torch.cuda.is_available is not real_is_available and torch.cuda.is_available()
    assert ascend_shim.original("torch.cuda.is_available") is real_is_available
    assert torch.device("cuda").type == "npu"
    ascend_shim.deactivate()
    if ascend_shim.sim.layer() != "real":  # Huawei's torch_npu, once imported, stays (as without the shim)
        # the emulator's own torch_npu layer goes too (import torch_npu fails again); brought back, it is the same
        assert torch.Tensor.type is not before[("Tensor", "type")] and "torch_npu" not in sys.modules
        ascend_shim.sim.install()
    after = snapshot()
    changed = [k for k, v in before.items() if k in after and after[k] is not v]
    assert not changed, changed[:20]
    # modules imported meanwhile are new, and so are their entries in their parents; nothing else may be
    old_modules = {k[0] for k in before}
    added = [k for k, v in after.items() if k not in before and k[0] in old_modules
             and not isinstance(v, type(sys)) and not k[0].startswith(("ascend_shim", "torch_npu"))]
    assert not added, added[:20]
    assert torch.device("cuda").type == "cuda"
    assert torch.cuda.is_available is real_is_available


def test_caller_aware_availability(clean_shim):
    ascend_shim.activate(backend="sim", inherit=False)
    from ascend_shim.callers import native_scope, register_native, unregister_native

    assert torch.cuda.is_available() is True  # this test module is user code
    with native_scope():
        assert torch.cuda.is_available() is False  # the real answer on this CPU build
    # a library registered as NPU-native sees the truth, from any thread
    import threading
    import types

    lib = types.ModuleType("nativelib_demo")
    exec("import torch\ndef ask():\n    return torch.cuda.is_available(), torch.cuda.device_count()\n", lib.__dict__)
    register_native("nativelib_demo")
    try:
        results = []
        threads = [threading.Thread(target=lambda: results.append(lib.ask())) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [(False, 0)] * 4
        assert torch.cuda.device_count() == torch.npu.device_count() > 0
    finally:
        unregister_native("nativelib_demo")
    assert lib.ask()[0] is True


def test_cudnn_answers_are_caller_aware(clean_shim):
    ascend_shim.activate(backend="sim", inherit=False)
    from ascend_shim.callers import native_scope

    assert torch.backends.cudnn.is_available() is True and torch.backends.cudnn.version() >= 90000
    with native_scope():  # torch and NPU-native libraries: the truth of this CPU build
        assert torch.backends.cudnn.is_available() is False and torch.backends.cudnn.version() is None


def test_visible_devices_the_program_sets_are_followed_until_deactivation(clean_shim, monkeypatch):
    import os

    for name in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_SHIM_DERIVED_CUDA_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, "")  # recorded, so whatever this test leaves is undone at its end
        monkeypatch.delenv(name)
    ascend_shim.activate(backend="sim", inherit=False)
    os.environ["CUDA_VISIBLE_DEVICES"] = "3"
    assert os.environ["ASCEND_RT_VISIBLE_DEVICES"] == "3"
    del os.environ["CUDA_VISIBLE_DEVICES"]
    assert "ASCEND_RT_VISIBLE_DEVICES" not in os.environ
    os.environ["ASCEND_RT_VISIBLE_DEVICES"] = "5"  # the user's own choice wins
    os.environ["CUDA_VISIBLE_DEVICES"] = "4"
    assert os.environ["ASCEND_RT_VISIBLE_DEVICES"] == "5"
    del os.environ["ASCEND_RT_VISIBLE_DEVICES"]
    os.environ["CUDA_VISIBLE_DEVICES"] = "1"
    assert os.environ["ASCEND_RT_VISIBLE_DEVICES"] == "1"
    ascend_shim.deactivate()
    assert type(os.environ) is os._Environ and "ASCEND_RT_VISIBLE_DEVICES" not in os.environ
    os.environ["CUDA_VISIBLE_DEVICES"] = "2"  # no longer followed
    assert "ASCEND_RT_VISIBLE_DEVICES" not in os.environ
