"""Ray under the shim: activation reaches every worker of a cluster started on its own (through runtime_env,
merged with the user's), and the emulated NPUs are Ray resources (resources={"NPU": 1} schedules)."""
import os

import pytest
import torch

from .conftest import run_driver

#: an actor that trains a small model the CUDA way and says what it saw
ACTOR = '''
import json, os, sys
import ray
import torch

@ray.remote
class Trainer:
    def train(self):
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(8, 4).cuda(), torch.randn(8, 1).cuda()
        losses = []
        for _ in range(3):
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
            losses.append(loss.item())
        return {"available": torch.cuda.is_available(), "device": str(next(model.parameters()).device),
                "losses": losses, "visible": os.environ.get("ASCEND_RT_VISIBLE_DEVICES"),
                "user_var": os.environ.get("USER_VAR"), "user_hook": os.environ.get("USER_HOOK_RAN"),
                "override": os.environ.get("RAY_OVERRIDE_RESOURCES")}
'''


def cpu_losses():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    losses = []
    for _ in range(3):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# -- fast: what ray.init and the workers get ----------------------------------------------------------------
def test_runtime_env_is_merged_with_the_users_never_replacing_it(clean_shim):
    from ascend_shim.targets.ray import impl as ray_provider

    assert ray_provider.merge_runtime_env({"pip": ["x"]}) == {"pip": ["x"]}  # not active: untouched
    clean_shim.activate("sim")
    user = {"env_vars": {"USER_VAR": "1", "ASCEND_SHIM_LOG": "debug"}, "pip": ["x"]}
    merged = ray_provider.merge_runtime_env(user)
    assert user == {"env_vars": {"USER_VAR": "1", "ASCEND_SHIM_LOG": "debug"}, "pip": ["x"]}  # not mutated
    assert merged["pip"] == ["x"] and merged["env_vars"]["USER_VAR"] == "1"
    assert merged["env_vars"]["ASCEND_SHIM"] == "1" and merged["env_vars"]["ASCEND_SHIM_BACKEND"] == "sim"
    assert merged["env_vars"]["ASCEND_SHIM_LOG"] == "debug"  # the user's value wins
    assert merged["worker_process_setup_hook"] == ray_provider.SETUP_HOOK
    assert ray_provider.merge_runtime_env(None)["worker_process_setup_hook"] == ray_provider.SETUP_HOOK


def test_a_users_setup_hook_runs_after_activation(clean_shim, monkeypatch):
    from ascend_shim.targets.ray import impl as ray_provider

    clean_shim.activate("sim")
    real_activate_worker, calls = ray_provider.activate_worker, []
    monkeypatch.setattr(ray_provider, "activate_worker", lambda: calls.append("shim"))
    hook = ray_provider.merge_runtime_env({"worker_process_setup_hook": lambda: calls.append("user")})
    hook["worker_process_setup_hook"]()
    assert calls == ["shim", "user"]
    # a module path (the only form Ray Jobs accept) travels as a variable and runs after activation
    named = ray_provider.merge_runtime_env({"worker_process_setup_hook": "tests.ray.user_hook.mark"})
    assert named["worker_process_setup_hook"] == ray_provider.SETUP_HOOK
    assert named["env_vars"][ray_provider.USER_HOOK_VAR] == "tests.ray.user_hook.mark"
    monkeypatch.setenv(ray_provider.USER_HOOK_VAR, "tests.ray.user_hook.mark")
    monkeypatch.delenv("USER_HOOK_RAN", raising=False)
    real_activate_worker()
    assert os.environ.get("USER_HOOK_RAN") == "1"


def test_job_submission_carries_the_activation(clean_shim, monkeypatch):
    from ray.job_submission import JobSubmissionClient

    from ascend_shim.targets.ray import impl as ray_provider

    clean_shim.activate("sim")
    sent = {}
    client = object.__new__(JobSubmissionClient)
    client._default_metadata = {}
    monkeypatch.setattr(client, "_upload_working_dir_if_needed", lambda env: None, raising=False)
    monkeypatch.setattr(client, "_upload_py_modules_if_needed", lambda env: None, raising=False)

    def request(method, endpoint, json_data=None, **kw):
        sent.update(json_data)
        raise RuntimeError("stop here")

    monkeypatch.setattr(client, "_do_request", request, raising=False)
    with pytest.raises(RuntimeError, match="stop here"):
        client.submit_job(entrypoint="python -m ascend_shim run job.py",
                          runtime_env={"env_vars": {"USER_VAR": "1"}})
    env = sent["runtime_env"]
    assert env["worker_process_setup_hook"] == ray_provider.SETUP_HOOK
    assert env["env_vars"]["USER_VAR"] == "1" and env["env_vars"]["ASCEND_SHIM"] == "1"


