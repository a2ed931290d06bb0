"""What torch_npu registers with PyTorch, and the emulated NPU registers the same way.

* CPU and npu dense tensors are shallow-copy compatible (torch_npu's catch-all
  ``_has_compatible_shallow_copy_type``): ``Module._apply`` keeps each Parameter, so tied weights stay tied across
  ``.to``/``.npu()``/``to_empty``, and ``param.data = t.to("npu")`` (FSDP, FSDP2) works.
* The npu generator is Philox-shaped like NPUGeneratorImpl: a 16-byte (uint64 seed, int64 offset) state, offsets
  in multiples of 4 advanced by every random op, 8-byte (seed-only) states accepted, graph-safe state sharing.
"""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "fsdp2_tied_gpt.py")


def tied_module() -> nn.Module:
    m = nn.Module()
    m.a = nn.Embedding(10, 4)
    m.b = nn.Linear(4, 10, bias=False)
    m.a.weight = m.b.weight
    return m


def assert_tied(m: nn.Module, device_type: str) -> None:
    assert m.a.weight is m.b.weight
    assert len(list(m.parameters())) == 1
    assert m.a.weight.device.type == device_type


def load_tiny_gpt():
    spec = importlib.util.spec_from_file_location("fsdp2_tied_gpt", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------ shallow-copy compatibility
def test_cpu_and_npu_are_shallow_copy_compatible(sim):
    cpu, npu = torch.ones(2), torch.ones(2, device="npu")
    assert torch._has_compatible_shallow_copy_type(cpu, npu)
    assert torch._has_compatible_shallow_copy_type(npu, cpu)
    assert torch._has_compatible_shallow_copy_type(npu, npu)
    # torch's rule stays for everything else: meta is not dense, sparse is not strided
    assert not torch._has_compatible_shallow_copy_type(torch.empty(2, device="meta"), npu)
    assert not torch._has_compatible_shallow_copy_type(cpu.to_sparse(), npu)


@pytest.mark.parametrize("move", ["to", "npu", "to_empty", "half_then_to"])
def test_tied_weights_survive_module_moves(sim, move):
    m = tied_module()
    if move == "to":
        m.to("npu")
    elif move == "npu":
        m.npu()
    elif move == "to_empty":
        m.to_empty(device="npu")
    else:
        m.half().to("npu:1")
    assert_tied(m, "npu")
    m.to("cpu")
    assert_tied(m, "cpu")


def test_meta_to_empty_unties_as_torch_does(sim):
    """From meta, torch itself makes new Parameters (meta is not shallow-copy compatible): same on npu."""
    with torch.device("meta"):
        m = tied_module()
    m.to_empty(device="npu")
    assert m.a.weight is not m.b.weight and m.a.weight.device.type == "npu"


def test_param_data_assignment_across_devices(sim):
    p = nn.Parameter(torch.arange(4.0))
    p.grad = torch.ones(4)
    p.data = p.to("npu")
    assert isinstance(p, nn.Parameter) and p.device == torch.device("npu", 0) and p.requires_grad
    assert p.detach().cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    p.grad.data = p.grad.to("npu")
    assert p.grad.device.type == "npu"
    (p * 2).sum().backward()
    assert p.grad.cpu().tolist() == [3.0] * 4
    p.data = p.data.to("cpu")
    assert p.device.type == "cpu"


def test_tied_weights_under_the_shim(sim, clean_shim):
    clean_shim.activate(backend="sim", inherit=False)
    m = tied_module()
    m.to("cuda")
    assert_tied(m, "npu")
    m2 = tied_module()
    m2.cuda()
    assert_tied(m2, "npu")
    m3 = tied_module()
    m3.to_empty(device="cuda")
    assert_tied(m3, "npu")


def test_tied_gpt_trains_like_cpu_under_the_shim(sim, clean_shim):
    gpt = load_tiny_gpt()

    def run(device):
        torch.manual_seed(0)
        model = gpt.TinyGPT().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        data = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(4):
            idx = torch.randint(0, gpt.VOCAB, (2, gpt.SEQ + 1), generator=data)
            loss = model(idx[:, :-1].to(device), idx[:, 1:].to(device))
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return model, losses

    cpu_model, cpu_losses = run("cpu")
    clean_shim.activate(backend="sim", inherit=False)
    model, losses = run("cuda")
    assert model.wte.weight is model.lm_head.weight and model.wte.weight.device.type == "npu"
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in cpu_model.parameters())
    assert losses == pytest.approx(cpu_losses, rel=1e-5, abs=1e-5)


