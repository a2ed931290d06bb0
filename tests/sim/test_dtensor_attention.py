"""F.scaled_dot_product_attention on npu DTensors, sharded as torch_npu shards attention (batch or heads, else
replicated; plain tensors in the call taken as replicated), against plain attention on the CPU."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from tests.subprocess_env import shim_free_env

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_plain_npu_attention_is_torchs_own_composite():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, requires_grad=True) for _ in range(3))
    with sdpa_kernel(SDPBackend.MATH):  # the composite the emulated NPU runs (it has no fused SDPA kernel)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref.sum().backward()
    nq, nk, nv = (t.detach().to("npu").requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(nq, nk, nv, is_causal=True)
    out.sum().backward()
    assert torch.equal(out.detach().cpu(), ref.detach())
    assert all(torch.equal(a.grad.cpu(), b.grad) for a, b in ((nq, q), (nk, k), (nv, v)))


def test_layouts():
    from torch.distributed.tensor import Replicate, Shard

    from ascend_shim.sim.dtensor_attention import layout, mask_layout

    assert layout([Shard(1), Shard(0)], 4, 0.0) == [Shard(1), Shard(0)]
    assert layout([Shard(2), Replicate()], 4, 0.0) == [Replicate(), Replicate()]
    assert layout([Shard(1)], 4, 0.1) == [Replicate()]  # dropout: replicated only, as torch_npu
    assert layout([Shard(0)], 3, 0.0) == [Replicate()]
    assert mask_layout([Shard(0), Shard(1)], (4, 1, 6, 6)) == [Shard(0), Replicate()]
    assert mask_layout([Shard(1)], (4, 2, 6, 6)) == [Shard(1)]
    assert mask_layout([Shard(1)], (2, 6, 6)) == [Shard(0)]  # broadcast from the right: (N, L, S)
    assert mask_layout([Shard(0), Shard(1)], (6, 6)) == [Replicate(), Replicate()]


@pytest.mark.slow
def test_dtensor_attention_under_torchrun_matches_cpu():
    env = shim_free_env()
    env.update(PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "ascend_shim", "run", "--simulate", "-m", "torch.distributed.run",
           "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
           os.path.join(HERE, "scripts", "dtensor_sdpa.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    assert "ALL_DONE" in proc.stdout, proc.stdout[-4000:]
    checks = re.findall(r"^CHECK (\S+) (\S+)", proc.stdout, flags=re.M)
    assert len(checks) == 7 and all(status == "ok" for _, status in checks), proc.stdout
