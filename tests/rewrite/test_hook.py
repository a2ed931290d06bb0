"""The import hook: which modules are rewritten, line numbers, bytecode caches, reporting, uninstall."""
import importlib
import importlib.util
import json
import os
import sys
import traceback
import types

import pytest

from ascend_shim import hooks, rewrite
from ascend_shim.errors import ConfigError
from ascend_shim.report import REPORT
from ascend_shim.rewrite import RewritingLoader, hook, runtime

MOD = '''\
"""A user module."""
from __future__ import annotations


def check(v):
    return v == "cuda"


def backend_ok(b):
    return b in ("nccl", "gloo")


def boom(d):
    if d.type == "cuda":
        return 1 / 0
    return 0
'''


def _events(category, path):
    return [e for e in REPORT.events() if e["category"] == category and e["file"] == str(path)]


def test_module_under_root_is_rewritten(tree, npu):
    path = tree.write(tree.proj, "{p}mod.py", MOD)
    rewrite.install([str(tree.proj)])
    mod = importlib.import_module(tree.p + "mod")
    assert type(mod.__spec__.loader) is RewritingLoader and mod.__loader__ is mod.__spec__.loader
    assert mod.__file__ == str(path) and mod.__doc__ == "A user module."
    assert mod.check("npu") is True and mod.check("cuda") is True and mod.check("cpu") is False
    assert mod.backend_ok("hccl") is True and mod.backend_ok("mpi") is False
    # rewritten code is never cached
    cache = tree.proj / "__pycache__"
    assert not cache.exists() or not [f for f in os.listdir(cache) if f.startswith(tree.p + "mod.")]


def test_traceback_points_at_the_original_line(tree, npu):
    path = tree.write(tree.proj, "{p}mod.py", MOD)
    rewrite.install([str(tree.proj)])
    mod = importlib.import_module(tree.p + "mod")
    with pytest.raises(ZeroDivisionError) as info:
        mod.boom(npu)  # the rewritten comparison took the CUDA branch (line 14 -> 15)
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno, frame.line) == (str(path), 15, "return 1 / 0")
    with pytest.raises(AttributeError) as info:
        mod.boom(None)  # raised inside the rewritten comparison's operand
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno, frame.line) == (str(path), 14, 'if d.type == "cuda":')
    assert mod.check.__code__.co_firstlineno == 5


def _import_frames(name):
    """The traceback of ``import name`` (the statement: the interpreter trims importlib's frames from it)."""
    with pytest.raises(SyntaxError) as info:
        exec(f"import {name}", {})
    return [(f.filename, f.name) for f in traceback.extract_tb(info.value.__traceback__)]


def test_syntax_error_traceback_as_without_the_shim(tree):
    bad = 'x = 1\nif x == "cuda"\n    pass\n'
    tree.write(tree.proj, "{p}plain_bad.py", bad)
    tree.write(tree.proj, "{p}bad.py", bad)
    plain = _import_frames(tree.p + "plain_bad")
    rewrite.install([str(tree.proj)])
    assert isinstance(importlib.util.find_spec(tree.p + "bad").loader, RewritingLoader)
    assert _import_frames(tree.p + "bad") == plain == [(__file__, "_import_frames"), ("<string>", "<module>")]


def test_a_script_that_activates_the_shim_itself_is_told_it_is_not_rewritten(tree, monkeypatch):
    def notes():
        return [n for n in REPORT.notes if n.startswith(hook.SELF_ACTIVATED_NOTE)]

    script = tree.write(tree.proj, "{p}train.py", 'import ascend_shim\nascend_shim.activate()\n')
    main = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    REPORT.reset()
    rewrite.install([str(tree.proj)])  # __main__ with no file yet: started by `ascend-shim run` or at start-up
    assert notes() == []
    main.__file__ = str(script)  # `python train.py`, which calls activate() itself
    rewrite.install([str(tree.proj)])
    assert len(notes()) == 1 and str(script) in notes()[0] and "ascend-shim run" in notes()[0]
    main.__file__ = str(tree.other / "train.py")  # not the user's code
    REPORT.reset()
    rewrite.install([str(tree.proj)])
    assert notes() == []


