"""The shim's finders stand in the order of :data:`ascend_shim.import_system.SLOTS` whatever the order in which
they are installed and removed, others' finders keep theirs, and only :mod:`ascend_shim.import_system` touches
``sys.meta_path`` / ``sys.path_hooks``."""
from __future__ import annotations

import ast
import importlib.machinery
import itertools
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import ascend_shim
from ascend_shim import hooks, import_system

SLOT_NAMES = [slot.name for slot in import_system.SLOTS]
FRONT = [slot.name for slot in import_system.SLOTS if slot.front]
BACK = [slot.name for slot in import_system.SLOTS if not slot.front]


class _Named:
    """A finder that finds nothing (or what ``answer`` says), known by its name in assertions."""

    def __init__(self, name: str, answer=None):
        self.name, self.answer, self.asked = name, answer, []

    def find_spec(self, fullname, path=None, target=None):
        self.asked.append(fullname)
        return self.answer(fullname, path, target) if self.answer else None

    def __repr__(self) -> str:
        return self.name


@pytest.fixture
def own_slots():
    """The import system's state as the test found it, put back afterwards (the suite's process has the
    emulator's alias finder, on the real layer the prepared package's finder)."""
    installed, placed, meta_path = dict(import_system._installed), list(import_system._placed), list(sys.meta_path)
    for slot in list(import_system._installed):
        import_system.uninstall(slot)
    yield
    import_system._installed.clear()
    import_system._installed.update(installed)
    import_system._placed[:] = placed
    sys.meta_path[:] = meta_path


def _names() -> list[str]:
    return [f.name if isinstance(f, _Named) else "python" for f in sys.meta_path]


def _expected(installed: set[str], foreign_front=(), foreign_back=()) -> list[str]:
    python = ["python"] * sum(not isinstance(f, _Named) for f in sys.meta_path)
    return ([n for n in FRONT if n in installed] + list(foreign_front) + python + list(foreign_back)
            + [n for n in BACK if n in installed])


def test_every_slot_says_why():
    assert len(set(SLOT_NAMES)) == len(SLOT_NAMES)
    assert all(len(slot.why) > 40 for slot in import_system.SLOTS)
    assert SLOT_NAMES.index("virtual") < SLOT_NAMES.index("post_import_hooks") < SLOT_NAMES.index("rewrite")
    assert SLOT_NAMES.index("post_import_hooks") < SLOT_NAMES.index("real_layer") and BACK == ["torch_first"]


@pytest.mark.parametrize("sequence", list(itertools.permutations(SLOT_NAMES)), ids="-".join)
def test_order_holds_whatever_the_install_sequence(own_slots, sequence):
    finders = {name: _Named(name) for name in SLOT_NAMES}
    for i, name in enumerate(sequence):
        import_system.install(name, finders[name])
        assert _names() == _expected(set(sequence[:i + 1]))
    import_system.install(sequence[0], finders[sequence[0]])  # idempotent
    assert _names() == _expected(set(sequence))
    for i, name in enumerate(reversed(sequence)):  # removing one leaves the others in order
        import_system.uninstall(name)
        import_system.uninstall(name)  # idempotent
        assert _names() == _expected(set(sequence[:len(sequence) - i - 1]))
    assert _names() == ["python"] * len(sys.meta_path)


def test_others_finders_keep_their_order_and_removal_restores_them(own_slots):
    ahead, behind = _Named("foreign-ahead"), _Named("foreign-behind")
    sys.meta_path.insert(0, ahead)
    sys.meta_path.append(behind)
    before = list(sys.meta_path)
    import_system.install("rewrite", _Named("rewrite"))
    late = _Named("foreign-late")
    sys.meta_path.insert(0, late)  # another library's finder, put first after ours
    import_system.install("torch_first", _Named("torch_first"))
    import_system.install("virtual", _Named("virtual"))
    assert _names() == _expected({"rewrite", "virtual", "torch_first"}, ["foreign-late", "foreign-ahead"],
                                 ["foreign-behind"])
    for slot in ("virtual", "rewrite", "torch_first"):
        import_system.uninstall(slot)
    sys.meta_path.remove(late)
    assert [id(f) for f in sys.meta_path] == [id(f) for f in before]


