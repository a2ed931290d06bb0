"""megatron-core (the PyPI package, installed --no-deps: it needs torch, numpy and packaging only), a CUDA-first
library, run unmodified under ``python -m ascend_shim run --simulate``: tensor parallel over two NPUs with its
own DDP wrapper and distributed optimizer, whose ``param.type() == 'torch.cuda.FloatTensor'`` checks see CUDA
names by the shim's rule. No CPU run exists to compare with (megatron-core's RNG tracker and buffers need a CUDA
torch), so TP=2 is held to TP=1 on one NPU: the same model (CPU-initialised, then split) and data.

The Megatron-LM training package (megatron.training, megatron.legacy) is not on PyPI: the megatron set's patch of
``megatron.legacy.fused_kernels.load`` is checked against a module written as upstream's is.
"""
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.subprocess_env import shim_free_env

pytest.importorskip("megatron.core")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "mcore_tp.py")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, nproc):
    env = shim_free_env()
    out, report = tmp_path / f"tp{nproc}", tmp_path / f"report{nproc}.json"
    launch = ["-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port", str(_free_port())]
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", str(report), *launch,
                           SCRIPT, str(out)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    results = [json.loads((tmp_path / f"{out.name}.rank{r}.json").read_text()) for r in range(nproc)]
    return results, json.loads((tmp_path / f"report{nproc}.rank0.json").read_text())


@pytest.mark.slow
def test_tensor_parallel_with_the_distributed_optimizer_on_two_npus_equals_one(tmp_path):
    tp2, report = _run(tmp_path, 2)
    (tp1,), _ = _run(tmp_path, 1)
    for rank, result in enumerate(tp2):
        assert result["device"] == f"npu:{rank}" and result["optimizer"] == "ChainedOptimizer"
        assert result["losses"] == pytest.approx(tp1["losses"], rel=1e-6, abs=0)
        assert result["float64_min"] == 1.7e9 + 0.125 and result["float64_sum"] == 2 * 1.7e9 + 1
    types = {e["detail"] for e in report["events"] if e["api"] == "Tensor.type"}
    assert "type='torch.npu.FloatTensor' -> 'torch.cuda.FloatTensor'" in types
    assert any(e["detail"].startswith("float64 MIN on hccl") for e in report["events"])
    assert any(n.startswith("libraries treated as CUDA code") and "megatron (" in n for n in report["notes"])


FUSED_KERNELS = '''\
import os
from torch.utils import cpp_extension


def load(args):
    _get_cuda_bare_metal_version(cpp_extension.CUDA_HOME)
    _create_build_dir(os.path.join(os.path.dirname(__file__), "build"))


def _get_cuda_bare_metal_version(cuda_dir):
    return cuda_dir + "/bin/nvcc"   # upstream runs it: a TypeError without a CUDA toolkit


def _create_build_dir(buildpath):
    os.makedirs(buildpath, exist_ok=True)
'''


def test_fused_kernels_load_without_a_cuda_toolkit(tmp_path, monkeypatch, clean_shim):
    from torch.utils import cpp_extension

    from ascend_shim.report import REPORT

    package = tmp_path / "megatron" / "legacy" / "fused_kernels"
    package.mkdir(parents=True)
    (tmp_path / "megatron" / "legacy" / "__init__.py").write_text("")
    (package / "__init__.py").write_text(textwrap.dedent(FUSED_KERNELS))
    monkeypatch.syspath_prepend(str(tmp_path))
    import megatron

    monkeypatch.setattr(megatron, "__path__", [str(tmp_path / "megatron"), *megatron.__path__])
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", None)
    clean_shim.activate("sim")
    try:
        from megatron.legacy import fused_kernels

        assert fused_kernels.load(None) is None and (package / "build").is_dir()
        assert REPORT.patches["megatron.fused_kernels_load"]["status"] == "applied"
    finally:
        for name in [m for m in sys.modules if m.startswith("megatron.legacy")]:
            del sys.modules[name]
