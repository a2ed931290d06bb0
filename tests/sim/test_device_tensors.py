"""The emulated npu device as torch code sees it: tensors, the device contract, autograd, modules, optimizers,
serialization, pinned memory, RNG, autocast and gradient scaling.

Every numeric check compares against the same computation on plain CPU.
"""
from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch

from tests.conftest import LAYER

SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"


@pytest.fixture(autouse=True)
def _device(sim):
    torch.npu.set_device(0)
    yield


# ---- tensors and the device ------------------------------------------------------------------------------


def test_npu_tensors_are_plain_tensors_on_an_npu_device():
    x = torch.randn(3, 4, device="npu")
    assert type(x) is torch.Tensor
    assert x.device == torch.device("npu", 0) and x.is_npu and not x.is_cpu
    assert torch.randn(2, device="npu:1").device == torch.device("npu:1")
    assert torch.zeros(2, device=torch.device("npu", 3)).get_device() == 3
    assert torch.device("npu:1").type == "npu" and torch.device("npu:1").index == 1


def test_moves_between_cpu_and_npu_keep_values():
    cpu = torch.randn(5, 6)
    for moved in (cpu.npu(), cpu.npu(2), cpu.to("npu"), cpu.to("npu:1", non_blocking=True), cpu.to(device="npu")):
        assert moved.is_npu
        assert torch.equal(moved.cpu(), cpu)
    assert cpu.npu(2).device.index == 2
    assert torch.equal(cpu.npu().to("npu:3").to("npu:1").cpu(), cpu)
    assert torch.equal(cpu.npu().double().cpu(), cpu.double())


def test_invalid_device_index_is_rejected():
    with pytest.raises(RuntimeError, match="Invalid NPU device index 8"):
        torch.empty(1, device="npu:8")


def test_views_and_in_place_ops_share_storage():
    x = torch.arange(12.0, device="npu").reshape(3, 4)
    col = x[:, 1]
    col.add_(100)  # in-place on a strided view runs through the fallback
    assert x[:, 1].tolist() == [101.0, 105.0, 109.0]
    t = x.t()
    t.mul_(2)
    assert x.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    assert x[0, 0].item() == 0.0 and x[0, 1].item() == 202.0
    windows = x.view(-1).unfold(0, 4, 4)  # a view op implemented by the CPU kernel, mapped back to npu storage
    windows[0].zero_()
    assert x[0].tolist() == [0.0, 0.0, 0.0, 0.0]
    parts = torch.arange(6.0, device="npu").split(2)
    assert [p.untyped_storage().data_ptr() for p in parts] == [parts[0].untyped_storage().data_ptr()] * 3


def test_contiguous_makes_the_contiguous_format_only_as_torch_npu_does():
    """torch_npu's contiguous(): channels-last requests are refused (ERR01007) unless already in that format."""
    cpu = torch.randn(2, 3, 4, 5, requires_grad=True)
    permuted = cpu.npu().permute(0, 2, 1, 3)
    for fmt, tensor in ((torch.channels_last, permuted), (torch.channels_last_3d, permuted.unsqueeze(2))):
        with pytest.raises(RuntimeError, match="NPU contiguous operator only supported contiguous memory format"
                                               "(.|\n)*ERR01007 OPS feature not supported"):
            tensor.contiguous(memory_format=fmt)
    already = torch.empty_strided((2, 3, 4, 5), (60, 1, 15, 3), device="npu")
    assert already.contiguous(memory_format=torch.channels_last) is already
    made = permuted.contiguous()
    assert made.is_contiguous() and torch.equal(made.cpu(), cpu.detach().permute(0, 2, 1, 3))
    made.sum().backward()
    assert torch.equal(cpu.grad, torch.ones_like(cpu))


def test_out_arguments_and_resizing():
    x = torch.randn(4, 5, device="npu")
    out = torch.empty(4, 5, device="npu")
    ptr = out.data_ptr()
    torch.add(x, 1, out=out)
    assert out.data_ptr() == ptr and torch.allclose(out.cpu(), x.cpu() + 1)
    grown = torch.empty(0, device="npu")  # the CPU kernel resizes the output: npu storage takes the new memory
    torch.mul(x, 2, out=grown)
    assert grown.shape == (4, 5) and grown.is_npu and torch.allclose(grown.cpu(), x.cpu() * 2)
    r = torch.zeros(2, device="npu").resize_(10)
    assert r.shape == (10,) and r.is_npu


