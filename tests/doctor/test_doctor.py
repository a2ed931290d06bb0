"""``doctor`` against crafted environments: each verdict, the JSON shape, and the exit code."""
import json
from pathlib import Path

import pytest

from ascend_shim import doctor
from ascend_shim.registry import Patch, PatchSet


def run(e, **kw):
    backend, checks = doctor.run_checks(e, **kw)
    return backend, checks, doctor.exit_code(checks)


def named(checks, name):
    hits = [c for c in checks if c.name == name]
    assert hits, f"no check named {name!r} in {[c.name for c in checks]}"
    return hits


def one(checks, name):
    hits = named(checks, name)
    assert len(hits) == 1, hits
    return hits[0]


def _patch(id, target, kind="wrap", covers=(), requires=None, fidelity="exact"):
    return Patch(id=id, target=target, kind=kind, why="w", what="w", remove_when="never: w", factory=lambda c: None,
                 covers=tuple(covers), requires=tuple((requires or {}).items()), fidelity=fidelity)


def test_healthy_npu_host_has_nothing_to_fix(make):
    backend, checks, code = run(make())
    assert backend == "auto" and code == 0
    assert [c for c in checks if c.verdict in ("FAIL", "warn")] == []
    assert one(checks, "torch-npu").message.startswith("torch 2.7.1+cpu / torch_npu 2.7.1: same base version 2.7.1")
    assert one(checks, "cann-version").message.startswith("CANN 8.3.RC1 (from ")
    assert one(checks, "cann-version").message.endswith("x86_64-linux/ascend_toolkit_install.info)")
    assert one(checks, "cann-pairing").verdict == "ok"          # 2.7.1 was released for 8.3.RC1
    assert one(checks, "driver").message.startswith("Ascend driver 24.1.rc1")
    assert one(checks, "devices").message.startswith("4 NPU device node(s): davinci0, davinci1, davinci2, davinci3")
    assert one(checks, "python").verdict == "ok"


@pytest.mark.parametrize("torch_v, npu_v, verdict", [
    ("2.7.1+cpu", "2.7.1.post11", "ok"),      # .postN rebuild on the same torch line
    ("2.7.1", "2.7.1", "ok"),
    ("2.8.0", "2.7.1.post11", "FAIL"),
    ("2.13.0+cpu", "2.14.0", "FAIL"),
])
def test_torch_pairing(make, torch_v, npu_v, verdict):
    _, checks, code = run(make(versions={"torch": torch_v, "torch_npu": npu_v}))
    assert one(checks, "torch-npu").verdict == verdict
    assert code == (1 if verdict == "FAIL" else 0)
    if verdict == "FAIL":
        assert one(checks, "torch-npu").fix.startswith(f"pip install torch=={npu_v[:5]}")


def test_missing_torch_npu_fails_on_npu_but_not_on_the_emulator(make):
    _, checks, code = run(make(versions={"torch_npu": None}))
    c = one(checks, "torch-npu")
    assert (c.verdict, code) == ("FAIL", 1) and "torch-npu==2.7.1" in c.fix
    _, checks, code = run(make(versions={"torch_npu": None}, simulate=True))
    assert one(checks, "torch-npu").verdict == "info" and code == 0


def test_missing_torch_and_cuda_build(make):
    _, checks, code = run(make(versions={"torch": None}))
    assert one(checks, "torch").verdict == "FAIL" and code == 1
    _, checks, _ = run(make(versions={"torch": "2.7.1+cu121"}))
    assert one(checks, "torch-build").verdict == "warn"


@pytest.mark.parametrize("python, npu_v, verdict", [
    ((3, 11, 7), "2.7.1", "ok"),
    ((3, 9, 18), "2.13.0", "FAIL"),     # 2.11-2.13 need 3.10+
    ((3, 14, 0), "2.9.0", "FAIL"),      # 2.9/2.10 stop at 3.13
    ((3, 14, 0), "2.13.0", "ok"),
    ((3, 11, 7), "2.1.0.post17", "info"),   # no record for the line
])
def test_python_version(make, python, npu_v, verdict):
    torch_v = npu_v.split(".post")[0]
    _, checks, _ = run(make(python=python, versions={"torch": torch_v, "torch_npu": npu_v}))
    assert one(checks, "python").verdict == verdict


def test_cann_not_sourced_points_at_set_env(make):
    e = make(unset=("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH", "LD_LIBRARY_PATH"))
    _, checks, code = run(e)
    c = one(checks, "cann-env")
    assert c.verdict == "FAIL" and code == 1
    assert c.fix == f"source {e.root}/usr/local/Ascend/ascend-toolkit/set_env.sh"
    assert "a CANN install exists" in c.message
    assert one(checks, "cann-version").message.startswith("CANN 8.3.RC1")   # still read from the default install


