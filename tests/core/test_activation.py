"""The registry's contract: deferred application, gating, isolation, strictness, undo, idempotency, threads."""
import importlib
import sys
import threading
import warnings

import pytest

import ascend_shim
from ascend_shim import errors
from ascend_shim.report import REPORT

TARGET = '''
def greet(*a):
    return "orig"

class Thing:
    def method(self):
        return "orig-method"

    @staticmethod
    def static():
        return "orig-static"

VALUE = 7
'''

PATCHES = '''
from ascend_shim.registry import PatchSet
from ascend_shim.errors import NotNeeded

CALLS = []
demo = PatchSet(id="{p}demo", title="demo set", requires={"pytest": ">=1"})

@demo.patch("{p}target:greet", why="test why", what="wraps greet", remove_when="never: a test")
def greet(ctx):
    CALLS.append("greet")
    orig = ctx.original
    report = ctx.report
    def greet(*a):
        report.translated("{p}target.greet()", "patched")
        return "patched:" + orig(*a)
    return greet

@demo.patch("{p}target:Thing.method", why="t", what="wraps a method", remove_when="never: a test")
def method(ctx):
    orig = ctx.original
    def method(self):
        return "patched:" + orig(self)
    return method

@demo.patch("{p}target:Thing.static", kind="replace", why="t", what="replaces a staticmethod",
             remove_when="never: a test")
def static(ctx):
    orig = ctx.original
    return staticmethod(lambda: "patched:" + orig())

@demo.patch("{p}target:NEW", kind="add", why="t", what="adds NEW", remove_when="never: a test")
def new(ctx):
    return 42

@demo.patch("{p}target:absent", why="t", what="targets a missing attribute", remove_when="never: a test")
def absent(ctx):
    raise AssertionError("must not be called")

@demo.patch("{p}target:VALUE", kind="replace", why="t", what="raises while applying", remove_when="never: a test")
def broken(ctx):
    raise RuntimeError("boom")

@demo.patch("{p}target:greet", kind="wrap", id="{p}demo.not_needed", why="t", what="decides not to act",
            remove_when="never: a test")
def not_needed(ctx):
    raise NotNeeded("real package present")

gated = PatchSet(id="{p}old", title="out of range", requires={"pytest": "<1"})
@gated.patch("{p}target:VALUE", kind="replace", why="t", what="never applies", remove_when="never: a test")
def never(ctx):
    return -1

absent_set = PatchSet(id="{p}absentdist", title="dist not installed", requires={"no-such-dist-xyz": ">=1"})
@absent_set.patch("{p}target:VALUE", kind="replace", why="t", what="never applies", remove_when="never: a test")
def never2(ctx):
    return -2

off = PatchSet(id="{p}off", title="off by default", default_enabled=False)
@off.patch("{p}target:VALUE", kind="replace", why="t", what="sets VALUE to 99", remove_when="never: a test")
def value99(ctx):
    return 99

PATCH_SETS = [demo, gated, absent_set, off]
'''


@pytest.fixture
def demo(make_modules, clean_shim):
    p = make_modules({"target": TARGET, "patches": PATCHES})

    def activate(**kw):
        kw.setdefault("backend", "sim")
        kw.setdefault("inherit", False)
        ascend_shim.activate(patch_modules=f"{p}patches", only=kw.pop("only", f"{p}demo,{p}old,{p}absentdist"), **kw)
        return p

    return p, activate


def _status(pid):
    return REPORT.patches[pid]["status"]


def test_patch_applies_when_target_is_imported_after_activation(demo):
    p, activate = demo
    assert f"{p}target" not in sys.modules
    activate()
    assert _status(f"{p}demo.{p}target.greet") == "pending"
    target = importlib.import_module(f"{p}target")
    assert target.greet() == "patched:orig"
    assert target.Thing().method() == "patched:orig-method"
    assert target.Thing.static() == "patched:orig-static"
    assert target.NEW == 42
    assert _status(f"{p}demo.{p}target.greet") == "applied"


def test_patch_applies_at_once_when_target_was_imported_before(demo):
    p, activate = demo
    target = importlib.import_module(f"{p}target")
    activate()
    assert target.greet() == "patched:orig"
    assert _status(f"{p}demo.{p}target.greet") == "applied"


def test_version_gating_and_statuses(demo):
    p, activate = demo
    activate(only=f"{p}old,{p}absentdist")
    importlib.import_module(f"{p}target")
    assert REPORT.sets[f"{p}old"]["status"] == "skipped"
    assert "outside the supported range <1" in REPORT.sets[f"{p}old"]["reason"]
    assert REPORT.sets[f"{p}absentdist"]["status"] == "inactive"
    assert "no-such-dist-xyz is not installed" in REPORT.sets[f"{p}absentdist"]["reason"]
    assert REPORT.sets[f"{p}demo"]["status"] == "disabled"
    assert sys.modules[f"{p}target"].VALUE == 7  # neither gated set touched it


def test_off_by_default_set_needs_enable(demo):
    p, activate = demo
    activate(only=None, disable=f"{p}demo")
    target = importlib.import_module(f"{p}target")
    assert REPORT.sets[f"{p}off"]["status"] == "disabled"
    assert "ASCEND_SHIM_ENABLE" in REPORT.sets[f"{p}off"]["reason"]
    assert target.VALUE == 7
    ascend_shim.deactivate()
    activate(only=None, disable=f"{p}demo", enable=f"{p}off")
    assert REPORT.sets[f"{p}off"]["status"] == "active"
    assert target.VALUE == 99