def test_zero_tensors_and_conjugate_views_cross_the_host_boundary():
    x = torch.randn(4, device="npu", requires_grad=True)
    (grad,) = torch.autograd.grad(torch.sign(x).sum(), x)  # an "efficient zero tensor": no memory behind it
    assert grad.is_npu and grad.cpu().eq(0).all()
    z = torch.randn(3, dtype=torch.complex64)
    zn = z.npu()
    assert zn.conj().is_conj() and torch.equal(zn.conj().cpu(), z.conj())
    assert torch.equal(zn.conj().clone().cpu(), z.conj())
    assert torch.equal(torch._neg_view(zn).cpu(), -z)
    into = torch.empty(3, dtype=torch.complex64, device="npu")
    into.copy_(z.conj())
    assert torch.equal(into.cpu(), z.conj())
    assert torch.equal((zn.conj() @ zn.unsqueeze(1)).cpu(), z.conj() @ z.unsqueeze(1))  # conj-aware kernel


def test_mixing_npu_with_a_cpu_tensor_is_rejected():
    x = torch.randn(3, 4, device="npu")
    with pytest.raises(RuntimeError, match=SAME_DEVICE + ", npu:0 and cpu!"):
        x + torch.randn(3, 4)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.randn(3, 4) * x
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        x @ torch.randn(4, 2)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.cat([x, torch.randn(3, 4)])
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        x.add_(torch.tensor(1.0, device="npu:1"))


def test_mixing_two_npu_indices_is_rejected():
    with pytest.raises(RuntimeError, match=SAME_DEVICE + ", npu:0 and npu:1!"):
        torch.randn(3, device="npu:0") + torch.randn(3, device="npu:1")
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.randn(2, 2, device="npu:2").mm(torch.randn(2, 2, device="npu:3"))


def test_cpu_scalars_and_cpu_indices_are_accepted_as_on_cuda():
    x = torch.arange(5.0, device="npu")
    assert (x * torch.tensor(2.0)).tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert torch.where(x > 1, x, torch.tensor(0.0)).is_npu
    assert x[torch.tensor([0, 4])].tolist() == [0.0, 4.0]
    x[torch.tensor([1])] = 7.0
    assert x[1].item() == 7.0


def test_generators_must_match_the_device():
    with pytest.raises(RuntimeError, match="Expected a 'npu' device type for generator but found 'cpu'"):
        torch.randn(3, device="npu", generator=torch.Generator())
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'npu'"):
        torch.randn(3, generator=torch.Generator(device="npu"))


# ---- autograd, modules, optimizers -----------------------------------------------------------------------


def _pair(module: torch.nn.Module, device="npu"):
    torch.manual_seed(0)
    return module.to(device), copy.deepcopy(module).cpu()


def test_autograd_and_module_to_match_cpu():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    model = copy.deepcopy(ref).to("npu:1")
    assert all(p.device == torch.device("npu:1") for p in model.parameters())
    x = torch.randn(5, 8)
    loss_n = model(x.to("npu:1")).pow(2).mean()
    loss_c = ref(x).pow(2).mean()
    loss_n.backward()
    loss_c.backward()
    assert torch.allclose(loss_n.cpu(), loss_c, atol=1e-6)
    for pn, pc in zip(model.parameters(), ref.parameters(), strict=True):
        assert pn.grad.device == pn.device
        assert torch.allclose(pn.grad.cpu(), pc.grad, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2)),
    lambda: torch.nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2),
    lambda: torch.nn.LSTM(4, 8, num_layers=2, batch_first=True),
    lambda: torch.nn.GRU(4, 8, bidirectional=True),
], ids=["conv2d-bn", "conv-transpose", "lstm", "gru"])
def test_layers_with_device_specific_kernels_match_cpu(make):
    torch.manual_seed(0)
    ref = make()
    model = copy.deepcopy(ref).npu()
    shape = (2, 3, 8, 8) if isinstance(ref, torch.nn.Sequential) else (2, 4, 5, 5) if isinstance(
        ref, torch.nn.ConvTranspose2d) else (2, 5, 4)
    x = torch.randn(*shape)
    xn, xc = x.npu().requires_grad_(), x.clone().requires_grad_()
    yn, yc = model(xn), ref(xc)
    yn, yc = (yn[0], yc[0]) if isinstance(yn, tuple) else (yn, yc)
    yn.pow(2).sum().backward()
    yc.pow(2).sum().backward()
    assert torch.allclose(yn.cpu(), yc, atol=1e-5)
    assert torch.allclose(xn.grad.cpu(), xc.grad, atol=1e-5)
    for pn, pc in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.allclose(pn.grad.cpu(), pc.grad, atol=1e-5)


