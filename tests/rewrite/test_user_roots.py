"""User code is everything that is not the environment: sibling packages and editable installs count."""
import os
import site
import subprocess
import sys
import venv

import pytest

from ascend_shim import rewrite
from ascend_shim.report import REPORT

from tests.subprocess_env import shim_free_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_default_rule_everything_outside_the_environment(tree):
    rewrite.install([])
    assert rewrite.is_user_module(tree.p + "a", str(tree.proj / "a.py"))
    assert rewrite.is_user_module(tree.p + "b", str(tree.other / "deep" / "b.py"))   # a sibling tree counts
    assert rewrite.is_user_module(tree.p + "c", str(tree.site / "c.py"))             # a library: CUDA code too
    assert not rewrite.hook._finder.config.dir_is_users(str(tree.site))              # ... but not the user's
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        assert not rewrite.is_user_module("tool", os.path.join(prefix, "bin", "tool.py"))
        assert not rewrite.is_user_module("x", os.path.join(prefix, "share", "x", "x.py"))
    from ascend_shim import callers

    added = callers.register_native("shimtest_nativelib")   # an NPU-native library installed from a checkout
    try:
        assert not rewrite.is_user_module("shimtest_nativelib.x", str(tree.other / "shimtest_nativelib" / "x.py"))
    finally:
        callers.unregister_native(*added)
    assert rewrite.is_user_module("shimtest_nativelib.x", str(tree.other / "shimtest_nativelib" / "x.py"))


def test_roots_narrow_and_extend(tree):
    rewrite.install([str(tree.proj), os.path.join(sys.prefix, "src", "mine")])
    assert rewrite.is_user_module("a", str(tree.proj / "a.py"))
    assert not rewrite.is_user_module("b", str(tree.other / "b.py"))                 # narrowed to the roots
    assert rewrite.is_user_module("m", os.path.join(sys.prefix, "src", "mine", "m.py"))  # a root in a prefix
    assert rewrite.is_user_module("c", str(tree.site / "c.py"))  # libraries follow the native rule, not the roots


def test_report_names_the_rule_and_the_roots_loaded_from(tree):
    tree.write(tree.other, "{p}pkg/__init__.py", "")
    tree.write(tree.other, "{p}pkg/mod.py", "def f(d):\n    return d == 'cuda'\n")
    rewrite.install([])
    __import__(tree.p + "pkg.mod")
    notes = [n for n in REPORT.notes if n.startswith("user code: ")]
    assert len(notes) == 1, REPORT.notes
    assert "every file outside the environment" in notes[0] and sys.prefix in notes[0]
    assert notes[0].endswith("loaded from " + str(tree.other)), notes[0]


PROJECT_LIB = '''\
import torch


def autocast_for(x):
    """AMP only on the GPU: the gate people write."""
    on_gpu = x.device.type == "cuda"
    return torch.autocast(device_type="cuda" if on_gpu else "cpu", dtype=torch.bfloat16, enabled=on_gpu)
'''

PROJECT_TRAIN = '''\
import os, sys
if os.environ.get("ADD_SRC"):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))
import torch
import mylib

x = torch.ones(4, 4, device="cuda")
with mylib.autocast_for(x):
    y = x @ x
print("AMP", y.dtype, y.device.type, mylib.__file__)
'''


@pytest.fixture
def project(tmp_path):
    proj = tmp_path / "proj"
    (proj / "src" / "mylib").mkdir(parents=True)
    (proj / "src" / "mylib" / "__init__.py").write_text(PROJECT_LIB)
    (proj / "train.py").write_text(PROJECT_TRAIN)
    return proj


def _run(python, proj, **env):
    full = shim_free_env()
    full.update(env)
    full["PYTHONPATH"] = REPO + os.pathsep + full.get("PYTHONPATH", "")
    return subprocess.run([python, "-m", "ascend_shim", "run", "--simulate", "--log-level", "off", "--report",
                           str(proj / "r.json"), "train.py"], cwd=proj, env=full, capture_output=True, text=True,
                          timeout=300)