def test_failed_and_missing_patches_are_isolated(demo):
    p, activate = demo
    activate()
    target = importlib.import_module(f"{p}target")
    assert _status(f"{p}demo.{p}target.VALUE") == "failed"
    assert "RuntimeError: boom" in REPORT.patches[f"{p}demo.{p}target.VALUE"]["reason"]
    assert _status(f"{p}demo.{p}target.absent") == "skipped"
    assert "target missing" in REPORT.patches[f"{p}demo.{p}target.absent"]["reason"]
    assert _status(f"{p}demo.not_needed") == "not-needed"
    # the others still applied and the module works
    assert target.greet() == "patched:orig"
    assert target.VALUE == 7


def test_strict_mode_turns_a_skip_into_an_error(demo):
    p, activate = demo
    activate(strict=True, only=f"{p}demo")
    with pytest.raises(errors.StrictModeError, match="absent|boom"):
        importlib.import_module(f"{p}target")


def test_strict_mode_rejects_a_set_out_of_range(demo):
    p, activate = demo
    with pytest.raises(errors.StrictModeError, match="outside the supported range"):
        activate(strict=True, only=f"{p}old")
    assert not ascend_shim.is_active()


def _public_state(module):
    state = {name: getattr(module, name) for name in dir(module) if not name.startswith("__")}
    for name, value in list(state.items()):
        if isinstance(value, type):
            state.update({f"{name}.{k}": v for k, v in vars(value).items() if not k.startswith("__")})
    return state


def test_deactivate_restores_every_public_attribute_identically(demo):
    p, activate = demo
    target = importlib.import_module(f"{p}target")
    user = sys.modules.setdefault(f"{p}user", type(sys)(f"{p}user"))
    user.greet = target.greet  # a `from target import greet` copy
    before, user_before = _public_state(target), dict(vars(user))
    activate()
    assert target.greet is not before["greet"] and user.greet is target.greet
    assert ascend_shim.is_patched(f"{p}target.greet")
    assert ascend_shim.original(f"{p}target.greet") is before["greet"]
    ascend_shim.deactivate()
    after = _public_state(target)
    assert after.keys() == before.keys()  # NEW is gone again
    for name, value in before.items():
        assert after[name] is value, name
    assert user.greet is user_before["greet"]
    assert not ascend_shim.is_patched(f"{p}target.greet")


def test_activation_is_idempotent_and_reactivation_reapplies(demo):
    p, activate = demo
    activate()
    activate()  # no-op
    target = importlib.import_module(f"{p}target")
    patches = importlib.import_module(f"{p}patches")
    assert patches.CALLS == ["greet"]
    assert target.greet() == "patched:orig"
    ascend_shim.deactivate()
    ascend_shim.deactivate()  # no-op
    assert target.greet() == "orig"
    activate()
    assert target.greet() == "patched:orig"
    assert patches.CALLS == ["greet", "greet"]


def test_reactivation_with_other_settings_warns_and_keeps_those_in_force(demo):
    p, activate = demo
    activate()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        activate()  # the same settings: silent
        assert caught == []
        activate(strict=True)
    (warning,) = caught
    assert warning.category is RuntimeWarning and warning.filename == __file__  # points at the caller
    assert "strict=True (in force: False)" in str(warning.message) and "deactivate() first" in str(warning.message)
    assert ascend_shim.activation._state.config.strict is False


def test_from_import_copies_are_rebound_and_reported(demo):
    p, activate = demo
    make_user = f"from {p}target import greet\n"
    import types

    user = types.ModuleType(f"{p}consumer")
    sys.modules[user.__name__] = user
    importlib.import_module(f"{p}target")
    exec(make_user, user.__dict__)
    activate()
    assert user.greet() == "patched:orig"
    assert f"{p}consumer.greet" in REPORT.patches[f"{p}demo.{p}target.greet"]["aliases"]


def test_report_attributes_calls_to_the_users_file_and_line(demo, make_modules, tmp_path):
    p, activate = demo
    activate()
    caller_src = f"import {p}target as t\n\ndef call_twice():\n    t.greet()\n    t.greet()\n"
    make_modules({"caller": caller_src.replace(p, "{p}")})
    # the make_modules prefix differs per call; find the caller module by its file
    caller_name = next(f.stem for f in tmp_path.glob("*caller.py"))
    caller = importlib.import_module(caller_name)
    caller.call_twice()
    caller.call_twice()
    events = [e for e in REPORT.events() if e["api"] == f"{p}target.greet()"]
    assert {(e["file"], e["line"], e["count"]) for e in events} == {
        (caller.__file__, 4, 2), (caller.__file__, 5, 2)}


def test_concurrent_imports_from_eight_threads(make_modules, clean_shim):
    targets = {f"t{i}": "def f():\n    return 'orig'\n" for i in range(8)}
    sets = "\n".join(
        f"@s.patch('{{p}}t{i}:f', why='t', what='w', remove_when='never: a test')\n"
        f"def f{i}(ctx):\n    CALLS.append({i})\n    return lambda: 'patched'\n" for i in range(8))
    patches = ("from ascend_shim.registry import PatchSet\nCALLS = []\n"
               "s = PatchSet(id='{p}threads', title='t')\n" + sets + "\nPATCH_SETS = [s]\n")
    p = make_modules({**targets, "patches": patches})
    ascend_shim.activate(backend="sim", patch_modules=f"{p}patches", only=f"{p}threads", inherit=False)
    barrier = threading.Barrier(8)
    results, errors_seen = {}, []

    def worker(i):
        try:
            barrier.wait()
            # every thread imports every module, in a different order
            for j in [(i + k) % 8 for k in range(8)]:
                results[(i, j)] = importlib.import_module(f"{p}t{j}").f()
        except Exception as exc:  # pragma: no cover - reported below
            errors_seen.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors_seen
    assert set(results.values()) == {"patched"} and len(results) == 64
    assert sorted(importlib.import_module(f"{p}patches").CALLS) == list(range(8))  # once per module
