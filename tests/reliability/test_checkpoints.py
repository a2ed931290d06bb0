"""Checkpoints written under the shim carry no trace of it: they are the CUDA checkpoints the code believes it wrote.

They open in an interpreter that has only torch (``map_location``, ``weights_only=True``), say ``cuda:N`` in their
storage tags and device objects exactly as a CUDA run writes them, and load back under the shim onto the NPU.
``ASCEND_SHIM_SAVE_DEVICE=npu`` keeps npu tags. Covers ``torch.save`` (zip and legacy formats), distributed
checkpoints and safetensors (no device in the file: nothing to do).
"""
import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import zipfile

import pytest
import torch

import ascend_shim
from ascend_shim.config import Config
from ascend_shim.errors import ConfigError
from ascend_shim.report import REPORT

from tests.subprocess_env import shim_free_env

SAVE_LINE = "torch.save(state, path)"


@pytest.fixture
def shim(monkeypatch):
    def start(**env):
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        ascend_shim.activate(backend="sim", inherit=False)

    yield start
    ascend_shim.deactivate()


def cuda_state():
    """What CUDA code saves; under the shim every cuda here is npu in memory."""
    return {"w": torch.arange(4.0, device="cuda"), "w1": torch.full((3,), 7.0, device="cuda:1"),
            "device": torch.device("cuda"), "device1": torch.device("cuda", 1), "cpu": torch.ones(2)}


# -- reading an archive without torch -----------------------------------------------------------------------
class _Made(dict):
    """Whatever a pickled global call made: its qualified name and arguments (a dict, so containers fill it)."""

    def __init__(self, name, args):
        super().__init__()
        self.name, self.args = name, args

    def __setstate__(self, state):
        self.state = state


class _Reader(pickle.Unpickler):
    """Unpickles torch's data.pkl without torch: global calls become :class:`_Made`, storages their tags."""

    def __init__(self, stream, tags):
        super().__init__(stream)
        self.tags = tags

    def persistent_load(self, pid):
        self.tags.append(pid[3])
        return ("storage", pid[3])

    def find_class(self, module, name):
        return lambda *args: _Made(f"{module}.{name}", args)


def _devices(obj, found):
    if isinstance(obj, _Made) and obj.name == "torch.device":
        found.append(obj.args)
    children = list(obj.values()) if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else []
    if isinstance(obj, _Made):
        children += list(obj.args) + [getattr(obj, "state", None)]
    for child in children:
        _devices(child, found)
    return found


def written(path):
    """(location tags, device constructions, raw pickle bytes) of a torch.save file, zip or legacy."""
    tags = []
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            data = archive.read(next(n for n in archive.namelist() if n.endswith("/data.pkl")))
        obj = _Reader(io.BytesIO(data), tags).load()
    else:
        with open(path, "rb") as fh:
            data = fh.read()
        stream = io.BytesIO(data)
        for _ in range(3):  # magic number, protocol version, system info
            _Reader(stream, []).load()
        obj = _Reader(stream, tags).load()
    return sorted(tags), sorted(_devices(obj, [])), data


CUDA_TAGS = ["cpu", "cuda:0", "cuda:1"]  # what torch tags the storages of cuda_state() with on a CUDA machine
CUDA_DEVICES = [("cuda",), ("cuda", 1)]