def test_installing_into_an_occupied_slot_replaces_its_finder(own_slots):
    old, new = _Named("rewrite"), _Named("rewrite")
    import_system.install("rewrite", old)
    import_system.install("rewrite", new)
    assert not import_system.is_installed(old) and import_system.is_installed(new)
    with pytest.raises(ValueError, match="no import slot 'nowhere'"):
        import_system.install("nowhere", new)


# -- asking the others ----------------------------------------------------------------------------------------
def _spec(name, path, target):
    return importlib.machinery.ModuleSpec(name, None)


def test_spec_from_others_asks_the_finders_behind_only(own_slots):
    front, behind = _Named("ahead", _spec), _Named("behind", _spec)
    me = _Named("me")
    sys.meta_path[:0] = [front, me, behind]
    assert import_system.spec_from_others(me, "x").name == "x"
    assert front.asked == [] and behind.asked == ["x"]
    sys.meta_path.remove(me)  # not installed: every other finder is asked
    assert import_system.spec_from_others(me, "y") is not None and front.asked == ["y"]


def test_spec_from_others_stops_at_a_legacy_finder(own_slots):
    class Legacy:
        def find_module(self, fullname, path=None):
            return None

    me, behind = _Named("me"), _Named("behind", _spec)
    sys.meta_path[:0] = [me, Legacy(), behind]
    assert import_system.spec_from_others(me, "x") is None  # the import system searches itself
    assert behind.asked == []


def test_reentry_guard_answers_none_to_the_same_finder_and_name_in_the_same_thread(own_slots):
    me, other_finder = _Named("me"), _Named("other")
    inner = {}

    def reenter(name, path, target):  # a finder that asks the import system again
        inner[name] = (import_system.spec_from_others(me, name), import_system.spec_from_others(other_finder, name))
        return _spec(name, path, target) if name == "x" else None

    sys.meta_path[:0] = [me, _Named("reentering", reenter), _Named("last", _spec)]
    assert import_system.spec_from_others(me, "x").name == "x"
    mine, others = inner["x"]
    assert mine is None  # me is already asking for "x" in this thread
    assert others is not None and others.name == "x"  # the guard is per finder
    assert import_system.spec_from_others(me, "x") is not None  # and released afterwards


def test_reentry_guard_is_per_thread(own_slots):
    """While one thread's finder is asking for a name, another thread asking for it through the same finder is
    answered, not turned away."""
    me = _Named("me")
    inside, release = threading.Event(), threading.Event()
    answers = {}

    def slow(name, path, target):
        if threading.current_thread().name == "first":
            inside.set()
            release.wait(10)
        return _spec(name, path, target)

    sys.meta_path[:0] = [me, _Named("slow", slow)]
    first = threading.Thread(target=lambda: answers.update(first=import_system.spec_from_others(me, "x")),
                             name="first")
    first.start()
    assert inside.wait(10)
    answers["second"] = import_system.spec_from_others(me, "x")
    release.set()
    first.join(10)
    assert answers["first"] is not None and answers["second"] is not None


# -- what the slots are for -------------------------------------------------------------------------------------
@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-installed-first", "real-layer-installed-first"])
def test_post_import_hooks_run_for_modules_the_real_layer_answers(own_slots, tmp_path, hooks_first):
    """The real layer's finder answers a module no ``sys.path`` entry holds (as it does ``torch_npu``): a hook
    registered on that module runs, whichever finder was installed first."""
    name = f"shimtest_prepared_{hooks_first}"
    (tmp_path / f"{name}.py").write_text("VALUE = 7\n")
    prepared = _Named("real_layer", lambda n, p, t: importlib.machinery.PathFinder.find_spec(n, [str(tmp_path)])
                      if n == name else None)
    seen: list = []
    try:
        if not hooks_first:
            import_system.install("real_layer", prepared)
        hooks.when_imported(name, seen.append)
        if hooks_first:
            import_system.install("real_layer", prepared)
        module = importlib.import_module(name)
        assert seen == [module] and module.VALUE == 7
        assert module.__loader__ is module.__spec__.loader and type(module.__loader__).__name__ == "SourceFileLoader"
    finally:
        sys.modules.pop(name, None)
        hooks.clear()