def test_cann_home_missing_and_env_effects(make, tmp_path):
    _, checks, _ = run(make(env={"ASCEND_HOME_PATH": str(tmp_path / "gone"), "ASCEND_TOOLKIT_HOME": ""}))
    assert one(checks, "cann-env").verdict == "FAIL" and "does not exist" in one(checks, "cann-env").message
    _, checks, code = run(make(env={"LD_LIBRARY_PATH": "/usr/lib"}))
    assert one(checks, "cann-libs").verdict == "FAIL" and code == 1
    _, checks, code = run(make(unset=("ASCEND_OPP_PATH",)))
    assert one(checks, "cann-opp").verdict == "warn" and code == 0
    e = make()
    e.env["ASCEND_TOOLKIT_HOME"] = str(tmp_path)
    _, checks, _ = run(e)
    assert [c.verdict for c in named(checks, "cann-env")] == ["ok", "warn"]


def test_cann_version_files(make, tmp_path):
    e = make()
    home = e.env["ASCEND_HOME_PATH"]
    assert doctor.find_cann_version_file(home, "x86_64").endswith("x86_64-linux/ascend_toolkit_install.info")
    assert doctor.find_cann_version_file(home, "aarch64").endswith("x86_64-linux/ascend_toolkit_install.info")
    other = tmp_path / "multiarch"
    for arch in ("aarch64", "x86_64"):
        (other / f"{arch}-linux").mkdir(parents=True)
        (other / f"{arch}-linux" / "ascend_toolkit_install.info").write_text(f"version=8.0.{arch}\n")
    assert doctor.read_cann_version(doctor.find_cann_version_file(str(other), "x86_64")) == "8.0.x86_64"
    assert doctor.read_cann_version(doctor.find_cann_version_file(str(other), "arm64")) == "8.0.aarch64"
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "version.cfg").write_text("# version: 1.0\nruntime_running_version=[7.0.0.5.242:7.0.RC1]\n")
    path = doctor.find_cann_version_file(str(legacy), "x86_64")
    assert path.endswith("version.cfg") and doctor.read_cann_version(path) == "7.0.0.5"
    assert doctor.find_cann_version_file(str(tmp_path), "x86_64") is None


def test_cann_version_unknown_and_pairing(make):
    e = make()
    import os
    import shutil

    shutil.rmtree(os.path.join(e.env["ASCEND_HOME_PATH"], "x86_64-linux"))
    _, checks, code = run(e)
    assert one(checks, "cann-version").verdict == "warn" and code == 0
    _, checks, _ = run(make(versions={"torch": "2.9.0", "torch_npu": "2.9.0.post6"}, cann_version="8.3.RC1"))
    c = one(checks, "cann-pairing")
    assert c.verdict == "warn" and "9.1.0" in c.message
    _, checks, _ = run(make(versions={"torch": "2.14.0", "torch_npu": "2.14.0"}))
    assert one(checks, "cann-pairing").verdict == "info"


def test_driver_and_npu_smi(make):
    _, checks, code = run(make(driver=False, programs=()))
    assert one(checks, "driver").verdict == "FAIL" and code == 1
    assert one(checks, "npu-smi").verdict == "warn"
    assert one(checks, "devices").verdict == "warn"
    _, checks, code = run(make(driver=False, programs=(), simulate=True))
    assert {c.verdict for c in checks if c.name in ("driver", "npu-smi", "devices")} == {"info"}
    assert code == 0


def test_emulator_reports_itself_and_turns_hardware_checks_into_info(make):
    e = make(cann=False, driver=False, versions={"torch_npu": None}, env={}, programs=("c++", "ninja"),
             simulate=True)
    backend, checks, code = run(e)
    assert backend == "sim" and code == 0
    assert one(checks, "backend").message.startswith("backend sim: checking for the emulated NPU")
    for name in ("torch-npu", "cann-env", "cann-version", "driver", "npu-smi", "devices"):
        assert one(checks, name).verdict == "info", name
    assert "emulated NPU (sim)" in doctor.render_text(backend, checks).splitlines()[0]
    _, checks, _ = run(make(env={"ASCEND_SHIM_BACKEND": "sim"}, programs=()))
    assert [c.verdict for c in named(checks, "sim-toolchain")] == ["warn", "warn"]   # no c++ / ninja