# ------------------------------------------------------------------------------------------- Philox generator
def seed_and_offset(state: torch.Tensor) -> tuple[int, int]:
    return int(state[:8].view(torch.uint64)), int(state[8:].view(torch.int64))


def test_rng_state_is_sixteen_bytes_seed_then_offset(sim):
    torch.npu.manual_seed(1234)
    state = torch.npu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.numel() == 16
    assert seed_and_offset(state) == (1234, 0)
    assert torch.npu.initial_seed() == 1234


def test_random_ops_advance_the_offset_by_multiples_of_four(sim):
    torch.npu.manual_seed(1)
    offsets = []
    for n in (1, 3, 5, 100):
        torch.rand(n, device="npu")
        offsets.append(torch.npu._get_rng_state_offset())
    assert offsets == sorted(offsets) and len(set(offsets)) == 4
    assert all(o % 4 == 0 for o in offsets)
    assert offsets[0] == 4 and offsets[-1] - offsets[-2] >= 100  # one 32-bit draw per element
    torch.ones(3, device="npu") + 1  # not random: offset unchanged
    assert torch.npu._get_rng_state_offset() == offsets[-1]


def test_state_round_trip_reproduces_numbers(sim):
    torch.npu.manual_seed(7)
    torch.randn(3, device="npu")
    state = torch.npu.get_rng_state()
    a = torch.randn(5, device="npu")
    b = torch.rand(2, 2, device="npu")
    torch.npu.set_rng_state(state)
    assert torch.equal(torch.randn(5, device="npu"), a)
    assert torch.equal(torch.rand(2, 2, device="npu"), b)
    assert not torch.equal(torch.randn(5, device="npu"), a)
    # the same (seed, offset) written by hand is the same state
    seed, offset = seed_and_offset(state)
    torch.npu.manual_seed(seed)
    torch.npu._set_rng_state_offset(offset)
    assert torch.equal(torch.npu.get_rng_state(), state)
    assert torch.equal(torch.randn(5, device="npu"), a)


def test_set_state_contract(sim):
    torch.npu.set_rng_state(torch.tensor(list((99).to_bytes(8, "little")), dtype=torch.uint8))  # seed only
    assert seed_and_offset(torch.npu.get_rng_state()) == (99, 0)
    with pytest.raises(RuntimeError, match="RNG state is wrong size"):
        torch.npu.set_rng_state(torch.zeros(5056, dtype=torch.uint8))
    bad = torch.zeros(16, dtype=torch.uint8)
    bad[8] = 2
    with pytest.raises(RuntimeError, match="offset must be a multiple of 4"):
        torch.npu.set_rng_state(bad)
    with pytest.raises(RuntimeError, match="offset must be a multiple of 4"):
        torch.npu._set_rng_state_offset(6)


