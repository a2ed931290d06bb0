"""The NPU's operator coverage on the emulated device: an operator without an NPU kernel in the paired torch_npu
release runs on the CPU with torch_npu's CAUTION warning, once per operator, and is listed in the migration report
at its call site; operators with NPU kernels, and composites torch decomposes into them, stay silent.

The warning is c10's log line on stderr (fd 2), as torch_npu prints it, hence ``capfd``."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from ascend_shim.report import REPORT
from ascend_shim.sim import op_coverage

CAUTION = ("CAUTION: The operator '{}' is not currently supported on the NPU backend and will fall back to run on "
           "the CPU. This may have performance implications.")


@pytest.fixture
def coverage(sim, capfd):
    """The shipped kernel list, installed afresh (no operator warned yet); stderr captured from here on."""
    op_coverage.uninstall()
    assert op_coverage.install_builtin()
    capfd.readouterr()
    yield op_coverage
    op_coverage.uninstall()
    op_coverage.install_builtin()


def _spd(n=4, device="npu"):
    a = torch.randn(n, n, generator=torch.Generator().manual_seed(0))
    return (a @ a.T + n * torch.eye(n)).to(device)


def _fallback_events(api):
    return [e for e in REPORT.events() if e["category"] == "fallback" and e["api"] == api
            and e["file"] == __file__]


def test_the_shipped_list_is_the_releases():
    kernels, decomposed = op_coverage.shipped("2.13")
    assert len(kernels) > 1000 and len({k.split(".")[0] for k in kernels}) > 600
    for name in ("add.Tensor", "add_.Tensor", "mm", "matmul", "_unique2", "linalg_cholesky", "_fft_r2c",
                 "_embedding_bag", "scaled_dot_product_attention"):
        assert name in kernels, name
    for name in ("unique", "cholesky", "linalg_eigh", "_linalg_eigh", "fft_fft", "embedding_bag",
                 "_sparse_coo_tensor_with_dims_and_tensors", "fmax", "fmax.out"):
        assert name not in kernels, name
    assert set(decomposed) <= set(kernels) and "linalg_cholesky" in decomposed


def test_the_list_ships_with_the_package():
    tomllib = pytest.importorskip("tomllib")
    repo = op_coverage.data_file("2.13").parents[3]
    globs = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "data/*.txt" in globs["ascend_shim.sim"] and op_coverage.data_file("2.13").is_file()


@pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")
def test_an_operator_without_kernel_warns_once_and_runs_on_the_cpu(coverage, capfd):
    a = _spd()
    results = [torch.cholesky(a) for _ in range(3)]
    line = sys._getframe().f_lineno - 1
    err = capfd.readouterr().err
    assert err.count(CAUTION.format("aten::cholesky")) == 1, err
    assert "(function npu_cpu_fallback)" in err
    torch.testing.assert_close(results[-1].cpu(), torch.cholesky(a.cpu()))
    assert results[-1].device.type == "npu"
    assert coverage.fallbacks() == ["aten::cholesky"]
    assert [(e["line"], e["count"]) for e in _fallback_events("aten::cholesky")] == [(line, 1)]


def test_operators_with_kernels_and_their_compositions_stay_silent(coverage, capfd):
    x, y = torch.randn(4, 4, device="npu"), torch.randn(4, 4, device="npu")
    x.add_(1)
    torch.matmul(x, y).softmax(-1).sum().item()
    torch.nn.functional.scaled_dot_product_attention(x[None, None], y[None, None], y[None, None])
    torch.unique(torch.tensor([3, 1, 3], device="npu"))  # torch.unique is _unique2 on the device
    torch.linalg.cholesky(_spd())  # an NPU kernel; the emulator's decomposition reaches linalg_cholesky_ex
    w = torch.nn.Linear(4, 4).to("npu")
    w(x).sum().backward()
    torch.optim.AdamW(w.parameters()).step()
    assert coverage.fallbacks() == []
    assert "CAUTION" not in capfd.readouterr().err


def test_the_backward_of_an_npu_kernel_run_as_a_decomposition_stays_silent(coverage, capfd):
    """weight_norm is one NPU kernel (torch_npu composes it of norm, div and mul, all NPU kernels); the emulator
    runs torch's decomposition, whose backward op _weight_norm_interface_backward has no NPU kernel."""
    reference = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 4))
    layer = copy.deepcopy(reference).to("npu")
    x = torch.randn(2, 4)
    layer(x.to("npu")).sum().backward()
    reference(x).sum().backward()
    for (name, p), q in zip(layer.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), q.grad, msg=name)
    assert coverage.fallbacks() == [] and "CAUTION" not in capfd.readouterr().err


