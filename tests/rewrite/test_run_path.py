"""``run_path_rewritten``: runpy.run_path semantics for the main script, with its comparisons rewritten."""
import runpy
import sys
import traceback

import pytest

from ascend_shim import rewrite
from ascend_shim.report import REPORT

SCRIPT = '''\
"""The user's train.py."""
import sys

SEEN = {
    "name": __name__,
    "file": __file__,
    "argv0": sys.argv[0],
    "spec": __spec__,
    "loader": __loader__,
    "package": __package__,
    "is_main_module": sys.modules[__name__].__dict__ is globals(),
    "npu_is_cuda": sys.argv[1] == "cuda",
}


def fail():
    raise RuntimeError("at line 17")


if __name__ == "__main__" and sys.argv[-1] == "fail":
    fail()
'''


@pytest.fixture
def argv():
    saved = sys.argv[:]
    yield
    sys.argv = saved


def test_main_semantics_as_runpy(tree, argv):
    path = str(tree.write(tree.proj, "train.py", SCRIPT))
    main_before = sys.modules["__main__"]
    sys.argv = [path, "npu"]
    g = rewrite.run_path_rewritten(path)
    seen = g["SEEN"]
    assert seen == {"name": "__main__", "file": path, "argv0": path, "spec": None, "loader": None, "package": "",
                    "is_main_module": True, "npu_is_cuda": True}
    assert g["__doc__"] == "The user's train.py." and g["__cached__"] is None
    assert sys.modules["__main__"] is main_before and sys.argv == [path, "npu"]
    # plain runpy gives the same namespace, except the comparison
    ref = runpy.run_path(path, run_name="__main__")["SEEN"]
    assert ref == dict(seen, npu_is_cuda=False)
    rewritten = [e for e in REPORT.events() if e["category"] == "rewritten" and e["file"] == path]
    assert [(e["line"], e["api"]) for e in rewritten] == [(12, 'sys.argv[1] == "cuda"')]


def test_other_run_name_and_init_globals(tree, argv):
    path = str(tree.write(tree.proj, "train.py", SCRIPT))
    sys.argv = [path, "cpu"]
    seen = rewrite.run_path_rewritten(path, run_name="pkg.__mp_main__", init_globals={"EXTRA": 1})
    assert seen["SEEN"]["name"] == "pkg.__mp_main__" and seen["SEEN"]["package"] == "pkg" and seen["EXTRA"] == 1
    assert seen["SEEN"]["npu_is_cuda"] is False


def test_traceback_lines_in_main(tree, argv):
    path = str(tree.write(tree.proj, "train.py", SCRIPT))
    sys.argv = [path, "npu", "fail"]
    with pytest.raises(RuntimeError) as info:
        rewrite.run_path_rewritten(path)
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(info.value.__traceback__) if f.filename == path]
    assert frames == [(path, 21), (path, 17)]


def test_runpy_run_path_is_hooked_while_installed(tree, argv):
    inside = str(tree.write(tree.proj, "inside.py", SCRIPT))
    outside = str(tree.write(tree.other, "outside.py", SCRIPT))
    sys.argv = ["x", "npu"]
    rewrite.install([str(tree.proj)])
    assert runpy.run_path(inside, run_name="__mp_main__")["SEEN"]["npu_is_cuda"] is True
    assert runpy.run_path(outside)["SEEN"]["npu_is_cuda"] is False
    rewrite.uninstall()
    assert runpy.run_path(inside)["SEEN"]["npu_is_cuda"] is False


def test_a_script_run_by_path_follows_the_rule_of_a_module_of_the_same_place(tree, argv):
    """``tune run``: a recipe shipped inside site-packages, run by path, is a library's code (rewritten) unless
    the library is NPU-native, exactly as when it is imported."""
    from ascend_shim import callers

    recipe = str(tree.write(tree.site, "{p}recipes/full_finetune.py", SCRIPT))
    native = str(tree.write(tree.site, "{p}nativelib/commands/train.py", SCRIPT))
    sys.argv = ["x", "npu"]
    rewrite.install([str(tree.proj)])
    added = callers.register_native(tree.p + "nativelib")
    try:
        assert rewrite.hook.script_is_cuda_code(recipe) and not rewrite.hook.script_is_cuda_code(native)
        assert runpy.run_path(recipe, run_name="__main__")["SEEN"]["npu_is_cuda"] is True
        assert runpy.run_path(native, run_name="__main__")["SEEN"]["npu_is_cuda"] is False
    finally:
        callers.unregister_native(*added)


SPAWN = '''\
import multiprocessing
import sys


def work(value):
    return __name__, value == "cuda"


if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        CHILD = pool.map(work, ["npu"])
    PARENT = work("npu")
'''


def test_multiprocessing_spawn_finds_the_main_script(tree, argv):
    path = str(tree.write(tree.proj, "spawner.py", SPAWN))
    sys.argv = [path]
    g = rewrite.run_path_rewritten(path)
    assert g["PARENT"] == ("__main__", True)
    # the child re-ran the script as __mp_main__ from __file__ (it has no shim here, so no rewrite there)
    assert g["CHILD"] == [("__mp_main__", False)]


def test_relative_path_kept_as_given(tree, argv, monkeypatch):
    tree.write(tree.proj, "train.py", SCRIPT)
    monkeypatch.chdir(tree.proj)
    sys.argv = ["train.py", "npu"]
    seen = rewrite.run_path_rewritten("train.py")["SEEN"]
    ref = runpy.run_path("train.py", run_name="__main__")["SEEN"]
    assert seen["file"] == ref["file"] == "train.py" and seen["argv0"] == "train.py"
    assert seen["npu_is_cuda"] is True


def test_directory_main_is_rewritten_by_the_hook(tree, argv):
    app = tree.proj / "app"
    tree.write(app, "__main__.py", SCRIPT)
    sys.argv = ["app", "npu"]
    assert rewrite.run_path_rewritten(str(app))["SEEN"]["npu_is_cuda"] is False  # no hook: runpy as is
    rewrite.install([str(tree.proj)])
    seen = rewrite.run_path_rewritten(str(app))["SEEN"]
    assert seen["npu_is_cuda"] is True and seen["name"] == "__main__"
    assert seen["file"] == str(app / "__main__.py")