def test_ray_counts_the_emulated_npus_only_under_sim(clean_shim):
    from ray._private.accelerators.npu import NPUAcceleratorManager

    original = NPUAcceleratorManager.__dict__["get_current_node_num_accelerators"]
    clean_shim.activate("sim")
    assert NPUAcceleratorManager.get_current_node_num_accelerators() == torch.npu.device_count() > 0
    assert NPUAcceleratorManager.get_current_node_accelerator_type() == "Ascend910B3"
    clean_shim.deactivate()
    assert NPUAcceleratorManager.__dict__["get_current_node_num_accelerators"] is original


# -- slow: real clusters on 127.0.0.1 -----------------------------------------------------------------------
@pytest.mark.slow
def test_cluster_started_without_the_shim_runs_activated_actors(ray_head, tmp_path):
    address = ray_head(shim=False)
    out, _ = run_driver(tmp_path, ACTOR + '''
def mark():
    os.environ["USER_HOOK_RAN"] = "1"

ray.init(address=sys.argv[1], runtime_env={"env_vars": {"USER_VAR": "kept"}, "worker_process_setup_hook": mark})
print(json.dumps(ray.get(Trainer.remote().train.remote(), timeout=180)))
''', address)
    assert out["available"] is True and out["device"] == "npu:0"
    assert out["losses"] == pytest.approx(cpu_losses(), rel=1e-6)
    assert out["user_var"] == "kept" and out["user_hook"] == "1"  # the user's runtime_env is kept


@pytest.mark.slow
def test_npu_resource_on_a_cluster_started_with_the_shim_and_on_a_local_one(ray_head, tmp_path):
    address = ray_head(shim=True)
    source = ACTOR + '''
ray.init(address=sys.argv[1] if len(sys.argv) > 1 else None, num_cpus=None if len(sys.argv) > 1 else 2)
npus = ray.cluster_resources().get("NPU")
out = ray.get(Trainer.options(resources={"NPU": 1}).remote().train.remote(), timeout=180)
print(json.dumps({"npus": npus, **out}))
'''
    for args in ((address,), ()):  # `ray start --head` with ASCEND_SHIM=1; ray.init() started by the driver
        out, _ = run_driver(tmp_path, source, *args)
        assert out["npus"] == torch.npu.device_count()
        assert out["available"] is True and out["device"] == "npu:0" and out["visible"] is not None
        assert out["override"] is None
        assert out["losses"] == pytest.approx(cpu_losses(), rel=1e-6)


@pytest.mark.slow
def test_a_task_that_holds_a_torch_cuda_function_comes_up_quietly_on_the_real_layer(tmp_path):
    """The task pickles the shim's torch.cuda.synchronize (a wrapper named after torch_npu's) by value: the worker's
    first import is then torch_npu, before torch. The shim's torch patches wait until torch.npu exists (they failed,
    71 of them, each with a warning line in the driver's output)."""
    from ascend_shim.sim.real_layer import find_prepared

    assert find_prepared() is not None, "run `python -m ascend_shim fetch-torch-npu` (the README's test command does)"
    out, proc = run_driver(tmp_path, '''
import json, sys
import ray, torch

sync = torch.cuda.synchronize

@ray.remote
def task():
    sync()
    import torch
    from ascend_shim.report import REPORT
    failed = [pid for pid, info in REPORT.patches.items() if info["status"] == "failed"]
    return {"device": str(torch.ones(1, device="cuda").device), "failed": failed,
            "patched": __import__("ascend_shim").is_patched("torch.cuda.current_device")}

ray.init(num_cpus=1, include_dashboard=False)
print(json.dumps(ray.get(task.remote(), timeout=180)))
''', ASCEND_SHIM_SIM_LAYER="real")
    assert out == {"device": "npu:0", "failed": [], "patched": True}
    assert "failed while applying" not in proc.stderr
