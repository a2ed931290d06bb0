"""Crafted environments for ``doctor``: a fake root with CANN / driver / device folders, env vars, versions."""
import re

import pytest

from ascend_shim.doctor import Environment


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def fake_cann(root, version="8.3.RC1", arch="x86_64", layout="ascend-toolkit", info_name="ascend_toolkit_install.info"):
    """A CANN toolkit install under ``root``; returns its home (what set_env.sh exports as ASCEND_HOME_PATH)."""
    base = root / "usr/local/Ascend" / layout
    home = base / "latest"
    (home / "lib64").mkdir(parents=True)
    (home / "opp").mkdir()
    (base / "set_env.sh").write_text("export ASCEND_TOOLKIT_HOME=...\n")
    if info_name:
        (home / f"{arch}-linux").mkdir()
        (home / f"{arch}-linux" / info_name).write_text(
            f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001C23SPC001B001\n"
            f"arch={arch}\nos=linux\npath={home}/{arch}-linux\n")
    return home


def fake_driver(root, version="24.1.rc1", devices=4):
    drv = root / "usr/local/Ascend/driver"
    (drv / "lib64/driver").mkdir(parents=True)
    (drv / "lib64/common").mkdir(parents=True)
    (drv / "version.info").write_text(f"Version={version}\nascendhal_version=7.35.19\naicpu_version=1.0\n")
    (root / "dev").mkdir(exist_ok=True)
    for i in range(devices):
        (root / "dev" / f"davinci{i}").write_text("")
    (root / "dev" / "davinci_manager").write_text("")


class Maker:
    """``make(...)`` -> an Environment of a healthy NPU host, with any part replaced."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.count = 0

    def __call__(self, env=None, versions=None, requires=None, programs=("npu-smi", "c++", "ninja"),
                 python=(3, 11, 7), machine="x86_64", patch_sets=(), simulate=False, cann=True, driver=True,
                 cann_version="8.3.RC1", unset=()):
        self.count += 1
        root = self.tmp_path / f"root{self.count}"
        root.mkdir()
        home = fake_cann(root, version=cann_version) if cann else None
        if driver:
            fake_driver(root)
        base_env = {"PATH": "/usr/bin"}
        if home is not None:
            drv = root / "usr/local/Ascend/driver/lib64"
            base_env.update({
                "ASCEND_HOME_PATH": str(home), "ASCEND_TOOLKIT_HOME": str(home), "ASCEND_OPP_PATH": str(home / "opp"),
                "LD_LIBRARY_PATH": f"{home}/lib64:{home}/lib64/plugin/opskernel:{drv}/driver:{drv}/common",
            })
        base_env.update(env or {})
        for var in unset:
            base_env.pop(var, None)
        installed = {"torch": "2.7.1+cpu", "torch_npu": "2.7.1"}
        installed.update(versions or {})
        installed = {_norm(k): v for k, v in installed.items() if v is not None}
        reqs = {_norm(k): v for k, v in (requires or {}).items()}
        return Environment(
            env=base_env, root=str(root), version_of=lambda d: installed.get(_norm(d)),
            requires_of=lambda d: reqs.get(_norm(d)),
            which=lambda name: f"/usr/bin/{name}" if name in programs else None,
            python_version=python, machine=machine, patch_sets=list(patch_sets), simulate=simulate)


@pytest.fixture
def make(tmp_path):
    return Maker(tmp_path)
