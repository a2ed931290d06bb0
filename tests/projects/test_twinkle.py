"""Twinkle under the shim: its NPU platform (not the GPU fallback), cookbook meshes/groups, ring attention's
private flash_attn API. A fixture package (tests/projects/twinkle_like, our own lines) and the real
``twinkle-kit`` from PyPI (installed ``--no-deps`` by the test command, tests/requirements-nodeps.txt)."""
import json
import os
import subprocess
import sys

import pytest

from tests.subprocess_env import shim_free_env

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "twinkle_like")


def run_fixture(*extra):
    env = shim_free_env()
    env["PYTHONPATH"] = FIXTURE
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", *extra,
                           os.path.join(FIXTURE, "run_twinkle.py")],
                          capture_output=True, text=True, env=env, timeout=600, cwd=FIXTURE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_fixture_twinkle_takes_its_npu_branch():
    out = run_fixture()
    assert out == {"gpu_available_to_twinkle": False, "device": "npu:1", "zero_loss_device": "npu",
                   "user_sees_cuda": True}


def test_fixture_without_the_twinkle_set_takes_the_cuda_branch():
    out = run_fixture("--disable", "twinkle")
    assert out["gpu_available_to_twinkle"] is True and out["device"] == "cuda:1"


# -- the real twinkle-kit ----------------------------------------------------------------------------------------
@pytest.fixture
def twinkle(clean_shim):
    try:
        from twinkle.utils import DeviceMesh, Platform  # noqa: F401
        from twinkle.utils.framework import Torch
    except Exception as exc:
        pytest.fail(f"twinkle-kit (tests/requirements-nodeps.txt) not importable: {type(exc).__name__}: {exc}")
    caches = [Torch.is_gpu_available, Torch.is_npu_available, Torch.get_device, Torch.get_current_device]
    for c in caches:
        c.cache_clear()
    yield clean_shim
    clean_shim.deactivate()
    for c in caches:
        c.cache_clear()


def test_real_twinkle_platform_and_devices(twinkle, monkeypatch):
    import shutil

    import numpy as np
    from twinkle.utils import DeviceMesh, Platform
    from twinkle.utils.device_mesh import DeviceGroup
    from twinkle.utils.framework import Torch

    assert shutil.which("npu-smi") is None  # upstream would fall back to GPU here (the emulator has no npu-smi)
    twinkle.activate(backend="sim", inherit=False)
    assert Platform.get_platform().__name__ == "NPU"
    assert Platform.get_platform("GPU").__name__ == "NPU"
    assert (Platform.device_prefix(), Platform.visible_device_env()) == ("npu", "ASCEND_RT_VISIBLE_DEVICES")
    assert Torch.is_gpu_available() is False and Torch.is_npu_available() is True
    assert Torch.get_device(1) == "npu:1"
    mesh = DeviceMesh(device_type="cuda", mesh=np.array([[0, 1], [2, 3]]), mesh_dim_names=("dp", "fsdp"))
    assert mesh.device_type == "npu"
    assert DeviceMesh(mesh=np.array([0, 1]), mesh_dim_names=("dp",)).device_type == "npu"
    assert DeviceGroup(name="actor", ranks=4, device_type="GPU").device_type == "NPU"
    assert DeviceGroup(name="cpu", ranks=1, device_type="CPU").device_type == "CPU"


def test_real_twinkle_without_the_set(twinkle):
    from twinkle.utils import Platform
    from twinkle.utils.framework import Torch

    twinkle.activate(backend="sim", inherit=False, disable=["twinkle"])
    assert Platform.get_platform().__name__ == "GPU"  # the fallback the set exists to avoid
    assert Torch.is_gpu_available() is True and Torch.get_device(0) == "cuda:0"


def test_real_twinkle_ring_attention_private_flash_attn(twinkle):
    """zigzag_ring_attn.forward/backward call flash_attn.flash_attn_interface._flash_attn_varlen_forward/_backward
    by keyword (get_default_args); the provider must serve both, with an lse twinkle can merge."""
    twinkle.activate(backend="sim", inherit=False)
    import flash_attn.flash_attn_interface  # noqa: F401 - the shim's provider
    import torch
    import torch.nn.functional as F
    from twinkle.model.transformers.strategy.sequence_parallel import zigzag_ring_attn as ring

    torch.manual_seed(0)
    lens = [6, 10]
    cu = torch.tensor([0, 6, 16], dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(16, 4, 32, dtype=torch.bfloat16, device="cuda", requires_grad=True) for _ in range(3))
    scale = 32 ** -0.5
    out, lse = ring.forward(q, k, v, True, cu, max(lens), block_seq_len=-1, dropout_p=0.0, softmax_scale=scale,
                            alibi_slopes=None, window_size=(-1, -1))
    assert out.device.type == "npu" and lse.shape[-1] == 16
    ref = []
    for s, e in ((0, 6), (6, 16)):
        ref.append(F.scaled_dot_product_attention(*(t[s:e].float().transpose(0, 1) for t in (q, k, v)),
                                                  is_causal=True, scale=scale).transpose(0, 1))
    ref = torch.cat(ref)
    assert (out.float() - ref).abs().max().item() < 2e-2
    dout = torch.randn_like(out)
    dq, dk, dv = (torch.zeros_like(t) for t in (q, k, v))
    ring.backward(dout, q, k, v, out, lse, True, cu, max(lens), -1, dq, dk, dv, 0.0, scale, None, False, (-1, -1))
    ref.backward(dout.float())
    for got, want in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
        assert (got.float() - want.float()).abs().max().item() < 5e-2
