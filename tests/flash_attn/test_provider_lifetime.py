"""The provider exists only while the shim is active: import, metadata, undo, listing."""
import importlib
import importlib.metadata
import subprocess
import sys

import pytest


def test_provided_only_while_active(clean_shim):
    with pytest.raises(ImportError):
        importlib.import_module("flash_attn")
    clean_shim.activate(backend="sim", inherit=False)
    import flash_attn
    import flash_attn_interface  # noqa: F401
    from flash_attn.flash_attn_interface import flash_attn_varlen_func  # noqa: F401

    assert importlib.metadata.version("flash_attn") == flash_attn.__version__ == "2.8.4"
    assert importlib.metadata.version("flash_attn_3") == "3.0.0"
    assert "flash_attn" in importlib.metadata.packages_distributions().get("flash_attn", [])
    clean_shim.deactivate()
    for name in ("flash_attn", "flash_attn.bert_padding", "flash_attn_interface"):
        assert name not in sys.modules
        with pytest.raises(ImportError):
            importlib.import_module(name)
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("flash_attn")


def test_listed():
    out = subprocess.run([sys.executable, "-m", "ascend_shim", "list"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "flash_attn" in out.stdout