def test_optimizer_kernel_selection_for_npu():
    from torch.optim.optimizer import _default_to_fused_or_foreach
    from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices, _get_fused_kernels_supported_devices

    assert "npu" in _get_foreach_kernels_supported_devices()
    assert "npu" in _get_fused_kernels_supported_devices()
    params = [torch.zeros(2, device="npu")]
    assert _default_to_fused_or_foreach(params, differentiable=False, use_fused=False) == (False, True)


@pytest.mark.parametrize("kwargs", [{}, {"foreach": True}, {"foreach": False}, {"fused": True}],
                         ids=["default", "foreach", "for-loop", "fused"])
def test_adamw_updates_match_cpu(kwargs):
    torch.manual_seed(0)
    ref = torch.nn.Linear(6, 3)
    model = copy.deepcopy(ref).npu()
    opt_n = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1, **kwargs)
    opt_c = torch.optim.AdamW(ref.parameters(), lr=0.1, weight_decay=0.1)
    x = torch.randn(4, 6)
    for _ in range(3):
        for m, opt, inp in ((model, opt_n, x.npu()), (ref, opt_c, x)):
            opt.zero_grad()
            m(inp).pow(2).sum().backward()
            opt.step()
    for pn, pc in zip(model.parameters(), ref.parameters(), strict=True):
        assert pn.is_npu
        assert torch.allclose(pn.detach().cpu(), pc.detach(), atol=1e-5)
    if kwargs.get("fused"):
        assert opt_n.state[model.weight]["step"].is_npu  # fused keeps its step counter on the device


def test_dropout_draws_from_the_npu_generator():
    x = torch.ones(1000, device="npu")
    cpu_state = torch.get_rng_state()
    torch.npu.manual_seed(7)
    a = torch.nn.functional.dropout(x, 0.5)
    torch.npu.manual_seed(7)
    b = torch.nn.functional.dropout(x, 0.5)
    assert torch.equal(a.cpu(), b.cpu())
    assert set(a.unique().tolist()) == {0.0, 2.0}
    assert torch.equal(torch.get_rng_state(), cpu_state)  # the CPU generator was not used


# ---- serialization ---------------------------------------------------------------------------------------


def _roundtrip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)  # default weights_only=True