_FEATURES = """
    import itertools, sys, tempfile
    from pathlib import Path
    from ascend_shim import backend, hooks, import_system, rewrite, virtual
    from ascend_shim.sim.real_layer import loader

    where = Path(tempfile.mkdtemp())
    (where / "site" / "torch_npu").mkdir(parents=True)
    features = {  # slot: (install, remove), each through the feature's own API
        "virtual": (lambda: virtual.register_alias("shimtest_alias", "json"),
                    lambda: virtual.unregister_alias("shimtest_alias")),
        "post_import_hooks": (lambda: hooks.when_imported("shimtest_never_imported", print), hooks.clear),
        "rewrite": (lambda: rewrite.install([str(where)]), rewrite.uninstall),
        "real_layer": (lambda: loader.enable(where), loader.disable),
        "torch_first": (lambda: backend.prepare("sim", ""), lambda: import_system.uninstall("torch_first")),
    }
    finder = {"virtual": lambda: virtual._finder, "post_import_hooks": lambda: hooks._finder,
              "rewrite": lambda: rewrite.hook._finder, "real_layer": lambda: loader._finder,
              "torch_first": lambda: backend._torch_first}
    python = list(sys.meta_path)

    def check(present):
        ours = [f for f in sys.meta_path if not any(f is p for p in python)]
        want = [finder[s]() for s in import_system._SLOT_NAMES if s in present]
        assert [id(f) for f in ours] == [id(f) for f in want], (present, ours)
        front = [s for s in want if s is not backend._torch_first]
        assert sys.meta_path[:len(front)] == front and (sys.meta_path[-1] is backend._torch_first) == (
            "torch_first" in present), sys.meta_path

    for sequence in itertools.permutations(features):
        for i, slot in enumerate(sequence):
            features[slot][0]()
            check(sequence[:i + 1])
        removal = sequence[2:] + sequence[:2]
        for i, slot in enumerate(removal):
            features[slot][1]()
            check(removal[i + 1:])
        assert [id(f) for f in sys.meta_path] == [id(f) for f in python]
    print("ok")
"""


def test_the_features_finders_stand_in_slot_order_whatever_the_sequence(tmp_path):
    """Through each feature's own install and removal, in every order (a fresh interpreter: no finder of the
    suite's process is in the way)."""
    script = tmp_path / "features.py"
    script.write_text(textwrap.dedent(_FEATURES))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


# -- one owner ----------------------------------------------------------------------------------------------------
_OWNED = {"meta_path", "path_hooks"}


def _reaches(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr in _OWNED
    if isinstance(node, ast.ImportFrom):
        return node.module == "sys" and any(alias.name in _OWNED for alias in node.names)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr"):
        return any(isinstance(arg, ast.Constant) and arg.value in _OWNED for arg in node.args)
    return False


def _touches(tree: ast.AST) -> list[int]:
    """Lines that reach ``sys.meta_path`` / ``sys.path_hooks`` (attribute, ``from sys import``, getattr)."""
    return sorted(node.lineno for node in ast.walk(tree) if _reaches(node))  # type: ignore[attr-defined]


def test_only_the_import_system_module_touches_meta_path_and_path_hooks():
    owner = Path(import_system.__file__).resolve()
    offenders = []
    for path in sorted(Path(ascend_shim.__file__).parent.rglob("*.py")):  # the targets included
        if path.resolve() == owner:
            continue
        offenders += [f"{path}:{line}" for line in _touches(ast.parse(path.read_bytes(), str(path)))]
    assert offenders == [], "sys.meta_path / sys.path_hooks outside ascend_shim.import_system: " + ", ".join(offenders)


def test_the_owner_check_sees_each_form():
    source = "import sys\nsys.meta_path.insert(0, f)\nfrom sys import path_hooks\ngetattr(sys, 'meta_path')\n"
    assert _touches(ast.parse(source)) == [2, 3, 4]
    assert _touches(ast.parse('"""sys.meta_path in a docstring"""\n')) == []
