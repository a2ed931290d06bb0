"""Unmodified CUDA scripts run under `ascend-shim run --simulate`; each asserts its own results."""
import json
import os
import subprocess
import sys

from tests.subprocess_env import shim_free_env


HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "cuda_scripts")


def run_script(name, tmp_path, *extra, env=None):
    report = tmp_path / "report.json"
    env = {**shim_free_env("CUDA_VISIBLE", "ASCEND_RT"), **(env or {})}
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
    # events, streams, properties and the process list answer as CUDA's
    fallbacks = {e["api"] for e in report["events"] if e["category"] == "fallback"}
    assert "torch.cuda.list_gpu_processes" in fallbacks, fallbacks
    for patch in ("torch.cuda.Event", "torch.cuda.Stream.cuda_stream", "torch.cuda.list_gpu_processes"):
        assert report["patches"][f"torch_cuda.{patch}"]["status"] == "applied", patch


def test_visible_devices_set_by_the_script_before_its_first_cuda_call(tmp_path):
    report, _ = run_script("visible_devices_set_by_script.py", tmp_path)
    env = [e for e in report["events"] if e["category"] == "env" and e["api"] == "ASCEND_RT_VISIBLE_DEVICES"]
    assert any("'1' by the program" in e["detail"] for e in env), env


def test_visible_devices_set_by_the_user_for_the_npu_win_over_the_script(tmp_path):
    run_script("visible_devices_set_by_script.py", tmp_path,
               env={"ASCEND_RT_VISIBLE_DEVICES": "2,3", "EXPECTED_DEVICE_COUNT": "2"})


def test_cuda_half_tensor_as_the_default_tensor_type(tmp_path):
    report, _ = run_script("default_tensor_type.py", tmp_path)
    translated = [e for e in report["events"] if e["api"] == "torch.set_default_tensor_type"]
    assert any("default device npu" in e["detail"] for e in translated), translated


def test_cudnn_and_nccl_gates_answer_as_on_cuda(tmp_path):
    report, _ = run_script("backend_versions.py", tmp_path)
    fallbacks = {e["api"] for e in report["events"] if e["category"] == "fallback"}
    assert {"torch.backends.cudnn.version", "torch.cuda.nccl.version"} <= fallbacks, fallbacks
    unsupported = {e["api"] for e in report["events"] if e["category"] == "unsupported"}
    assert "torch.cuda.nccl.all_reduce" in unsupported, unsupported


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
