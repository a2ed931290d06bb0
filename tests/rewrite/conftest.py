"""Fixtures for the load-time rewrite tests: an ``npu`` torch device type, throw-away user trees."""
import itertools
import sys
import textwrap

import pytest

_counter = itertools.count()


@pytest.fixture(scope="session")
def npu():
    """``torch.device("npu", 0)``. These tests need the ``npu`` device *type* only, never npu memory: the emulator
    (``ascend_shim.sim``) when it is already installed in this process, else the PrivateUse1 backend renamed to
    ``npu`` -- the name the emulator claims too (its ``install()`` accepts a backend already named ``npu``), so a
    later ``sim.install()`` in the same session still works. Not ``sim.install()`` itself: its first call
    builds a C++ extension (~40 s on 2 cores whenever the sources change), far over this suite's budget."""
    import torch

    try:
        from ascend_shim import sim
    except ImportError:
        sim = None
    emulator_installed = sim is not None and getattr(sim, "is_installed", lambda: False)()
    if not emulator_installed and torch._C._get_privateuse1_backend_name() != "npu":
        torch.utils.rename_privateuse1_backend("npu")
    assert torch._C._get_privateuse1_backend_name() == "npu"
    return torch.device("npu", 0)


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """Directories ``proj`` (the root), ``other`` (outside it), ``proj/venv/lib/python3.11/site-packages``
    (a site dir under the root), all on ``sys.path``; ``tree.write(where, name, source)`` writes a module named
    with a unique prefix (``{p}`` in sources). The rewrite cache is a fresh ``tmp_path/cache``. Uninstalls the
    rewrite and forgets the modules afterwards."""
    from ascend_shim import rewrite
    from ascend_shim.rewrite import cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache.reset()

    prefix = f"rwtest{next(_counter)}_"

    class Tree:
        p = prefix
        proj = tmp_path / "proj"
        other = tmp_path / "other"
        site = tmp_path / "proj" / "venv" / "lib" / "python3.11" / "site-packages"

        def write(self, where, name, source):
            path = where / (name.replace("{p}", prefix))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source).replace("{p}", prefix))
            return path

        def forget(self):
            for mod in [m for m in sys.modules if m.startswith(prefix)]:
                del sys.modules[mod]

    t = Tree()
    for d in (t.proj, t.other, t.site):
        d.mkdir(parents=True, exist_ok=True)
        monkeypatch.syspath_prepend(str(d))
    yield t
    rewrite.uninstall()
    t.forget()
    cache.reset()
