"""The stand-in native layer under Huawei's torch_npu Python: absent names look absent (``hasattr``-probed
features switch off), declared but unemulated ones raise naming themselves when called, and the storage helpers
torch_npu's fused optimizers rely on behave as its C++ does."""
import pytest

from .conftest import run_shim

pytestmark = pytest.mark.slow

_PROBE = """
import torch, torch_npu
from torch_npu import _C

print("rpc agent", hasattr(_C, "_rpc_npu_init"))
try:
    _C._graph_pool_handle()
except NotImplementedError as exc:
    print("not emulated:", type(exc).__name__, "_graph_pool_handle" in str(exc))
try:
    torch.ops.npu.npu_gelu(torch.ones(2, device="npu"))
except NotImplementedError as exc:
    print("op not emulated:", "npu_gelu" in str(exc))

src = torch.arange(12, dtype=torch.float32, device="npu")
dst = torch.zeros(4, device="npu")
print("storage size", torch.ops.npu.get_storage_size(dst))
torch.ops.npu.npu_change_data_ptr(dst, src, 4)
print("window", dst.cpu().tolist())
src.add_(100)
print("shared", dst.cpu().tolist())
print("format", torch_npu.get_npu_format(dst), tuple(torch_npu.npu_format_cast(dst, 2).shape))
try:
    torch_npu.npu_format_cast(dst, 29)
except RuntimeError as exc:
    print("NZ refused", "ND" in str(exc))
"""


def test_absent_unemulated_and_storage_helpers(prepared, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    done = run_shim("real", "--log-level", "off", str(probe))
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert "rpc agent False" in out
    assert "not emulated: NotEmulatedError True" in out
    assert "op not emulated: True" in out
    assert "storage size 4" in out
    assert "window [4.0, 5.0, 6.0, 7.0]" in out
    assert "shared [104.0, 105.0, 106.0, 107.0]" in out
    assert "format ND (4,)" in out  # torch_npu wraps the int in its Format enum
    assert "NZ refused True" in out
