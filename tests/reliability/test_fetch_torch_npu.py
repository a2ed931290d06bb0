"""``fetch-torch-npu`` with a wheel it should not trust or cannot use, and several runs at once: one line and exit 2
for what it refuses, nothing removed outside the version it prepares, nothing of its unpacking left behind, and a
package prepared only where a run looks for it."""
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ascend_shim.sim.real_layer import loader, prepare

from tests.real_layer.test_prepare import _torch_release, _wheel
from tests.subprocess_env import shim_free_env

REPO = Path(__file__).resolve().parents[2]


def _bare_wheel(path: Path, version: str | None = None, *, extra: dict | None = None, version_py: bool = True) -> Path:
    """A wheel with a torch_npu package and the members ``extra`` (``version``: the text of its ``__version__``)."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("torch_npu/__init__.py", "")
        if version_py:
            zf.writestr("torch_npu/version.py", f"__version__ = '{version or _torch_release()}'\n")
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return path


@pytest.fixture
def root(tmp_path, monkeypatch):
    """The cache root, in a home with something else in it, and a package another torch release left there."""
    home = tmp_path / "home"
    (home / "keep.txt").parent.mkdir()
    (home / "keep.txt").write_text("not the shim's")
    where = home / "torch_npu"
    (where / "2.1.0").mkdir(parents=True)
    (where / "2.1.0" / "prepared.json").write_text("{}")
    monkeypatch.setenv("ASCEND_SHIM_TORCH_NPU_DIR", str(where))
    return where


def _entries(root: Path) -> list[str]:
    """What the root holds besides the lock of its publishing."""
    return sorted(p.name for p in root.iterdir() if p.name != ".publish.lock")


def _fetch_refuses(wheel: Path, capsys, *words: str) -> str:
    code = prepare.main(["--wheel", str(wheel)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("ascend-shim fetch-torch-npu: ") and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# -- the wheel's version names a directory: only a release's --------------------------------------------------
@pytest.mark.parametrize("version", ["..", ".", "a/b", "../..", "2.13.0/../..", "2.13.0/x", " 2.13.0", "x"])
def test_a_version_that_is_not_a_release_is_refused_and_removes_nothing(root, tmp_path, capsys, version):
    line = _fetch_refuses(_bare_wheel(tmp_path / "w.whl", version), capsys, "not a release version")
    assert repr(version) in line
    assert (root.parent / "keep.txt").read_text() == "not the shim's"
    assert _entries(root) == ["2.1.0"] and (root / "2.1.0" / "prepared.json").is_file()


def test_a_link_in_place_of_the_version_directory_is_not_followed(root, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "data").write_text("kept")
    (root / _torch_release()).symlink_to(elsewhere)
    _fetch_refuses(_bare_wheel(tmp_path / "w.whl"), capsys, f"{root / _torch_release()} leads outside {root}")
    assert (elsewhere / "data").read_text() == "kept"
    assert _entries(root) == sorted(["2.1.0", _torch_release()])


# -- a wheel that is not one for this torch ---------------------------------------------------------------------
def test_a_wheel_without_a_version_file_is_not_a_torch_npu_wheel(root, tmp_path, capsys):
    _fetch_refuses(_bare_wheel(tmp_path / "other.whl", version_py=False), capsys,
                   "other.whl has no torch_npu/version.py: it is not a torch-npu wheel")
    assert _entries(root) == ["2.1.0"]


def test_a_wheel_for_another_torch_is_refused(root, tmp_path, capsys):
    """It would be prepared in a place no run looks in: the run goes on without it, silently."""
    release = _torch_release()
    _fetch_refuses(_bare_wheel(tmp_path / "old.whl", "2.1.0.post17"), capsys,
                   "old.whl is torch-npu 2.1.0.post17, built for torch 2.1.0", f"installed torch is {release}")
    assert _entries(root) == ["2.1.0"]
    assert prepare.main(["--version", "2.1.0"]) == 2  # refused before anything is downloaded
    assert "built for torch 2.1.0" in capsys.readouterr().err


def test_a_rebuild_for_this_torch_is_prepared_where_a_run_looks(root, tmp_path, capsys):
    release = _torch_release()
    assert prepare.main(["--wheel", str(_wheel(tmp_path / "w.whl", f"{release}.post3"))]) == 0
    assert f"torch_npu {release}.post3 prepared in {root / release}" in capsys.readouterr().out
    assert loader.find_prepared() == root / release
    assert json.loads((root / release / "prepared.json").read_text())["torch_npu"] == f"{release}.post3"


# -- nothing of an unpacking is left behind ---------------------------------------------------------------------
def test_a_member_outside_the_package_is_refused_and_leaves_nothing(root, tmp_path, capsys):
    wheel = _bare_wheel(tmp_path / "w.whl", extra={"torch_npu/../../evil.py": "planted"})
    _fetch_refuses(wheel, capsys, "unsafe member 'torch_npu/../../evil.py'")
    assert _entries(root) == ["2.1.0"]
    assert not (root.parent / "evil.py").exists() and not (root / "evil.py").exists()


def test_an_unpacking_that_is_interrupted_leaves_nothing(root, tmp_path, monkeypatch):
    def interrupted(site):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare, "_compile", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare.prepare(_wheel(tmp_path / "w.whl"))
    assert _entries(root) == ["2.1.0"]


def test_a_link_at_the_lock_is_not_followed(root, tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.write_text("kept")
    (root / ".publish.lock").symlink_to(victim)
    _fetch_refuses(_wheel(tmp_path / "w.whl"), capsys, "is a symbolic link")
    assert victim.read_text() == "kept" and _entries(root) == ["2.1.0"]


# -- concurrent runs ------------------------------------------------------------------------------------------
_AT_ONCE = """
import os, sys, time
from pathlib import Path
from ascend_shim.sim.real_layer import prepare

gate, runs = Path(sys.argv[1]), int(sys.argv[2])
set_modes = prepare._set_modes

def together(top):  # every run reaches its publishing at the same moment
    set_modes(top)
    (gate / str(os.getpid())).touch()
    while len(list(gate.iterdir())) < runs:
        time.sleep(0.01)

prepare._set_modes = together
sys.exit(prepare.main(["--wheel", sys.argv[3]]))
"""


def test_concurrent_runs_into_one_root_each_prepare_it_whole(root, tmp_path):
    """Three runs that publish at once (a job script started on every node of a shared home): each succeeds, the
    package is whole, and no run's unpacking is left behind."""
    release = _torch_release()
    modules = {f"torch_npu/m{i // 50}/f{i}.py": f"X = {i}\n" * 20 for i in range(600)}
    modules.update({f"torch_npu/m{i}/__init__.py": "" for i in range(12)})
    wheel = _bare_wheel(tmp_path / "w.whl", extra=modules)
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**shim_free_env(), "PYTHONPATH": str(REPO), "ASCEND_SHIM_TORCH_NPU_DIR": str(root)}
    runs = [subprocess.Popen([sys.executable, "-c", _AT_ONCE, str(gate), "3", str(wheel)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    done = [(*run.communicate(timeout=300), run.returncode) for run in runs]
    for out, err, code in done:
        assert code == 0 and err == "" and out.startswith(f"torch_npu {release} prepared in"), (code, out, err)
    assert _entries(root) == sorted(["2.1.0", release])
    meta = json.loads((root / release / "prepared.json").read_text())
    assert meta["file_count"] == 615 and prepare.check_files(root / release, meta, full=True) == []