def test_save_load_preserves_devices_and_sharing():
    x = torch.randn(4, 4, device="npu:1")
    state = {"x": x, "row": x[1], "model": torch.nn.Linear(3, 2).to("npu:2").state_dict()}
    loaded = _roundtrip(state)
    assert loaded["x"].device == torch.device("npu:1") and torch.equal(loaded["x"].cpu(), x.cpu())
    assert loaded["row"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
    assert all(v.device == torch.device("npu:2") for v in loaded["model"].values())


def test_load_with_map_location():
    x = torch.randn(3, device="npu:2")
    on_cpu = _roundtrip(x, map_location="cpu")
    assert on_cpu.device.type == "cpu" and torch.equal(on_cpu, x.cpu())
    on_npu1 = _roundtrip(x, map_location="npu:1")
    assert on_npu1.device == torch.device("npu:1") and torch.equal(on_npu1.cpu(), x.cpu())
    from_cpu = _roundtrip(torch.arange(3.0), map_location=torch.device("npu", 3))
    assert from_cpu.device == torch.device("npu:3") and from_cpu.tolist() == [0.0, 1.0, 2.0]
    # the rebuild path torch uses for storage-less device tensors also lands on the right npu
    rebuilt = torch._utils._rebuild_device_tensor_from_cpu_tensor(torch.ones(2), torch.float16, "npu:1", True)
    assert rebuilt.device == torch.device("npu:1") and rebuilt.dtype == torch.float16 and rebuilt.requires_grad


def test_untyped_storage_copies_across_devices():
    x = torch.arange(6.0, device="npu:1")
    host = torch.UntypedStorage(x.untyped_storage().nbytes())
    host.copy_(x.untyped_storage())
    assert torch.tensor([], dtype=torch.float32).set_(host).tolist() == x.tolist()
    other = torch.UntypedStorage(host.nbytes(), device="npu:2")
    other.copy_(host)
    assert other.device == torch.device("npu:2")
    assert torch.tensor([], dtype=torch.float32, device="npu:2").set_(other).tolist() == x.tolist()
    assert x.untyped_storage().cpu().device.type == "cpu"
    grown = torch.UntypedStorage(8, device="npu")
    grown.resize_(32)
    assert grown.nbytes() == 32 and grown.device.type == "npu"


# ---- pinned memory ---------------------------------------------------------------------------------------


def test_pin_memory_and_non_blocking_copies():
    pinned = torch.randn(16).pin_memory()
    assert pinned.is_pinned() and not torch.randn(4).is_pinned()
    assert pinned[4:].is_pinned()  # an interior pointer of a pinned block
    moved = pinned.to("npu", non_blocking=True)
    assert torch.equal(moved.cpu(), pinned)
    back = moved.to("cpu", non_blocking=True)
    torch.npu.synchronize()
    assert torch.equal(back, pinned)
    with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
        torch.empty(2, device="npu", pin_memory=True)


def test_dataloader_pins_batches_for_npu():
    dataset = torch.utils.data.TensorDataset(torch.randn(10, 3), torch.arange(10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory_device is deprecated in torch 2.13 (the accelerator is used)
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, pin_memory=True, pin_memory_device="npu")
        batches = list(loader)
    assert len(batches) == 3 and all(t.is_pinned() for b in batches for t in b)
    assert torch.equal(batches[0][0].to("npu", non_blocking=True).cpu(), dataset.tensors[0][:4])


# ---- random numbers --------------------------------------------------------------------------------------


def test_same_seed_reproduces_npu_random_numbers():
    torch.npu.manual_seed(123)
    a = torch.randn(8, device="npu")
    torch.npu.manual_seed(123)
    b = torch.randn(8, device="npu")
    assert torch.equal(a.cpu(), b.cpu())
    torch.manual_seed(5)  # torch.manual_seed seeds every npu device too
    c = torch.randn(8, device="npu:2")
    torch.npu.manual_seed_all(5)
    d = torch.randn(8, device="npu:2")
    assert torch.equal(c.cpu(), d.cpu())
    cpu_state = torch.get_rng_state()
    for draw in (lambda: torch.randint(0, 10, (6,), device="npu"), lambda: torch.randperm(6, device="npu"),
                 lambda: torch.rand(6, device="npu").bernoulli(), lambda: torch.empty(6, device="npu").uniform_()):
        torch.npu.manual_seed(9)
        first = draw()
        torch.npu.manual_seed(9)
        assert first.is_npu and torch.equal(first.cpu(), draw().cpu())
    assert torch.equal(torch.get_rng_state(), cpu_state)  # npu draws never touch the CPU generator


def test_rng_state_is_per_device():
    torch.npu.manual_seed_all(1)
    state = torch.npu.get_rng_state(1)
    assert state.device.type == "cpu" and state.dtype == torch.uint8
    a = torch.rand(4, device="npu:1")
    torch.rand(100, device="npu:0")  # other devices do not advance npu:1
    torch.npu.set_rng_state(state, 1)
    assert torch.equal(torch.rand(4, device="npu:1").cpu(), a.cpu())
    states = torch.npu.get_rng_state_all()
    assert len(states) == torch.npu.device_count()
    torch.npu.set_rng_state_all(states)
    gens = torch.npu.default_generators
    assert len(gens) == torch.npu.device_count() and gens[1].device == torch.device("npu:1")
    gens[1].manual_seed(9)
    assert torch.npu.initial_seed() != 9 or torch.npu.current_device() == 1
    with torch.npu.device(1):
        assert torch.npu.initial_seed() == 9


def test_explicit_npu_generators():
    g = torch.Generator(device="npu:1")
    assert g.device == torch.device("npu:1")
    g.manual_seed(4)
    a = torch.randn(5, device="npu:1", generator=g)
    g.manual_seed(4)
    b = torch.randn(5, device="npu:1", generator=g)
    assert torch.equal(a.cpu(), b.cpu())
    torch.npu.manual_seed_all(4)
    assert torch.equal(torch.randn(5, device="npu:1").cpu(), a.cpu())  # same stream as the default generator


def test_fork_rng_and_checkpoint_use_the_npu_state():
    torch.npu.manual_seed(3)
    with torch.random.fork_rng(devices=[0], device_type="npu"):
        torch.randn(10, device="npu")
    after_fork = torch.randn(3, device="npu")
    torch.npu.manual_seed(3)
    assert torch.equal(after_fork.cpu(), torch.randn(3, device="npu").cpu())
    x = torch.randn(4, 4, device="npu", requires_grad=True)
    y = torch.utils.checkpoint.checkpoint(lambda a: torch.nn.functional.dropout(a * 2, 0.5), x, use_reentrant=False)
    y.sum().backward()
    assert torch.equal(x.grad.cpu() != 0, y.detach().cpu() != 0)  # recomputation replayed the same mask


# ---- autocast and gradient scaling -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_follows_the_cuda_policy(dtype):
    lin = torch.nn.Linear(8, 8).npu()
    x = torch.randn(4, 8, device="npu")
    with torch.autocast(device_type="npu", dtype=dtype):
        y = lin(x)
        assert y.dtype == dtype
        assert (x @ x.t()).dtype == dtype
        assert torch.softmax(y, -1).dtype == torch.float32
        assert torch.nn.functional.layer_norm(y, (8,)).dtype == torch.float32
        assert y.float().exp().dtype == torch.float32 and y.exp().dtype == torch.float32
        assert torch.nn.functional.mse_loss(y, y.detach()).dtype == torch.float32
        assert (y + x).dtype == torch.float32  # not on a list: ordinary type promotion
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            torch.nn.functional.binary_cross_entropy(torch.rand(3, device="npu"), torch.rand(3, device="npu"))
    assert lin(x).dtype == torch.float32
    with torch.npu.amp.autocast(dtype=dtype):
        assert torch.is_autocast_enabled("npu") and torch.npu.is_autocast_enabled()
        assert lin(x).dtype == dtype
    cpu_lin = torch.nn.Linear(8, 8)
    with torch.autocast(device_type="npu", dtype=dtype):
        assert cpu_lin(torch.randn(2, 8)).dtype == torch.float32  # npu autocast leaves CPU ops alone


def test_grad_scaler_scales_unscales_and_skips_overflow_steps():
    scaler = torch.npu.amp.GradScaler(init_scale=1024.0, growth_interval=1)
    assert isinstance(scaler, torch.amp.GradScaler)
    if LAYER == "builtin":  # the builtin facade's is torch's own, for the npu device
        assert scaler._device == "npu"
    else:  # Huawei's subclass, which keeps no _device
        import inspect

        from ascend_shim.sim.real_layer import find_prepared

        here = find_prepared() / "site" / "torch_npu" / "npu" / "amp" / "grad_scaler.py"
        assert inspect.getfile(type(scaler)) == str(here) and scaler._enabled
    lin = torch.nn.Linear(4, 1).npu()
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    x = torch.randn(8, 4, device="npu")
    with torch.autocast("npu", dtype=torch.float16):
        loss = lin(x).float().mean()
    scaled = scaler.scale(loss)
    assert torch.allclose(scaled.cpu(), loss.detach().cpu() * 1024)
    scaled.backward()
    ref_grad = torch.autograd.grad(lin(x).mean(), lin.weight)[0]
    scaler.unscale_(opt)  # _amp_foreach_non_finite_check_and_unscale_ on npu
    assert torch.allclose(lin.weight.grad.cpu(), ref_grad.cpu(), rtol=1e-2, atol=1e-3)
    scaler.step(opt)
    scaler.update()  # _amp_update_scale_ on npu: no inf, growth_interval 1 -> doubled
    assert scaler.get_scale() == 2048.0
    opt.zero_grad()
    before = lin.weight.detach().cpu().clone()
    scaler.scale(lin(x).mean() * float("inf")).backward()
    scaler.step(opt)  # skipped: non-finite gradients
    scaler.update()
    assert torch.equal(lin.weight.detach().cpu(), before)
    assert scaler.get_scale() == 1024.0
