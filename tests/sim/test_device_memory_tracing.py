"""Memory snapshots of the emulated NPU list device storages only: tensors torch.compile's tracing keeps alive
(fake tensors on the npu device, with symbolic sizes and no data) are not memory."""
from __future__ import annotations

import pickle

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import ascend_shim.sim as sim

sim.install()


def test_a_snapshot_skips_fake_tensors_kept_alive(monkeypatch):
    from ascend_shim.sim import _extension

    monkeypatch.delattr(type(_extension.load()), "live_blocks", raising=False)  # the Python-side walk
    real = torch.ones(1024, device="npu")
    mode = FakeTensorMode(shape_env=ShapeEnv())
    fake = mode.from_tensor(torch.ones(3, 5, device="npu"))
    assert not isinstance(fake.untyped_storage().nbytes(), int)  # symbolic: a traced size, not memory
    segments = torch.npu.memory._snapshot()["segments"]
    assert all(type(s["total_size"]) is int and s["address"] for s in segments)
    assert any(s["address"] == real.data_ptr() for s in segments)
    pickle.dumps(segments)