def _plain_python(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` where only torch is importable: no site processing (no .pth, no sitecustomize), isolated."""
    site = os.path.dirname(os.path.dirname(torch.__file__))
    prelude = (f"import sys; sys.path.append({site!r})\n"
               "import importlib.util\n"
               "assert importlib.util.find_spec('ascend_shim') is None, 'the shim is importable'\n"
               "assert importlib.util.find_spec('torch_npu') is None\n")
    return subprocess.run([sys.executable, "-I", "-S", "-c", prelude + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)


PLAIN_LOAD = """
import torch
for path in {paths!r}:
    for kw in ({{"map_location": "cpu"}}, {{"map_location": "cpu", "weights_only": True}},
               {{"map_location": torch.device("cpu"), "weights_only": False}},
               {{"map_location": {{"cuda:0": "cpu", "cuda:1": "cpu"}}, "weights_only": True}}):
        state = torch.load(path, **kw)
        assert state["w"].device.type == "cpu" and state["w"].tolist() == [0.0, 1.0, 2.0, 3.0], (path, kw)
        assert state["w1"].tolist() == [7.0, 7.0, 7.0] and state["cpu"].tolist() == [1.0, 1.0]
        assert state["device"] == torch.device("cuda") and state["device1"] == torch.device("cuda", 1), state
    try:
        torch.load(path, weights_only=True)  # a CUDA checkpoint on a machine without CUDA
    except RuntimeError as exc:
        assert "CUDA" in str(exc) and "map_location" in str(exc), exc
    else:
        raise AssertionError("loaded cuda storages without CUDA")
print("OK plain")
"""


def _check_loads_back_on_npu(path):
    for kw in ({}, {"weights_only": True}):
        state = torch.load(path, **kw)
        assert state["w"].device == torch.device("npu", 0) and state["w1"].device == torch.device("npu", 1)
        assert state["w"].cpu().tolist() == [0.0, 1.0, 2.0, 3.0] and state["cpu"].device.type == "cpu"
        assert state["device"] == torch.device("npu") and state["device1"] == torch.device("npu", 1)


def test_torch_save_writes_a_cuda_checkpoint(shim, tmp_path):
    shim()
    paths = []
    for name, kw in (("zip.pt", {}), ("legacy.pt", {"_use_new_zipfile_serialization": False})):
        path = str(tmp_path / name)
        torch.save(cuda_state(), path, **kw)
        tags, devices, data = written(path)
        assert tags == CUDA_TAGS and devices == CUDA_DEVICES, (name, tags, devices)
        assert b"npu" not in data
        _check_loads_back_on_npu(path)
        paths.append(path)
    saves = [e for e in REPORT.events() if e["api"] == "torch.save"]
    assert saves and all("written as cuda" in e["detail"] for e in saves), saves
    assert {e["file"] for e in saves} == {__file__}

    proc = _plain_python(PLAIN_LOAD.format(paths=paths))
    assert proc.returncode == 0 and "OK plain" in proc.stdout, proc.stdout + proc.stderr


def test_save_device_npu_keeps_npu_tags(shim, tmp_path):
    shim(ASCEND_SHIM_SAVE_DEVICE="npu")
    path = str(tmp_path / "npu.pt")
    torch.save(cuda_state(), path)
    tags, devices, _ = written(path)
    assert tags == ["cpu", "npu:0", "npu:1"] and devices == [("npu",), ("npu", 1)]
    saves = [e for e in REPORT.events() if e["api"] == "torch.save"]
    assert saves and all("kept as npu" in e["detail"] for e in saves), saves
    _check_loads_back_on_npu(path)


def test_save_device_setting_is_checked():
    assert Config.from_env({"ASCEND_SHIM_SAVE_DEVICE": "NPU"}).save_device == "npu"
    assert Config.from_env({}).save_device == "cuda"
    with pytest.raises(ConfigError, match="ASCEND_SHIM_SAVE_DEVICE"):
        Config.from_env({"ASCEND_SHIM_SAVE_DEVICE": "gpu"})


def test_pickling_outside_a_save_is_left_alone_even_while_another_thread_saves(shim, tmp_path):
    shim()
    inside, release, seen = threading.Event(), threading.Event(), {}

    class Slow:
        def __reduce__(self):  # holds torch.save open on its thread
            inside.set()
            release.wait(30)
            return (int, (0,))

    saver = threading.Thread(target=torch.save, args=({"slow": Slow(), "d": torch.device("cuda")},
                                                      str(tmp_path / "slow.pt")))
    saver.start()
    assert inside.wait(30)
    seen["device"] = pickle.loads(pickle.dumps(torch.device("npu", 1)))
    seen["raw"] = pickle.dumps(torch.device("npu", 1))
    release.set()
    saver.join(30)
    assert seen["device"] == torch.device("npu", 1) and b"npu" in seen["raw"]
    assert written(str(tmp_path / "slow.pt"))[1] == [("cuda",)]


def test_map_location_dicts_match_cuda_and_npu_tags_both_ways(shim, tmp_path):
    shim()
    cuda_file = str(tmp_path / "cuda.pt")
    torch.save({"w": torch.ones(2, device="cuda")}, cuda_file)
    assert torch.load(cuda_file, map_location={"npu:0": "cpu"})["w"].device.type == "cpu"
    assert torch.load(cuda_file, map_location={"cuda:0": "cuda:1"})["w"].device == torch.device("npu", 1)
    assert torch.load(cuda_file, map_location={"cuda:5": "cpu"})["w"].device == torch.device("npu", 0)
    assert torch.load(cuda_file, map_location=lambda storage, loc: None)["w"].device == torch.device("npu", 0)
    ascend_shim.deactivate()
    shim(ASCEND_SHIM_SAVE_DEVICE="npu")
    npu_file = str(tmp_path / "npu.pt")
    torch.save({"w": torch.ones(2, device="cuda:1")}, npu_file)
    assert torch.load(npu_file, map_location={"cuda:1": "cpu"})["w"].device.type == "cpu"
    assert torch.load(npu_file)["w"].device == torch.device("npu", 1)


def test_distributed_checkpoint_is_portable(shim, tmp_path):
    import warnings

    import torch.distributed.checkpoint as dcp

    shim()
    out = str(tmp_path / "dcp")
    state = {"w": torch.arange(4.0, device="cuda"), "device": torch.device("cuda", 1), "step": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # single process, no process group: DCP says so
        dcp.save(state, checkpoint_id=out)
        for name in os.listdir(out):
            with open(os.path.join(out, name), "rb") as fh:
                assert b"npu" not in fh.read(), name
        back = {"w": torch.zeros(4, device="cuda"), "device": None, "step": 0}
        dcp.load(back, checkpoint_id=out)
    assert back["w"].device.type == "npu" and back["w"].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert back["device"] == torch.device("npu", 1) and back["step"] == 3

    proc = _plain_python(f"""
        import warnings
        import torch, torch.distributed.checkpoint as dcp
        warnings.simplefilter("ignore")
        state = {{"w": torch.zeros(4), "device": None, "step": 0}}
        dcp.load(state, checkpoint_id={out!r})
        assert state["w"].tolist() == [0.0, 1.0, 2.0, 3.0] and state["step"] == 3
        assert state["device"] == torch.device("cuda", 1), state["device"]
        print("OK plain")
    """)
    assert proc.returncode == 0 and "OK plain" in proc.stdout, proc.stdout + proc.stderr


def test_safetensors_files_carry_no_device(shim, tmp_path):
    from safetensors.torch import load_file, save_file

    plain = str(tmp_path / "plain.safetensors")
    save_file({"w": torch.arange(4.0)}, plain)
    shim()
    under = str(tmp_path / "shim.safetensors")
    save_file({"w": torch.arange(4.0, device="cuda")}, under)
    with open(plain, "rb") as a, open(under, "rb") as b:
        assert a.read() == b.read()  # byte for byte what plain torch writes from the same values
    assert load_file(under, device="cuda")["w"].device == torch.device("npu", 0)
    assert load_file(under, device="cuda:1")["w"].device == torch.device("npu", 1)
    assert load_file(under)["w"].device.type == "cpu"


SAVE_SCRIPT = f"""
import sys
import torch

path, legacy = sys.argv[1], sys.argv[2]
state = {{"w": torch.arange(4.0, device="cuda"), "w1": torch.full((3,), 7.0, device="cuda:1"),
         "device": torch.device("cuda"), "device1": torch.device("cuda", 1), "cpu": torch.ones(2)}}
{SAVE_LINE}
torch.save(state, legacy, _use_new_zipfile_serialization=False)
print("OK saved")
"""

LOAD_SCRIPT = """
import sys
import torch

for path in sys.argv[1:]:
    state = torch.load(path)  # the CUDA program loads its checkpoint back, no map_location
    assert state["w"].device.type == "cuda" and state["w1"].device == torch.device("cuda", 1)  # npu underneath
    assert state["w"].cpu().tolist() == [0.0, 1.0, 2.0, 3.0] and state["w1"].sum().item() == 21.0
    assert state["device"] == torch.device("cuda") and state["device1"] == torch.device("cuda", 1)
    assert torch.load(path, weights_only=True)["w"].device.type == "cuda"
print("OK loaded")
"""


@pytest.mark.slow
def test_checkpoint_of_a_simulated_run_opens_with_plain_torch_and_back_under_run(tmp_path):
    env = shim_free_env()
    (tmp_path / "save.py").write_text(SAVE_SCRIPT)
    (tmp_path / "load.py").write_text(LOAD_SCRIPT)
    paths = [str(tmp_path / "ckpt.pt"), str(tmp_path / "legacy.pt")]
    report = tmp_path / "report.json"

    def run(script, *args):
        proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "--report", str(report),
                               script, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    assert "OK saved" in run("save.py", *paths).stdout
    saves = [e for e in json.loads(report.read_text())["events"] if e["api"] == "torch.save"]
    line = SAVE_SCRIPT.splitlines().index(SAVE_LINE) + 1
    assert any(e["line"] == line and "written as cuda" in e["detail"] for e in saves), saves
    for path in paths:
        tags, devices, data = written(path)
        assert tags == CUDA_TAGS and devices == CUDA_DEVICES and b"npu" not in data

    proc = _plain_python(PLAIN_LOAD.format(paths=paths))
    assert proc.returncode == 0 and "OK plain" in proc.stdout, proc.stdout + proc.stderr
    assert "OK loaded" in run("load.py", *paths).stdout