def test_report_records_each_site_once_and_counts_npu_hits(tree):
    path = tree.write(tree.proj, "{p}mod.py", MOD)
    rewrite.install([str(tree.proj)])
    mod = importlib.import_module(tree.p + "mod")
    got = {(e["line"], e["api"], e["detail"], e["count"]) for e in _events("rewritten", path)}
    assert got == {(6, 'v == "cuda"', "compares as CUDA for npu", 1),
                   (10, 'b in ("nccl", "gloo")', "compares as NCCL for hccl", 1),
                   (14, 'd.type == "cuda"', "compares as CUDA for npu", 1)}
    for _ in range(3):
        mod.check("npu")
    mod.check("cuda")  # true without the counterpart: no hit
    mod.check("cpu")
    mod.backend_ok("hccl")
    hits = _events("translated", path)
    assert [(e["line"], e["api"], e["detail"], e["count"]) for e in hits] == [
        (6, 'v == "cuda"', runtime.HIT_DETAIL, 3), (10, 'b in ("nccl", "gloo")', runtime.HIT_DETAIL, 1)]
    assert json.dumps(REPORT.to_dict())  # still serialisable


def test_module_outside_roots_is_not_rewritten(tree):
    tree.write(tree.other, "{p}out.py", MOD)
    rewrite.install([str(tree.proj)])
    mod = importlib.import_module(tree.p + "out")
    assert type(mod.__spec__.loader) is not RewritingLoader
    assert mod.check("npu") is False and mod.check("cuda") is True


def test_an_installed_library_is_cuda_code_unless_native(tree):
    """A library in site-packages that is not NPU-native believes in CUDA like the user's code (Lightning builds
    cuda:0, gets npu:0, and must accept it); a native one keeps the real comparisons."""
    from ascend_shim import callers

    tree.write(tree.site, "{p}lib.py", MOD)
    tree.write(tree.site, "{p}nativelib.py", MOD)
    added = callers.register_native(tree.p + "nativelib")
    try:
        rewrite.install([str(tree.proj)])
        lib = importlib.import_module(tree.p + "lib")
        assert lib.check("npu") is True and lib.backend_ok("hccl") is True
        assert rewrite.is_user_module(tree.p + "lib", lib.__file__)
        native = importlib.import_module(tree.p + "nativelib")
        assert native.check("npu") is False and type(native.__spec__.loader) is not RewritingLoader
    finally:
        callers.unregister_native(*added)
    notes = [n for n in REPORT.notes if n.startswith(rewrite.hook.LIBRARIES_NOTE)]
    assert len(notes) == 1 and f"{tree.p}lib (3 sites in 1 modules)" in notes[0], REPORT.notes
    treated, _, native = notes[0].partition("; NPU-native (real device, not rewritten): ")
    assert "torch" in native.partition(" (")[0].split(", ") and tree.p + "nativelib" not in treated


def test_stdlib_torch_and_the_shim_are_never_rewritten(tree):
    import json.decoder

    import pytest as pytest_mod
    import torch

    shim_report = sys.modules["ascend_shim.report"]  # (the package attribute ``report`` is the REPORT object)
    stdlib = os.path.dirname(os.__file__)
    site_dir = os.path.dirname(os.path.dirname(pytest_mod.__file__))
    repo = os.path.dirname(os.path.dirname(shim_report.__file__))
    rewrite.install([stdlib, site_dir, repo, os.path.dirname(torch.__file__)])
    for name, mod in [("json.decoder", json.decoder), ("torch", torch), ("torch.nn.modules.module",
                      sys.modules["torch.nn.modules.module"]), ("ascend_shim.report", shim_report)]:
        assert not rewrite.is_user_module(name, mod.__file__), name
    assert rewrite.is_user_module("pytest", pytest_mod.__file__)  # a library that is not NPU-native
    # a stdlib module imported fresh under a stdlib root keeps its normal loader
    sys.modules.pop("colorsys", None)
    colorsys = importlib.import_module("colorsys")
    assert type(colorsys.__spec__.loader) is not RewritingLoader