def test_visible_devices(make):
    _, checks, code = run(make(env={"CUDA_VISIBLE_DEVICES": "0,1"}))
    c = one(checks, "visible-devices")
    assert c.verdict == "warn" and "leftover CUDA_VISIBLE_DEVICES=0,1" in c.message
    assert c.fix.startswith("export ASCEND_RT_VISIBLE_DEVICES=0,1") and code == 0
    # a patch translating it, declared with the env: symbol, turns the warning into information
    translate = PatchSet(id="envtest", title="t")
    translate.add(_patch("envtest.cvd", "env:CUDA_VISIBLE_DEVICES", kind="env", covers=("env:CUDA_VISIBLE_DEVICES",)))
    _, checks, _ = run(make(env={"CUDA_VISIBLE_DEVICES": "0,1"}, patch_sets=[translate]))
    assert one(checks, "visible-devices").verdict == "info" and "envtest.cvd" in one(checks, "visible-devices").message
    _, checks, _ = run(make(env={"CUDA_VISIBLE_DEVICES": "0", "ASCEND_RT_VISIBLE_DEVICES": "2,3"}))
    assert [c.verdict for c in named(checks, "visible-devices")] == ["ok", "warn"]
    _, checks, code = run(make(env={"ASCEND_RT_VISIBLE_DEVICES": "0,npu1"}))
    assert one(checks, "visible-devices").verdict == "FAIL" and code == 1
    _, checks, _ = run(make(env={"ASCEND_RT_VISIBLE_DEVICES": "1,1"}))
    assert one(checks, "visible-devices").verdict == "FAIL"
    _, checks, _ = run(make(env={"ASCEND_RT_VISIBLE_DEVICES": "0,7"}))   # 4 device nodes
    assert one(checks, "visible-devices").verdict == "warn"
    _, checks, _ = run(make(env={"NPU_VISIBLE_DEVICES": "0,1", "ASCEND_RT_VISIBLE_DEVICES": "0,1"}))
    assert [c.verdict for c in named(checks, "visible-devices")] == ["ok", "warn"]
    _, checks, _ = run(make())
    assert one(checks, "visible-devices").verdict == "info"


@pytest.mark.parametrize("env, name, verdict", [
    ({"HCCL_IF_IP": "10.0.0.300"}, "HCCL_IF_IP", "FAIL"),
    ({"HCCL_IF_IP": "eth0"}, "HCCL_IF_IP", "FAIL"),
    ({"HCCL_IF_IP": "0.0.0.0"}, "HCCL_IF_IP", "FAIL"),
    ({"HCCL_IF_IP": "127.0.0.1"}, "HCCL_IF_IP", "warn"),
    ({"HCCL_IF_IP": "192.168.1.20"}, "HCCL_IF_IP", "ok"),
    ({"HCCL_IF_IP": "fe80::1"}, "HCCL_IF_IP", "ok"),
    ({"HCCL_WHITELIST_DISABLE": "1"}, "HCCL_WHITELIST_DISABLE", "ok"),
    ({"HCCL_WHITELIST_DISABLE": "0"}, "HCCL_WHITELIST_DISABLE", "FAIL"),     # no whitelist file
    ({"HCCL_WHITELIST_DISABLE": "yes"}, "HCCL_WHITELIST_DISABLE", "FAIL"),
    ({"HCCL_CONNECT_TIMEOUT": "1800"}, "HCCL_CONNECT_TIMEOUT", "ok"),
    ({"HCCL_CONNECT_TIMEOUT": "60"}, "HCCL_CONNECT_TIMEOUT", "warn"),
    ({"HCCL_CONNECT_TIMEOUT": "30m"}, "HCCL_CONNECT_TIMEOUT", "FAIL"),
    ({"HCCL_EXEC_TIMEOUT": "-1"}, "HCCL_EXEC_TIMEOUT", "FAIL"),
    ({"HCCL_IF_BASE_PORT": "60000"}, "HCCL_IF_BASE_PORT", "ok"),
    ({"HCCL_IF_BASE_PORT": "65530"}, "HCCL_IF_BASE_PORT", "FAIL"),   # needs 16 ports: max 65520
    ({"HCCL_IF_BASE_PORT": "80"}, "HCCL_IF_BASE_PORT", "FAIL"),
    ({"HCCL_HOST_SOCKET_PORT_RANGE": "60000-60050,61000"}, "HCCL_HOST_SOCKET_PORT_RANGE", "ok"),
    ({"HCCL_HOST_SOCKET_PORT_RANGE": "60050-60000"}, "HCCL_HOST_SOCKET_PORT_RANGE", "FAIL"),
    ({"HCCL_NPU_SOCKET_PORT_RANGE": "100-2000"}, "HCCL_NPU_SOCKET_PORT_RANGE", "warn"),
])
def test_hccl_variables(make, env, name, verdict):
    _, checks, code = run(make(env=env))
    assert one(checks, name).verdict == verdict
    assert code == (1 if verdict == "FAIL" else 0)


