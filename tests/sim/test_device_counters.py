"""Counters of the emulated device (ascend_shim.sim.counters) and the zero-copy host boundary
(cpu_alias / npu_alias, the CPU fallback adopting results without copies)."""
from __future__ import annotations

import contextlib
import io

import pytest
import torch

from ascend_shim.sim import counters


@pytest.fixture(autouse=True)
def _device(sim):
    torch.npu.set_device(0)
    yield


@contextlib.contextmanager
def d2h_delta(expected: int):
    before = counters.d2h_syncs()
    yield
    assert counters.d2h_syncs() - before == expected


# ---- device-to-host transfers ----------------------------------------------------------------------------


def test_each_user_visible_transfer_counts_once():
    x = torch.randn(50, 50, device="npu")
    with d2h_delta(1):
        x.sum().item()
    with d2h_delta(1):
        x.tolist()
    with d2h_delta(1):
        x.cpu()
    with d2h_delta(1):
        x.to("cpu", non_blocking=True)
    with d2h_delta(1):
        print(x, file=io.StringIO())  # reads every shown element, but it is one transfer to the user
    with d2h_delta(1):
        repr(x[0, 0])
    with d2h_delta(1):
        bool(x[0, 0] > -100)
    with d2h_delta(2):
        x[0].tolist(), x[1].cpu()


def test_device_work_and_device_copies_do_not_count():
    model = torch.nn.Linear(16, 16).npu()
    opt = torch.optim.AdamW(model.parameters())
    with d2h_delta(0):
        for _ in range(2):
            loss = model(torch.randn(4, 16, device="npu")).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        loss.to("npu:1")
        torch.randn(3).npu()


def test_snapshot_and_reset():
    counters.reset()
    snap = counters.snapshot()
    assert snap["d2h_syncs"] == 0
    assert set(snap["live_bytes"]) == set(snap["peak_bytes"]) == set(range(torch.npu.device_count()))
    base = snap["live_bytes"][5]
    x = torch.empty(4096, dtype=torch.uint8, device="npu:5")
    x.sum().item()
    snap = counters.snapshot()
    assert snap["live_bytes"][5] == base + 4096
    assert snap["peak_bytes"][5] == base + 4096 + 8 and snap["d2h_syncs"] == 1  # + the 0-dim int64 sum
    del x
    counters.reset()
    snap = counters.snapshot()
    assert snap["d2h_syncs"] == 0 and snap["peak_bytes"][5] == snap["live_bytes"][5] == base
    assert counters.d2h_syncs() == 0


# ---- zero-copy host boundary -----------------------------------------------------------------------------


def test_cpu_alias_shares_memory_layout_and_lifetime(sim):
    base = torch.arange(24.0, device="npu:2").reshape(4, 6)
    view = base[1:, ::2]
    alias = sim.cpu_alias(view)
    assert alias.device.type == "cpu" and alias.data_ptr() == view.data_ptr()
    assert (alias.shape, alias.stride(), alias.storage_offset()) == (view.shape, view.stride(), view.storage_offset())
    alias.fill_(-1)  # writes through the alias are npu writes
    assert base[1:, ::2].eq(-1).all().item()
    view.add_(1)
    assert alias.eq(0).all()
    live = torch.npu.memory_allocated(2)
    del base, view
    assert torch.npu.memory_allocated(2) == live  # the alias keeps the npu storage alive
    del alias
    assert torch.npu.memory_allocated(2) == live - 24 * 4
    with pytest.raises(RuntimeError, match="expects an npu tensor"):
        sim.cpu_alias(torch.zeros(1))


def test_cpu_alias_stays_valid_when_the_npu_storage_moves(sim):
    x = torch.arange(4.0, device="npu:4")
    live = torch.npu.memory_allocated(4)
    alias = sim.cpu_alias(x)
    x.resize_(1 << 16)  # reallocates the npu storage; the alias keeps the old block (and its accounting)
    assert torch.npu.memory_allocated(4) == live + (1 << 18)
    assert alias.tolist() == [0.0, 1.0, 2.0, 3.0] and x[:4].tolist() == [0.0, 1.0, 2.0, 3.0]
    del alias
    assert torch.npu.memory_allocated(4) == live - 16 + (1 << 18)


def test_npu_alias_shares_host_memory_and_is_accounted(sim):
    host = torch.zeros(2, 8)
    live = torch.npu.memory_allocated(3)
    alias = sim.npu_alias(host[:, 2:], 3)
    assert alias.device == torch.device("npu:3") and alias.data_ptr() == host[:, 2:].data_ptr()
    assert alias.stride() == (8, 1) and alias.storage_offset() == 2
    assert torch.npu.memory_allocated(3) == live + host.untyped_storage().nbytes()
    alias.add_(5)
    assert host[:, 2:].eq(5).all() and host[:, :2].eq(0).all()
    del alias
    assert torch.npu.memory_allocated(3) == live
    with torch.npu.device(1):
        assert sim.npu_alias(torch.ones(2)).device == torch.device("npu:1")


def test_fallback_writes_in_place_and_adopts_results_without_copies(sim):
    x = torch.randn(256, 256, device="npu")
    ptr = x.data_ptr()
    x.mul_(2).clamp_(-1, 1)
    assert x.data_ptr() == ptr
    live = torch.npu.memory_allocated()
    y = x.exp()  # a fresh CPU result handed back as npu memory
    assert torch.npu.memory_allocated() == live + 256 * 256 * 4
    assert y.untyped_storage().nbytes() == 256 * 256 * 4 and y.is_npu
    assert torch.equal(sim.cpu_alias(y), sim.cpu_alias(x).exp())
    values, indices = x.topk(3, dim=1)  # several outputs
    assert values.is_npu and indices.is_npu and indices.dtype == torch.int64
    real = torch.view_as_real(torch.randn(3, dtype=torch.complex64, device="npu"))
    assert real.is_npu and real._base is not None  # a view op answered by the CPU kernel stays a view
    assert torch.npu.memory_allocated() == live + 256 * 256 * 4 + 256 * 3 * (4 + 8) + 3 * 8
    del y, values, indices, real
    assert torch.npu.memory_allocated() == live
