"""One owner of what the shim replaces: every replacement is a change of ``patching``, known to ``is_patched`` and
undone once -- the patches' and the shim's own (``runpy.run_path``, the class of ``os.environ``)."""
import os
import runpy
import types

import pytest

from ascend_shim import patching, rewrite


@pytest.fixture
def owner():
    module = types.ModuleType("shimtest_owner")
    module.f = lambda: "orig"
    return module


def test_locate_says_what_a_target_is_and_why_it_is_not_there():
    found = patching.locate("os.path:join")
    assert (found.owner, found.attr, found.original, found.missing) == (os.path, "join", os.path.join, "")
    assert patching.locate("os.path:no_such_name").missing == "os.path:no_such_name does not exist"
    gone = patching.locate("no_such_module_xyz:f")
    assert gone.owner is None and gone.missing.startswith("ModuleNotFoundError: ")


def test_a_change_is_undone_once(owner):
    change = patching.replace("test.once", owner, "f", lambda: "new")
    patching.revert([change])
    assert owner.f() == "orig"
    owner.f = theirs = lambda: "theirs"
    patching.revert([change])  # undone already: the program's later value stays
    assert owner.f is theirs


def test_keep_later_leaves_what_the_program_put_there_since(owner):
    change = patching.replace("test.later", owner, "f", lambda: "new")
    owner.f = theirs = lambda: "theirs"
    patching.revert([change], keep_later=True)
    assert owner.f is theirs and patching.find_change("shimtest_owner.f") is None


def test_the_rewrite_replaces_run_path_as_a_patch():
    original = runpy.run_path
    rewrite.install([])
    try:
        assert patching.is_patched("runpy.run_path") and runpy.run_path is not original
        assert patching.original("runpy.run_path") is original
        rewrite.install([])  # again: still one change
        assert sum(c.target == "runpy.run_path" for c in patching._changes) == 1
    finally:
        rewrite.uninstall()
    assert runpy.run_path is original and not patching.is_patched("runpy.run_path")


def test_the_followed_environment_is_a_patch_of_os_environ(clean_shim):
    plain = type(os.environ)
    clean_shim.activate("sim", inherit=False, only="environment", log_level="off")
    assert type(os.environ).__name__ == "FollowingEnviron"
    assert clean_shim.is_patched("os.environ.__class__") and clean_shim.original("os.environ.__class__") is plain
    clean_shim.deactivate()
    assert type(os.environ) is plain and not clean_shim.is_patched("os.environ.__class__")