def test_hccl_whitelist_file_and_emulator(make, tmp_path):
    wl = tmp_path / "whitelist.json"
    wl.write_text("{}")
    _, checks, _ = run(make(env={"HCCL_WHITELIST_DISABLE": "0", "HCCL_WHITELIST_FILE": str(wl)}))
    assert one(checks, "HCCL_WHITELIST_DISABLE").verdict == "ok"
    _, checks, code = run(make(env={"HCCL_IF_IP": "10.0.0.300"}, simulate=True))
    c = one(checks, "HCCL_IF_IP")
    assert c.verdict == "warn" and "blocks a run on the NPU" in c.message and code == 0
    _, checks, _ = run(make())
    assert one(checks, "hccl").verdict == "info"


def test_nccl_leftovers(make):
    sets = PatchSet(id="nccltest", title="t")
    sets.add(_patch("nccltest.ifname", "env:NCCL_SOCKET_IFNAME", kind="env"))
    _, checks, _ = run(make(env={"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0"}, patch_sets=[sets]))
    verdicts = {c.verdict: c for c in named(checks, "nccl-env")}
    assert set(verdicts) == {"info", "warn"}
    assert "NCCL_SOCKET_IFNAME" in verdicts["info"].message and "NCCL_DEBUG" in verdicts["warn"].message


def test_target_libraries_come_from_patch_set_metadata(make):
    hf = PatchSet(id="hf", title="t", requires={"transformers": ">=4.40,<6"})
    hf.add(_patch("hf.a", "transformers:x"))
    trl = PatchSet(id="trlset", title="t", requires={"trl": ">=0.14"})
    trl.add(_patch("trlset.peft", "peft:y", requires={"peft": ">=0.10"}))
    off = PatchSet(id="offset", title="t", requires={"deepspeed": ">=0.14"}, default_enabled=False)
    off.add(_patch("offset.z", "deepspeed:z"))
    _, checks, code = run(make(versions={"transformers": "4.30.0", "trl": "0.18.0", "peft": "0.13.2"},
                               patch_sets=[hf, trl, off]))
    assert one(checks, "library:transformers").verdict == "warn"
    assert "hf (>=4.40,<6)" in one(checks, "library:transformers").message
    assert one(checks, "library:transformers").fix == "pip install 'transformers>=4.40,<6'"
    assert one(checks, "library:trl").verdict == "ok"
    assert one(checks, "library:peft").verdict == "ok" and "trlset.peft" in one(checks, "library:peft").message
    assert not [c for c in checks if c.name == "library:deepspeed"]     # that set is off: not a target
    assert code == 0
    _, checks, _ = run(make(versions={"transformers": "5.2.0"}, patch_sets=[hf, trl]))
    assert one(checks, "library:transformers").verdict == "ok"
    assert one(checks, "library:trl").verdict == "info"                  # not installed
    _, checks, _ = run(make())
    assert one(checks, "libraries").verdict == "info"


@pytest.mark.parametrize("versions_, requires, expect", [
    ({"vllm": "0.15.1", "vllm-ascend": "0.13.0", "numpy": "1.26.4"}, None, {"vllm": "FAIL", "numpy": "ok"}),
    ({"vllm": "0.11.0", "vllm-ascend": "0.11.0rc3", "numpy": "1.26.4"}, None, {"vllm": "ok", "numpy": "ok"}),
    ({"vllm": "0.11.0", "vllm-ascend": "0.11.0rc3", "numpy": "2.1.0"}, None, {"vllm": "ok", "numpy": "FAIL"}),
    ({"vllm": "0.11.0", "vllm-ascend": "0.11.0", "numpy": "1.26.4"}, {"vllm-ascend": ["numpy<1.26"]},
     {"vllm": "ok", "numpy": "FAIL"}),                                    # the metadata's own bound wins
    ({"vllm-ascend": "0.11.0", "numpy": "1.26.4"}, None, {"vllm": "FAIL", "numpy": "ok"}),
    ({"vllm": "0.11.0"}, None, {"vllm": "warn"}),
    ({"vllm": "0.14.1", "vllm-ascend": "0.14.0rc1", "numpy": "1.26.4", "torch": "2.9.0+cpu", "torch_npu": "2.9.0"},
     None, {"vllm": "ok", "numpy": "ok"}),
    ({"vllm": "0.23.0", "vllm-ascend": "0.23.0", "numpy": "2.2.0", "torch": "2.10.0", "torch_npu": "2.10.0.post4"},
     None, {"vllm": "ok", "numpy": "ok"}),
])
def test_vllm_pairing(make, versions_, requires, expect):
    _, checks, code = run(make(versions=versions_, requires=requires))
    assert {name: one(checks, name).verdict for name in expect} == expect
    assert code == (1 if "FAIL" in expect.values() else 0)


