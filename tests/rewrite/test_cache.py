"""Rewritten bytecode kept between runs: reused while nothing changed, never from a place others can write."""
import importlib
import logging
import os
import sys

import pytest

from ascend_shim import rewrite
from ascend_shim.rewrite import cache, hook

MOD = "def check(v):\n    return v == 'cuda'\n"


@pytest.fixture
def writes_bytecode(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


@pytest.fixture
def rewrites(monkeypatch):
    """The files the rewrite actually parses (a cache hit parses nothing)."""
    seen = []
    real = hook.rewrite_source
    monkeypatch.setattr(hook, "rewrite_source", lambda source, path: seen.append(path) or real(source, path))
    return seen


def _load(tree, name):
    tree.forget()
    return importlib.import_module(tree.p + name)


def _entries():
    where = cache.location()
    return sorted(os.listdir(where)) if os.path.isdir(where) else []


def test_a_module_is_rewritten_once_then_loaded_from_the_cache(tree, writes_bytecode, rewrites):
    path = tree.write(tree.proj, "{p}mod.py", MOD)
    rewrite.install([str(tree.proj)])
    assert _load(tree, "mod").check("npu") is True
    assert rewrites == [str(path)] and len(_entries()) == 1
    mod = _load(tree, "mod")
    assert mod.check("npu") is True and rewrites == [str(path)]  # the second import parsed nothing
    assert mod.check.__code__.co_filename == str(path)
    mode = os.stat(cache.location()).st_mode & 0o777
    assert mode == 0o700 and os.stat(os.path.join(cache.location(), _entries()[0])).st_mode & 0o077 == 0


def test_a_changed_source_is_rewritten_again(tree, writes_bytecode, rewrites):
    path = tree.write(tree.proj, "{p}mod.py", MOD)
    rewrite.install([str(tree.proj)])
    _load(tree, "mod")
    path.write_text(MOD + "\n\ndef other(v):\n    return v != 'cuda'\n")
    mod = _load(tree, "mod")
    assert mod.other("npu") is False and rewrites == [str(path), str(path)]
    assert len(_entries()) == 1  # one entry per source file, replaced


def test_nothing_to_rewrite_is_remembered_and_loads_normally(tree, writes_bytecode, rewrites):
    tree.write(tree.proj, "{p}mentions.py", "DEVICE = 'cuda'  # a name, no comparison\n")
    tree.write(tree.proj, "{p}plain.py", "X = 1\n")
    rewrite.install([str(tree.proj)])
    for _ in range(2):
        for name in ("mentions", "plain"):
            mod = _load(tree, name)
            assert not any(k.startswith("__ascend_shim") for k in vars(mod))
    assert len(rewrites) == 1 and len(_entries()) == 1  # the file that never mentions cuda is not even parsed


def test_no_writing_under_dont_write_bytecode(tree, monkeypatch, rewrites):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    tree.write(tree.proj, "{p}mod.py", MOD)
    rewrite.install([str(tree.proj)])
    assert _load(tree, "mod").check("npu") is True and _load(tree, "mod").check("npu") is True
    assert len(rewrites) == 2 and _entries() == []


def test_a_cache_directory_others_can_write_is_not_used(tree, writes_bytecode, rewrites, monkeypatch):
    logged = []  # on a logger of the test's own: earlier tests of a session can keep the shared one from pytest
    logger = logging.Logger("ascend_shim", logging.WARNING)
    logger.addHandler(type("Lines", (logging.Handler,), {"emit": lambda self, record: logged.append(record)})())
    monkeypatch.setattr(cache, "log", logger)
    tree.write(tree.proj, "{p}mod.py", MOD)
    rewrite.install([str(tree.proj)])
    _load(tree, "mod")
    os.chmod(cache.location(), 0o777)
    cache.reset()
    assert _load(tree, "mod").check("npu") is True  # still rewritten, compiled afresh
    assert len(rewrites) == 2 and any("writable by others" in r.getMessage() for r in logged)


def test_an_entry_others_can_write_is_ignored(tree, writes_bytecode, rewrites):
    tree.write(tree.proj, "{p}mod.py", MOD)
    rewrite.install([str(tree.proj)])
    _load(tree, "mod")
    entry = os.path.join(cache.location(), _entries()[0])
    os.chmod(entry, 0o666)
    assert _load(tree, "mod").check("npu") is True and len(rewrites) == 2


def test_a_symlinked_cache_directory_is_not_followed(tree, writes_bytecode, rewrites, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.makedirs(os.path.dirname(cache.location()), exist_ok=True)
    os.symlink(elsewhere, cache.location())
    tree.write(tree.proj, "{p}mod.py", MOD)
    rewrite.install([str(tree.proj)])
    assert _load(tree, "mod").check("npu") is True and _load(tree, "mod").check("npu") is True
    assert len(rewrites) == 2 and os.listdir(elsewhere) == []


def test_a_corrupt_entry_is_rewritten(tree, writes_bytecode, rewrites):
    tree.write(tree.proj, "{p}mod.py", MOD)
    rewrite.install([str(tree.proj)])
    _load(tree, "mod")
    entry = os.path.join(cache.location(), _entries()[0])
    with open(entry, "r+b") as fh:
        data = fh.read()
        fh.seek(0)
        fh.write(data[:-7])
        fh.truncate()
    assert _load(tree, "mod").check("npu") is True and len(rewrites) == 2


def test_a_module_whose_bytecode_names_no_cuda_is_not_even_read(tree, writes_bytecode, rewrites, monkeypatch):
    """Its source may say cuda in a comment: the bytecode Python loads anyway decides, and holds no such string."""
    path = tree.write(tree.proj, "{p}comment.py", "# runs on cuda and nccl\nX = 1\n")
    rewrite.install([str(tree.proj)])
    assert _load(tree, "comment").X == 1  # the first import compiles the source (and writes __pycache__)
    read = []
    real = hook.RewritingLoader.get_data
    monkeypatch.setattr(hook.RewritingLoader, "get_data", lambda self, p: read.append(p) or real(self, p))
    assert _load(tree, "comment").X == 1
    assert str(path) not in read and len(read) == 1 and rewrites == [str(path)]  # parsed by the first import only


def test_a_clean_bytecode_answer_is_kept_for_the_next_run(tree, writes_bytecode, monkeypatch):
    tree.write(tree.proj, "{p}plain.py", "X = 1\n")
    rewrite.install([str(tree.proj)])
    _load(tree, "plain")  # compiles, writes __pycache__
    searched = []
    real = cache.mentions_cuda
    monkeypatch.setattr(cache, "mentions_cuda", lambda data: searched.append(len(data)) or real(data))
    _load(tree, "plain")
    assert len(searched) == 1  # this run searched the bytecode once
    cache._keep_clean()  # what the process does at exit
    cache.reset()  # a new run
    _load(tree, "plain")
    assert len(searched) == 1  # the kept answer: no search
    (tree.proj / (tree.p + "plain.py")).write_text("X = 2  # a longer source: new bytecode header\n")
    assert _load(tree, "plain").X == 2 and len(searched) == 2


def test_a_source_edited_to_compare_with_cuda_is_rewritten_despite_its_clean_stale_bytecode(tree, writes_bytecode):
    path = tree.write(tree.proj, "{p}edited.py", "def check(v):\n    return v\n")
    rewrite.install([str(tree.proj)])
    _load(tree, "edited")  # clean bytecode written
    _load(tree, "edited")  # ... and found clean
    path.write_text(MOD)
    assert _load(tree, "edited").check("npu") is True