def test_user_packages_anywhere(tree):
    tree.write(tree.other, "{p}pkg/__init__.py", "")
    tree.write(tree.other, "{p}pkg/sub.py", MOD)
    tree.write(tree.site, "{p}sitepkg/__init__.py", MOD)
    rewrite.install([str(tree.proj)], packages=[tree.p + "pkg", tree.p + "sitepkg"])
    sub = importlib.import_module(tree.p + "pkg.sub")
    assert sub.check("npu") is True
    sitepkg = importlib.import_module(tree.p + "sitepkg")
    assert sitepkg.check("npu") is True  # named explicitly: rewritten even in a site dir


@pytest.mark.parametrize("bad", ["json", "os.path", "torch", "torch.cuda", "ascend_shim", "torch_npu", "a b"])
def test_refused_package_names(tree, bad):
    with pytest.raises(ConfigError):
        rewrite.install([str(tree.proj)], packages=[bad])
    assert not rewrite.is_installed()


def test_uninstall_stops_rewriting_and_caches_stay_clean(tree):
    tree.write(tree.proj, "{p}mod.py", MOD)
    name = tree.p + "mod"
    importlib.import_module(name)  # un-shimmed import first: writes the normal .pyc
    assert sys.modules[name].check("npu") is False
    tree.forget()
    rewrite.install([str(tree.proj)])
    assert rewrite.is_installed()
    assert importlib.import_module(name).check("npu") is True  # the existing .pyc is not used
    tree.forget()
    rewrite.uninstall()
    assert not rewrite.is_installed()
    import runpy
    assert runpy.run_path is rewrite.hook._ORIGINAL_RUN_PATH
    mod = importlib.import_module(name)
    assert type(mod.__spec__.loader) is not RewritingLoader
    assert mod.check("npu") is False  # and the .pyc now loaded holds the original code


def test_modules_without_sites_load_normally(tree):
    tree.write(tree.proj, "{p}plain.py", "X = 'no device strings here'\n")
    tree.write(tree.proj, "{p}mentions.py", "DEVICE = 'cuda'  # a name, no comparison\n")
    rewrite.install([str(tree.proj)])
    for name in ("plain", "mentions"):
        mod = importlib.import_module(tree.p + name)
        assert not any(k.startswith("__ascend_shim") for k in vars(mod))


@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-installed-first", "rewrite-installed-first"])
def test_post_import_hooks_run_for_rewritten_modules(tree, hooks_first):
    """Whichever is installed first, the post-import finder stands in front and wraps the rewriting loader; the
    module carries the rewriting loader itself."""
    tree.write(tree.proj, "{p}watched.py", MOD)
    name = tree.p + "watched"
    seen = []
    if hooks_first:
        hooks.when_imported(name, seen.append)
    rewrite.install([str(tree.proj)])
    if not hooks_first:
        hooks.when_imported(name, seen.append)
    assert sys.meta_path.index(hooks._finder) < sys.meta_path.index(rewrite.hook._finder)
    mod = importlib.import_module(name)
    assert seen == [mod] and mod.check("npu") is True
    assert type(mod.__spec__.loader) is RewritingLoader and mod.__loader__ is mod.__spec__.loader


def test_run_module_of_a_user_module(tree, capsys):
    import runpy

    tree.write(tree.proj, "{p}main_mod.py", 'import sys\nprint("main", __name__, sys.argv[1] == "cuda")\n')
    rewrite.install([str(tree.proj)])
    argv = sys.argv[:]
    try:
        sys.argv = ["x", "npu"]
        runpy.run_module(tree.p + "main_mod", run_name="__main__", alter_sys=True)
    finally:
        sys.argv = argv
    assert capsys.readouterr().out == "main __main__ True\n"


def test_user_module_shadowing_a_stdlib_name(tree):
    """A user's ``tabnanny.py`` (or test.py, profile.py, code.py) is the user's, not the standard library's."""
    tree.write(tree.proj, "tabnanny.py", MOD)
    saved = sys.modules.pop("tabnanny", None)
    try:
        rewrite.install([str(tree.proj)])
        mod = importlib.import_module("tabnanny")
        assert mod.__file__ == str(tree.proj / "tabnanny.py")
        assert mod.check("npu") is True
    finally:
        sys.modules.pop("tabnanny", None)
        if saved is not None:
            sys.modules["tabnanny"] = saved
