"""Settings that are wrong in a way a parser of their syntax cannot see are refused when the run starts (one
line naming the variable, exit 2), not discovered later as a silently wrong answer or a failure deep in torch;
and the emulated device never claims more memory than the host holds."""
import os
import subprocess
import sys

import pytest

from ascend_shim import config
from ascend_shim.errors import ConfigError

from tests.subprocess_env import shim_free_env


def _env(**extra) -> dict:
    env = shim_free_env()
    env.update(extra)
    return env


def _run(tmp_path, source: str, **env):
    script = tmp_path / "train.py"
    script.write_text(source)
    return subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", str(script)],
                          env=_env(**env), capture_output=True, text=True, timeout=300, cwd=tmp_path)


def _one_error_line(proc, name: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == "" and len(lines) == 1, proc.stderr
    assert name in lines[0] and "Traceback" not in proc.stderr, proc.stderr


# -- ASCEND_SHIM_USER_ROOTS ---------------------------------------------------------------------------------
def test_user_roots_that_do_not_exist_are_refused(tmp_path):
    """A typo made none of the user's files theirs: ``x.device.type == "cuda"`` silently became False."""
    missing = str(tmp_path / "nonexistent")
    with pytest.raises(ConfigError, match="ASCEND_SHIM_USER_ROOTS.*nonexistent"):
        config.Config.from_env({"ASCEND_SHIM_USER_ROOTS": os.pathsep.join([str(tmp_path), missing])})
    a_file = tmp_path / "train.py"
    a_file.write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        config.Config.from_env({"ASCEND_SHIM_USER_ROOTS": str(a_file)})
    roots = config.Config.from_env({"ASCEND_SHIM_USER_ROOTS": str(tmp_path)}).user_roots
    assert roots == (str(tmp_path),)


def test_run_with_a_user_root_typo_is_one_line_and_exit_2(tmp_path):
    proc = _run(tmp_path, "import torch\nprint(torch.zeros(1, device='cuda').device.type == 'cuda')\n",
                ASCEND_SHIM_USER_ROOTS="/nonexistent")
    _one_error_line(proc, "ASCEND_SHIM_USER_ROOTS")


# -- ASCEND_SHIM_COMPILE_BACKEND ----------------------------------------------------------------------------
@pytest.mark.parametrize("raw", ["garbage", "Inductor", "eagre"])
def test_compile_backends_dynamo_does_not_know_are_refused(raw):
    with pytest.raises(ConfigError, match="ASCEND_SHIM_COMPILE_BACKEND"):
        config.check_environment({"ASCEND_SHIM_COMPILE_BACKEND": raw})


def test_every_backend_dynamo_registers_is_accepted():
    import torch._dynamo

    for name in torch._dynamo.list_backends(exclude_tags=()):
        if name.endswith("_TESTING_ONLY"):  # torch's own tests' deliberately broken backends
            continue
        assert config.setting("compile_backend", {"ASCEND_SHIM_COMPILE_BACKEND": name}) == name
    for name in ("none", "npu"):  # no compilation; torch_npu's own backend
        assert config.setting("compile_backend", {"ASCEND_SHIM_COMPILE_BACKEND": name}) == name


def test_torch_npus_backends_are_accepted_before_its_metadata_is_found(monkeypatch):
    """Under ``--simulate`` the settings are checked before the real layer answers for torch_npu's distribution
    (its entry points declare ``npugraph_ex`` and ``npugraphs``)."""
    from ascend_shim import registry

    monkeypatch.setattr(registry, "_entry_points", lambda group: [])
    for name in ("npu", "npugraph_ex", "npugraphs"):
        assert config.setting("compile_backend", {"ASCEND_SHIM_COMPILE_BACKEND": name}) == name


def test_a_backend_a_package_declares_to_dynamo_is_accepted(monkeypatch):
    from importlib.metadata import EntryPoint

    from ascend_shim import registry

    declared = [EntryPoint("mycompiler", "mypkg:backend", "torch_dynamo_backends")]
    monkeypatch.setattr(registry, "_entry_points", lambda group: declared if group == "torch_dynamo_backends" else [])
    assert config.setting("compile_backend", {"ASCEND_SHIM_COMPILE_BACKEND": "mycompiler"}) == "mycompiler"
    with pytest.raises(ConfigError, match="ASCEND_SHIM_COMPILE_BACKEND"):
        config.setting("compile_backend", {"ASCEND_SHIM_COMPILE_BACKEND": "othercompiler"})


def test_run_with_an_unknown_compile_backend_is_one_line_and_exit_2(tmp_path):
    proc = _run(tmp_path, "import torch\nf = torch.compile(lambda x: x + 1)\nprint(f(torch.ones(2)))\n",
                ASCEND_SHIM_COMPILE_BACKEND="garbage")
    _one_error_line(proc, "ASCEND_SHIM_COMPILE_BACKEND")


# -- the emulated device's memory ---------------------------------------------------------------------------
def test_the_emulated_device_never_reports_more_memory_than_the_host_has(tmp_path):
    """A 910B3 has 64 GiB; on a smaller host, batch-size finders "fitted" batches the machine could not hold."""
    proc = _run(tmp_path, "import torch\n"
                          "free, total = torch.cuda.mem_get_info(0)\n"
                          "props = torch.cuda.get_device_properties(0)\n"
                          "print(free, total, props.total_memory, torch.accelerator.get_memory_info(0)[1])\n",
                ASCEND_SHIM_LOG="off")
    assert proc.returncode == 0, proc.stderr
    free, total, props_total, accelerator_total = map(int, proc.stdout.split())
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert total == props_total == accelerator_total == min(64 << 30, host)
    assert free <= total