def test_the_operator_reaching_the_device_is_the_one_named(coverage, capfd):
    """fmax is computed by fmax.out on an accelerator; the NPU names what reaches its fallback. Inside the NPU's
    linalg_cholesky kernel linalg_cholesky_ex never runs, but called directly it falls back."""
    x, y = torch.randn(4, device="npu"), torch.randn(4, device="npu")
    torch.testing.assert_close(torch.fmax(x, y).cpu(), torch.fmax(x.cpu(), y.cpu()))
    torch.linalg.cholesky(_spd())
    torch.linalg.cholesky_ex(_spd())
    err = capfd.readouterr().err
    assert CAUTION.format("aten::fmax.out") in err and "'aten::fmax'" not in err
    assert coverage.fallbacks() == ["aten::fmax.out", "aten::linalg_cholesky_ex.L"]
    assert "reached through aten::fmax" in _fallback_events("aten::fmax.out")[0]["detail"]


def test_a_kernel_list_given_by_the_real_layer(coverage, capfd):
    """install_op_coverage takes any list (the real layer reads it from the prepared wheel)."""
    kernels, _ = op_coverage.shipped("2.13")
    op_coverage.install_op_coverage([k for k in kernels if k.split(".")[0] != "mm"], decomposed=[])
    a = torch.randn(3, 3, device="npu")
    torch.mm(a, a)
    torch.mm(a, a)
    assert capfd.readouterr().err.count(CAUTION.format("aten::mm.out")) == 1
    assert op_coverage.fallbacks() == ["aten::mm.out"]


def test_a_backward_operator_is_listed_as_such(coverage, capfd):
    kernels, decomposed = op_coverage.shipped("2.13")
    op_coverage.install_op_coverage([k for k in kernels if not k.startswith("tanh_backward")], decomposed=decomposed)
    x = torch.randn(4, device="npu", requires_grad=True)
    x.tanh().sum().backward()
    assert op_coverage.fallbacks() == ["aten::tanh_backward.grad_input"]  # structured: the .out overload
    events = [e for e in REPORT.events() if e["api"] == "aten::tanh_backward.grad_input"]
    assert events and events[-1]["file"] == "<backward>"


SCRIPT = """\
import torch

a = torch.randn(4, 4).cuda()
p = a @ a.T + 4 * torch.eye(4, device="cuda")
s = (p + 1).matmul(p)
for _ in range(2):
    w, v = torch.linalg.eigh(p)
c = torch.cholesky(p)
print("eigh", (w.cpu() - torch.linalg.eigh(p.cpu())[0]).abs().max().item(), c.device)
"""


def _run(tmp_path, env_extra):
    script = tmp_path / "user_ops.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_SHIM", "TORCH_NPU"))}
    env.update(ASCEND_SHIM_SIM_LAYER="builtin", **env_extra)
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", str(report),
                           str(script)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    return proc, script, report


@pytest.mark.slow
def test_a_dry_run_names_each_operator_at_its_call_site(tmp_path):
    proc, script, report = _run(tmp_path, {})
    assert proc.returncode == 0, proc.stderr
    assert "eigh 0.0 npu:0" in proc.stdout
    for name in ("aten::_linalg_eigh.eigenvalues", "aten::cholesky"):
        assert proc.stderr.count(CAUTION.format(name)) == 1, proc.stderr
    assert proc.stderr.count("CAUTION") == 2
    events = json.loads(report.read_text())["events"]
    fallbacks = {(e["api"], e["file"], e["line"]) for e in events if e["category"] == "fallback"}
    assert fallbacks == {("aten::_linalg_eigh.eigenvalues", str(script), 7), ("aten::cholesky", str(script), 8)}


@pytest.mark.slow
def test_cpu_fallback_disabled_raises_as_torch_npu_does(tmp_path):
    proc, script, report = _run(tmp_path, {"TORCH_NPU_FALLBACK_CPU_DISABLE": "1"})
    assert proc.returncode != 0
    assert ("RuntimeError: The operator 'aten::_linalg_eigh.eigenvalues' would execute its main computation on CPU "
            "through dispatcher backend fallback because no kernel is registered for the NPU PrivateUse1 backend, "
            "but CPU fallback is disabled by TORCH_NPU_FALLBACK_CPU_DISABLE=1.") in proc.stderr
    assert "ERR01007 OPS feature not supported" in proc.stderr and "CAUTION" not in proc.stderr
    events = json.loads(report.read_text())["events"]
    assert [(e["category"], e["line"]) for e in events if e["api"] == "aten::_linalg_eigh.eigenvalues"] == [
        ("unsupported", 7)]


@pytest.mark.slow
def test_the_warning_follows_torch_npus_switches():
    code = textwrap.dedent("""\
        import torch, ascend_shim.sim as sim
        sim.install()
        torch.cholesky(torch.eye(2, device="npu"))
        """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_NPU")}
    for extra, shown in (({}, True), ({"TORCH_NPU_WARNING_DISABLE": "1"}, False), ({"RANK": "1"}, False),
                         ({"RANK": "0"}, True)):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, **extra},
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert ("CAUTION: The operator 'aten::cholesky'" in proc.stderr) is shown, (extra, proc.stderr)
