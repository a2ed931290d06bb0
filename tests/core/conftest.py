import itertools
import sys
import textwrap

import pytest

_counter = itertools.count()


@pytest.fixture
def make_modules(tmp_path, monkeypatch):
    """Write throw-away modules under a unique package name and put them on sys.path.

    ``make_modules({"target": "...", "patches": "..."})`` returns the unique prefix; sources may use
    ``{p}`` for it. Modules are removed from ``sys.modules`` afterwards.
    """
    prefix = f"shimtest{next(_counter)}_"
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(files: dict) -> str:
        for name, source in files.items():
            path = tmp_path / (prefix + name + ".py")
            path.write_text(textwrap.dedent(source).replace("{p}", prefix))
        return prefix

    yield write
    for name in [m for m in sys.modules if m.startswith(prefix)]:
        del sys.modules[name]
