"""Twinkle's find_spec('megatron.core') (twinkle/utils/framework.py) on a box without Megatron: None, as for any
absent module, instead of the ModuleNotFoundError Python raises for the missing parent package."""
import importlib
import sys

import pytest


def test_find_spec_of_a_module_whose_parent_is_absent(clean_shim, monkeypatch):
    from twinkle.utils import framework

    monkeypatch.setitem(sys.modules, "megatron", None)  # as where megatron-core is not installed
    for name in [m for m in sys.modules if m.startswith("megatron.")]:  # imported by an earlier test
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ModuleNotFoundError):
        framework.importlib.util.find_spec("megatron.core")  # what Twinkle's NPU branch met
    clean_shim.activate(backend="sim", inherit=False)
    view = framework.importlib
    assert view is not importlib
    assert view.util.find_spec("megatron.core") is None
    assert view.util.find_spec("json.decoder").name == "json.decoder"  # every other answer is Python's own
    assert view.util.find_spec("json.no_such_module") is None
    assert view.util.resolve_name is importlib.util.resolve_name and view.import_module is importlib.import_module
    clean_shim.deactivate()
    assert framework.importlib is importlib
