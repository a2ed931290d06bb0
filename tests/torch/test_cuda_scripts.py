"""Unmodified CUDA scripts run under `ascend-shim run --simulate`; each asserts its own results."""
import json
import os
import subprocess
import sys

from tests.subprocess_env import shim_free_env


HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "cuda_scripts")


def run_script(name, tmp_path, *extra):
    report = tmp_path / "report.json"
    env = shim_free_env()
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", str(report),
                           *extra, os.path.join(SCRIPTS, name)], capture_output=True, text=True, env=env,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"OK {name[:-3]}" in proc.stdout
    return json.loads(report.read_text()), proc


def sites(report, script):
    path = os.path.join(SCRIPTS, script)
    return {(e["api"], e["line"]) for e in report["events"] if e["file"] == path}


def line_of(script, text):
    with open(os.path.join(SCRIPTS, script)) as fh:
        return next(i for i, line in enumerate(fh, 1) if text in line)


def test_device_strings(tmp_path):
    report, _ = run_script("device_strings.py", tmp_path)
    found = sites(report, "device_strings.py")
    for api, text in [("torch.zeros", "a = "), ("torch.ones", "b = "), ("Tensor.cuda", "c = "),
                      ("Tensor.to", "d = "), ("torch.device", "dev = "), ("Tensor.new_zeros", "f = "),
                      ("torch.full", "h = "), ("Tensor.to", "i = "), ("Module.cuda", "model = nn.Seq")]:
        line = line_of("device_strings.py", text)
        assert (api, line) in found, (api, line, sorted(found))
    assert report["patch_sets"]["torch_devices"]["status"] == "active"


def test_amp_and_grad_scaler(tmp_path):
    report, _ = run_script("amp_scaler.py", tmp_path)
    apis = {e["api"] for e in report["events"]}
    assert {"torch.autocast", "GradScaler"} <= apis, apis


def test_runtime_queries(tmp_path):
    report, _ = run_script("runtime_queries.py", tmp_path)
    unsupported = [e for e in report["events"] if e["category"] == "unsupported"]
    assert any("jiterator" in e["api"] for e in unsupported), unsupported
    assert report["patches"]["torch_cuda.torch.cuda.get_device_capability"]["status"] == "applied"


def test_save_load_values_not_substrings(tmp_path):
    report, _ = run_script("save_load.py", tmp_path)
    assert any(e["api"] == "torch.load" for e in report["events"])


def test_device_type_branches_rewritten(tmp_path):
    report, _ = run_script("device_branches.py", tmp_path)
    rewritten = {e["line"] for e in report["events"] if e["category"] == "rewritten"}
    expected = {line_of("device_branches.py", t) for t in ('x.device.type == "cuda"', ".startswith(", '"cuda" in',
                                                          '!= "cuda"', 'device == "cuda"')}
    assert expected <= rewritten, (expected, rewritten)


def test_allocator_settings_made_before_importing_torch_reach_the_npu_allocator(tmp_path):
    report, _ = run_script("alloc_conf_before_torch.py", tmp_path)
    assert report["patches"]["environment.PYTORCH_ALLOC_CONF"]["status"] == "applied"
    assert any(e["api"] == "PYTORCH_NPU_ALLOC_CONF" for e in report["events"] if e["category"] == "env"), \
        [e for e in report["events"] if e["category"] == "env"]