def test_generators_per_device_and_explicit(sim):
    torch.npu.manual_seed_all(5)
    torch.rand(4, device="npu:1")
    assert torch.npu._get_rng_state_offset("npu:1") == 4 and torch.npu._get_rng_state_offset(0) == 0
    g = torch.Generator(device="npu")
    g.manual_seed(5)
    x = torch.rand(4, device="npu", generator=g)
    assert g.get_offset() == 4 and g.get_state().numel() == 16
    y = torch.rand(4, device="npu:1", generator=torch.Generator("npu:1").manual_seed(5))
    assert torch.equal(x.cpu(), y.cpu())  # the same state gives the same numbers on every device
    assert torch.npu._get_rng_state_offset(0) == 0  # the default generator was not touched
    clone = g.clone_state()  # an independent copy
    torch.rand(4, device="npu", generator=g)
    assert (clone.initial_seed(), clone.get_offset(), g.get_offset()) == (5, 4, 8)


def test_graphsafe_state_is_shared(sim):
    gen = torch.npu.default_generators[0]
    gen.manual_seed(3)
    saved = gen.graphsafe_get_state()  # shares the state, as NPUGeneratorImpl does
    torch.rand(8, device="npu")
    assert saved.get_offset() == gen.get_offset() == 8
    other = torch.Generator("npu")
    other.manual_seed(11)
    gen.graphsafe_set_state(other)
    assert gen.initial_seed() == 11
    gen.graphsafe_set_state(saved)
    assert gen.initial_seed() == 3 and gen.get_offset() == 8


def test_dropout_is_deterministic_under_a_seed(sim):
    x = torch.ones(64, 64, device="npu")

    def masks():
        torch.manual_seed(42)  # seeds the npu generators too
        return F.dropout(x, 0.5), F.dropout(x, 0.5)

    a1, a2 = masks()
    b1, b2 = masks()
    assert torch.equal(a1, b1) and torch.equal(a2, b2) and not torch.equal(a1, a2)
    kept = float((a1 != 0).float().mean())
    assert 0.4 < kept < 0.6


def test_fork_rng_and_checkpoint_restore_the_device_state(sim):
    torch.npu.manual_seed(8)
    before = torch.npu.get_rng_state()
    with torch.random.fork_rng(devices=[0], device_type="npu"):
        torch.rand(10, device="npu")
    assert torch.equal(torch.npu.get_rng_state(), before)


def test_dtensor_philox_state_accessor(sim):
    """DTensor's OffsetBasedRNGTracker reads and writes seed/offset through this view of the state."""
    from torch.distributed.tensor._random import _PhiloxState

    torch.npu.manual_seed(21)
    torch.rand(6, device="npu")
    state = _PhiloxState(torch.npu.get_rng_state())
    assert int(state.seed) == 21 and int(state.offset) == 8
    state.offset = torch.tensor([1024], dtype=torch.int64)
    torch.npu.set_rng_state(state.state)
    assert torch.npu._get_rng_state_offset() == 1024


def test_rng_through_the_shim(sim, clean_shim):
    clean_shim.activate(backend="sim", inherit=False)
    assert torch.cuda.get_rng_state().numel() == 16
    torch.cuda.manual_seed(3)
    assert torch.cuda.initial_seed() == 3
    state = torch.cuda.get_rng_state()
    a = torch.randn(4, device="cuda")
    torch.cuda.set_rng_state(state)
    assert torch.equal(torch.randn(4, device="cuda"), a)
    assert [s.numel() for s in torch.cuda.get_rng_state_all()] == [16] * torch.cuda.device_count()


# ------------------------------------------------------------------------------------------------ storages
def test_storage_resized_to_nothing_stays_on_its_device(sim):
    """FSDP1 frees a FlatParameter with ``_typed_storage()._resize_(0)`` and then ``set_()``s it onto its shard."""
    flat = nn.Parameter(torch.ones(8, device="npu:1"))
    flat._typed_storage()._resize_(0)
    assert flat.untyped_storage().device == torch.device("npu", 1) and flat.untyped_storage().nbytes() == 0
    shard = torch.arange(4.0, device="npu:1")
    with torch.no_grad():
        flat.set_(shard)
    assert flat.device == torch.device("npu", 1) and flat.detach().cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    flat.untyped_storage().resize_(32)
    assert flat.untyped_storage().device == torch.device("npu", 1)
