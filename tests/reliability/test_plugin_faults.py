"""A third-party patch-set plug-in (entry point ``ascend_shim.patch_sets``) that fails in any way -- an
exception, ``sys.exit()``, any other ``BaseException`` -- is a reported failure and the user's program goes
on; ``ASCEND_SHIM_STRICT=1`` makes it an error. Only the user's Ctrl-C (``KeyboardInterrupt``) goes through."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import pytest

from ascend_shim import registry, versions

from tests.subprocess_env import shim_free_env

FAULTS = {
    "exit_status": "import sys\nsys.exit(3)\n",
    "exit_none": "import sys\nsys.exit()\n",
    "base_exception": "class Cancelled(BaseException):\n    pass\nraise Cancelled('torn down')\n",
    "exception": "raise RuntimeError('broken plug-in')\n",
}
FACTORY_EXITS = '''
import sys
from ascend_shim.registry import Patch, PatchSet

PATCH_SETS = [PatchSet(id="shimfault_factory", title="a plug-in whose patch exits")]
PATCH_SETS[0].add(Patch(id="shimfault_factory.thing", target="shimfault_target:thing", kind="replace",
                        why="a test", what="exits", remove_when="never: a test", factory=lambda ctx: sys.exit(4)))
'''


def _plugin(root, name: str, source: str) -> None:
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[ascend_shim.patch_sets]\n{name} = {name}\n")
    (root / f"{name}.py").write_text(source)


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    for kind, source in FAULTS.items():
        _plugin(tmp_path, f"shimfault_{kind}", source)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    versions.forget_installed()
    yield tmp_path
    versions.forget_installed()


def test_every_kind_of_fault_at_import_is_returned_not_raised(plugins):
    sets, errors = registry.entry_point_patch_sets()
    assert not [s for s in sets if s.id.startswith("shimfault")]
    assert dict(errors) == {"shimfault_exit_status": "SystemExit: 3", "shimfault_exit_none": "SystemExit",
                            "shimfault_base_exception": "Cancelled: torn down",
                            "shimfault_exception": "RuntimeError: broken plug-in"}


def test_ctrl_c_while_a_plugin_imports_is_not_swallowed(tmp_path, monkeypatch):
    _plugin(tmp_path, "shimfault_interrupted", "raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    with pytest.raises(KeyboardInterrupt):
        registry.entry_point_patch_sets()


def _run(tmp_path, script: str, **env):
    (tmp_path / "main.py").write_text(textwrap.dedent(script))
    environ = shim_free_env()
    environ.update(PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])), **env)
    return subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "main.py"], cwd=tmp_path,
                          env=environ, capture_output=True, text=True, timeout=300)


def test_a_plugin_calling_sys_exit_at_import_does_not_end_the_run(tmp_path):
    _plugin(tmp_path, "shimfault_exit", "import sys\nsys.exit(3)\n")
    proc = _run(tmp_path, "import torch\nprint('ran', torch.cuda.is_available())\n")
    assert proc.returncode == 0 and proc.stdout == "ran True\n", proc.stderr[-3000:]
    assert "entry point shimfault_exit could not be loaded" in proc.stderr and "SystemExit: 3" in proc.stderr


def test_a_plugin_calling_sys_exit_is_an_error_under_strict(tmp_path):
    _plugin(tmp_path, "shimfault_exit", "import sys\nsys.exit(3)\n")
    proc = _run(tmp_path, "print('ran')\n", ASCEND_SHIM_STRICT="1")
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr[-3000:]
    assert "shimfault_exit" in proc.stderr and "SystemExit: 3" in proc.stderr and "Traceback" not in proc.stderr


def test_a_plugin_patch_calling_sys_exit_when_it_applies_is_a_failed_patch(tmp_path):
    _plugin(tmp_path, "shimfault_factory", FACTORY_EXITS)
    (tmp_path / "shimfault_target.py").write_text("thing = 1\n")
    proc = _run(tmp_path, "import shimfault_target\nprint('ran', shimfault_target.thing)\n")
    assert proc.returncode == 0 and proc.stdout == "ran 1\n", proc.stderr[-3000:]
    assert "patch shimfault_factory.thing failed while applying" in proc.stderr and "SystemExit: 4" in proc.stderr