def _assert_amp_on(proc, proj):
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[:3] == ["AMP", "torch.bfloat16", "npu"], proc.stdout
    import json

    report = json.loads((proj / "r.json").read_text())
    rewritten = {(e["file"], e["line"]) for e in report["events"] if e["category"] == "rewritten"}
    assert (str(proj / "src" / "mylib" / "__init__.py"), 6) in rewritten
    assert any(str(proj / "src") in n for n in report["notes"] if n.startswith("user code: "))


def test_sibling_package_on_sys_path_is_user_code(project):
    _assert_amp_on(_run(sys.executable, project, ADD_SRC="1"), project)


def test_editable_install_of_the_users_project_is_user_code(project, tmp_path):
    """``pip install -e`` of the user's own project (a .pth file pointing at ``src``) in a venv."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False, symlinks=True)
    python = str(env_dir / "bin" / "python")
    site_dir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site_dir, "__editable__.mylib-0.1.pth"), "w") as fh:
        fh.write(str(project / "src") + "\n")
    # a venv made from inside a venv gets the base interpreter's site-packages, not this one's (where torch and
    # the shim's editable install live): add this interpreter's, with their .pth files processed
    with open(os.path.join(site_dir, "_outer_environment.pth"), "w") as fh:
        for outer in site.getsitepackages():
            fh.write(f"import site; site.addsitedir({outer!r})\n")
    _assert_amp_on(_run(python, project), project)


def test_submodules_of_packages_left_alone_are_left_to_the_other_finders(tree, monkeypatch):
    """A package that cannot hold CUDA code to rewrite (the standard library's, an NPU-native library's): the
    finder does not search for its submodules (every submodule search would otherwise be made twice when it
    fails). A native library's top-level name is searched once (a file of the user's may carry it), its submodules
    are not."""
    import json

    from ascend_shim import callers, import_system
    from ascend_shim.rewrite import hook

    rewrite.install([])
    searched, search = [], import_system.spec_from_others
    monkeypatch.setattr(import_system, "spec_from_others",
                        lambda finder, name, *a: (finder is hook._finder and searched.append(name))
                        or search(finder, name, *a))
    assert hook._finder.find_spec("json.shimtest_missing", json.__path__) is None
    tree.write(tree.site, "{p}nativepkg/__init__.py", "")
    tree.write(tree.site, "{p}nativepkg/mod.py", "def f(d):\n    return d == 'cuda'\n")
    tree.write(tree.other, "{p}userpkg/__init__.py", "")
    tree.write(tree.other, "{p}userpkg/mod.py", "def f(d):\n    return d == 'cuda'\n")
    added = callers.register_native(tree.p + "nativepkg")
    try:
        assert __import__(tree.p + "nativepkg.mod").mod.f("npu") is False  # found by the others, not rewritten
    finally:
        callers.unregister_native(*added)
    __import__(tree.p + "userpkg.mod")
    assert searched == [tree.p + "nativepkg", tree.p + "userpkg", tree.p + "userpkg.mod"]


def test_a_root_below_a_package_outside_the_roots_is_still_the_users(tree, npu):
    """``ASCEND_SHIM_USER_ROOTS`` naming a directory inside a package: the package is not the user's, the
    modules below the root are, and are rewritten."""
    tree.write(tree.other, "{p}outer/__init__.py", "")
    tree.write(tree.other, "{p}outer/inner/__init__.py", "def g(d):\n    return d.type == 'cuda'\n")
    tree.write(tree.other, "{p}outer/inner/mod.py", "def f(d):\n    return d.type == 'cuda'\n")
    rewrite.install([str(tree.other / (tree.p + "outer") / "inner")])
    mod = __import__(tree.p + "outer.inner.mod", fromlist=["f"])
    assert mod.f(npu) is True
    assert sys.modules[tree.p + "outer.inner"].g(npu) is True  # the root's own __init__.py
    assert not rewrite.is_user_module(tree.p + "outer", str(tree.other / (tree.p + "outer") / "__init__.py"))
