"""Caller-aware answers are decided per calling module (by its name and where its code lives), never shared between
look-alike functions; a call with no Python caller is CUDA code."""
import json
import subprocess
import sys

import pytest

from ascend_shim import callers

from tests.subprocess_env import shim_free_env

SOURCE = "def ask():\n    return probe()\n"


def _function(module_name, probe):
    namespace = {"__name__": module_name, "probe": probe}
    exec(compile(SOURCE, "<same file name>", "exec"), namespace)
    return namespace["ask"]


def test_identical_functions_in_a_native_library_and_user_code_get_their_own_answers():
    probe = lambda: callers.caller_is_native(depth=2)  # noqa: E731 - the frame asking is ask()
    callers.register_native("shimtest_native_lib")
    try:
        library_ask = _function("shimtest_native_lib.module", probe)
        user_ask = _function("user_module", probe)
        assert library_ask.__code__ == user_ask.__code__  # equal by value: the trap a value-keyed cache falls in
        assert library_ask() is True
        assert user_ask() is False
        assert library_ask() is True
    finally:
        callers.unregister_native("shimtest_native_lib")
    assert library_ask() is False


def test_native_scope_marks_everything_inside_as_native():
    ask = _function("user_module", lambda: callers.caller_is_native(depth=2))
    assert ask() is False
    with callers.native_scope():
        assert ask() is True
    assert ask() is False


def test_a_call_with_no_python_caller_is_cuda_code():
    """Straight from C (a thread ``_thread`` starts, an atexit callback): no frame above the patched function."""
    import _thread
    import threading

    answers, done = [], threading.Event()

    def patched():  # stands for a caller-aware patch, as torch.cuda.is_available is: asks about its caller
        try:
            answers.append(callers.caller_is_native(depth=2))
        finally:
            done.set()

    _thread.start_new_thread(patched, ())
    assert done.wait(30)
    assert answers == [False]


def _installed(site, name, *, editable_from=None):
    """The metadata of an installed distribution ``name`` in ``site`` (an editable install of ``editable_from``)."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if editable_from is not None:
        url = {"url": editable_from.as_uri(), "dir_info": {"editable": True}}
        (info / "direct_url.json").write_text(json.dumps(url))


def _function_in(module_name, filename):
    namespace = {"__name__": module_name, "probe": lambda: callers.caller_is_native(depth=2)}
    exec(compile(SOURCE, str(filename), "exec"), namespace)
    return namespace["ask"]


def test_a_users_module_named_like_a_native_library_is_cuda_code(tmp_path, monkeypatch, make_modules):
    """``proj/transformers.py`` is the user's, not transformers: judged by where it lives as well as its name."""
    p = make_modules({})  # a unique prefix for this test's package names
    site, proj, checkout = tmp_path / "lib" / "site-packages", tmp_path / "proj", tmp_path / "src" / "checkout"
    _installed(site, p + "lib")
    _installed(site, p + "editable", editable_from=checkout)
    _installed(site, p + "project")
    monkeypatch.syspath_prepend(str(site))
    callers.register_native(p + "lib", p + "editable", p + "uninstalled")
    callers.register_native(p + "project", checkouts=True)  # a project gate: its source checkout is the library
    try:
        assert _function_in(p + "lib", proj / (p + "lib.py"))() is False  # the user's file
        assert _function_in(p + "lib.sub", proj / (p + "lib") / "sub.py")() is False  # ... or package
        assert _function_in(p + "lib.sub", site / (p + "lib") / "sub.py")() is True  # the installed library
        assert _function_in(p + "editable", checkout / "src" / (p + "editable.py"))() is True  # installed -e
        assert _function_in(p + "editable", proj / (p + "editable.py"))() is False
        assert _function_in(p + "uninstalled", tmp_path / "repo" / (p + "uninstalled.py"))() is True  # a checkout
        assert _function_in(p + "project", tmp_path / "repo" / (p + "project.py"))() is True
        undo = callers.set_overrides(native=[p + "lib"])  # the settings' word holds wherever the code lives
        try:
            assert _function_in(p + "lib", proj / (p + "lib.py"))() is True
        finally:
            undo()
    finally:
        callers.unregister_native(p + "lib", p + "editable", p + "uninstalled", p + "project")


_SHADOW = """
import torch

AVAILABLE = torch.cuda.is_available()


def is_cuda(t):
    return t.is_cuda
"""
_MAIN = """
import torch

import accelerate
import transformers

x = torch.ones(1, device="cuda")
print(transformers.__file__, transformers.AVAILABLE, transformers.is_cuda(x))
print(accelerate.__file__, accelerate.AVAILABLE, accelerate.is_cuda(x))
"""


@pytest.mark.slow
def test_a_users_transformers_py_sees_cuda_in_a_run(tmp_path):
    """As a user runs it: ``proj/transformers.py`` and ``proj/accelerate/`` shadow the installed NPU-native
    libraries (their patch sets active) and are CUDA code like the rest of the project."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    (tmp_path / "transformers.py").write_text(_SHADOW)
    (tmp_path / "accelerate").mkdir()
    (tmp_path / "accelerate" / "__init__.py").write_text(_SHADOW)
    (tmp_path / "main.py").write_text(_MAIN)
    proc = subprocess.run([sys.executable, "-m", "ascend_shim", "run", "--simulate", "main.py"], cwd=tmp_path,
                          env=shim_free_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[:2] == [f"{tmp_path / 'transformers.py'} True True",
                                            f"{tmp_path / 'accelerate' / '__init__.py'} True True"], proc.stdout