def test_flash_attn(make):
    _, checks, _ = run(make(versions={"flash-attn-npu": "0.4.2.post1"}))
    assert one(checks, "flash-attn").verdict == "ok"
    provider = PatchSet(id="fa", title="t")
    provider.add(_patch("fa.module", "flash_attn", kind="provide-module", fidelity="fallback"))
    _, checks, _ = run(make(versions={"flash-attn": "2.8.3"}, patch_sets=[provider]))
    c = one(checks, "flash-attn")
    assert c.verdict == "warn" and "fa.module" in c.fix
    _, checks, _ = run(make(patch_sets=[provider]))
    assert one(checks, "flash-attn").verdict == "info" and "fa.module" in one(checks, "flash-attn").message


def test_bad_shim_setting_fails(make):
    _, checks, code = run(make(env={"ASCEND_SHIM_BACKEND": "gpu"}))
    assert one(checks, "settings").verdict == "FAIL" and code == 1


def test_real_layer_asked_for_but_not_prepared_fails_with_the_fix(make, monkeypatch):
    import ascend_shim.sim.real_layer

    monkeypatch.setattr(ascend_shim.sim.real_layer, "prepared_state",
                        lambda version=None: (Path("/nowhere"), "absent", "Huawei's torch_npu 2.13 is not prepared"))
    _, checks, code = run(make(env={"ASCEND_SHIM_SIM_LAYER": "real"}, simulate=True))
    layer = one(checks, "sim-layer")
    assert layer.verdict == "FAIL" and "is not prepared" in layer.message and code == 1
    assert "fetch-torch-npu" in layer.fix


def test_real_layer_files_changed_since_prepared_block_with_the_fix(make, tmp_path, monkeypatch):
    """Every file is hashed: a change the run's own check before import (file list and sizes) cannot see too."""
    from ascend_shim.sim.real_layer import prepare
    from ascend_shim.versions import base, installed_version

    from tests.real_layer.test_prepare import _wheel

    monkeypatch.setenv("ASCEND_SHIM_TORCH_NPU_DIR", str(tmp_path / "cache"))
    where = prepare.prepare(_wheel(tmp_path / "w.whl", base(installed_version("torch"))))
    e = make(env={"ASCEND_SHIM_SIM_LAYER": "real"}, simulate=True)
    _, checks, code = run(e)
    assert one(checks, "sim-layer").verdict == "ok" and code == 0
    version = where / "site" / "torch_npu" / "version.py"
    version.write_text(version.read_text().replace("__version__", "__VERSION__"))  # same size
    (version.parent / "planted.py").write_text("")
    _, checks, code = run(e)
    layer = one(checks, "sim-layer")
    assert layer.verdict == "FAIL" and code == 1
    assert "torch_npu/planted.py is not part of the package; torch_npu/version.py has changed" in layer.message
    assert "fetch-torch-npu" in layer.fix


def test_main_json_and_text(make, capsys):
    e = make(env={"HCCL_IF_IP": "not-an-ip"})
    assert doctor.main(["--json"], environment=e) == 1
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"backend", "simulated", "checks", "summary", "exit_code"}
    assert data["exit_code"] == 1 and data["simulated"] is False and data["summary"]["FAIL"] == 1
    assert set(data["checks"][0]) == {"name", "verdict", "message", "fix"}
    assert {c["verdict"] for c in data["checks"]} <= set(doctor.VERDICTS)
    assert doctor.main(["--simulate"], environment=e) == 0
    out = capsys.readouterr().out
    assert out.startswith("ascend-shim doctor: checking for the emulated NPU (sim)")
    assert "[warn] HCCL_IF_IP" in out and "fix: set it to this host's IP" in out
    assert out.rstrip().splitlines()[-1].endswith("nothing blocks a run")
    assert doctor.main(["--simulate", "--backend", "npu"], environment=e) == 2
    assert doctor.main(["--bogus"], environment=e) == 2
    capsys.readouterr()


def test_real_environment_smoke(capsys):
    """This machine, the emulator: runs end to end against the registered patch sets and reports JSON."""
    code = doctor.main(["--simulate", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["backend"] == "sim" and code == data["exit_code"]
    assert not [c for c in data["checks"] if "crashed" in c["message"]]
