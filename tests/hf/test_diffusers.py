"""A Stable-Diffusion-style UNet (diffusers' UNet2DConditionModel, cross-attention blocks) trains on the emulated NPU
under the shim as on the CPU, through torch_npu.npu_geglu.

diffusers' GEGLU feed-forward switches to ``torch_npu.npu_geglu(hidden_states, dim=-1, approximate=1)[0]`` whenever
torch_npu is installed (diffusers 0.42.1, the pinned test dependency): on the NPU it computes the tanh GELU where
diffusers' CPU path computes the erf GELU. The reference runs are in-process on the CPU with diffusers' own
(torch_npu-less) path; the emulated run writes CUDA code (``.to("cuda")``) with the shim active.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ascend_shim.sim import counters

diffusers = pytest.importorskip("diffusers")

STEPS = 3
# two resolutions, cross-attention down and up: 4 transformer blocks, each with a GEGLU feed-forward
CONFIG = {"sample_size": 8, "in_channels": 4, "out_channels": 4, "layers_per_block": 1, "block_out_channels": (8, 16),
          "norm_num_groups": 4, "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
          "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"), "cross_attention_dim": 8, "attention_head_dim": 2}


def _train(device):
    """Losses of STEPS AdamW steps of a seeded tiny UNet on seeded batches (made on the host), and its GEGLUs."""
    from diffusers import UNet2DConditionModel
    from diffusers.models.activations import GEGLU

    torch.manual_seed(0)
    model = UNet2DConditionModel(**CONFIG).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS):
        sample, target = torch.randn(2, 4, 8, 8, generator=g), torch.randn(2, 4, 8, 8, generator=g)
        timesteps, context = torch.randint(0, 1000, (2,), generator=g), torch.randn(2, 3, 8, generator=g)
        out = model(sample.to(device), timesteps.to(device), encoder_hidden_states=context.to(device)).sample
        assert out.device.type == ("cpu" if device == "cpu" else "npu")  # "cuda" is the emulated NPU
        loss = F.mse_loss(out.float(), target.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, sum(isinstance(m, GEGLU) for m in model.modules())


def test_unet2d_condition_trains_through_npu_geglu_as_on_the_cpu(clean_shim, monkeypatch):
    from diffusers.models import activations

    assert activations.is_torch_npu_available()  # diffusers found torch_npu: its GEGLU takes the NPU path
    with monkeypatch.context() as cpu_path:  # diffusers without torch_npu: chunk + F.gelu (erf)
        cpu_path.setattr(activations, "is_torch_npu_available", lambda: False)
        cpu, n_geglu = _train("cpu")
        # the same with the tanh GELU npu_geglu computes (approximate=1): the op's math, to float rounding
        cpu_path.setattr(activations.GEGLU, "gelu", lambda self, gate: F.gelu(gate, approximate="tanh"))
        cpu_tanh, _ = _train("cpu")
    assert n_geglu == 4

    clean_shim.activate("sim")
    before = counters.op_calls()
    npu, _ = _train("cuda")
    after = counters.op_calls()
    for op in ("npu_geglu", "npu_geglu_grad"):  # every GEGLU, forward and backward, ran the fused op
        assert after.get(op, 0) - before.get(op, 0) == STEPS * n_geglu, (op, before, after)

    assert npu == pytest.approx(cpu, abs=2e-3), (npu, cpu)  # as the e2e tests hold an op swap: tanh vs erf GELU
    assert npu == pytest.approx(cpu_tanh, abs=1e-5), (npu, cpu_tanh)  # the same math: rounding only
    assert npu != pytest.approx(cpu, abs=1e-5), (npu, cpu)  # the tanh GELU is what ran, not diffusers' erf one
