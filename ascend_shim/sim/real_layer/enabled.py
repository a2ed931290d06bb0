"""The prepared package the real layer runs in this process: where it lies and what ``fetch-torch-npu`` recorded.

Apart from :mod:`.loader`, which sets it, so that the stand-in native layer (:mod:`.native`, :mod:`.ops`) reads it
without importing the loader back: the layer's modules depend one way, loader -> native -> ops, c10d -> here.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

_site: str | None = None


def enabled_site() -> str | None:
    """The enabled package's ``site`` directory, whence ``import torch_npu`` loads; None while none is enabled."""
    return _site


def set_site(site: str | None) -> None:
    """Set by the loader, under its lock; read without one (a plain attribute read)."""
    global _site
    _site = site


@functools.lru_cache(maxsize=1)
def metadata(where: str) -> dict:
    """``prepared.json`` of the package prepared in ``where``: read once, it does not change while it is in use."""
    return json.loads((Path(where) / "prepared.json").read_text())


def prepared_metadata() -> dict:
    """``prepared.json`` of the enabled package (its version, op schemas, ops with NPU kernels)."""
    site = _site
    if site is None:
        raise RuntimeError("the real torch_npu layer is not enabled in this process")
    return metadata(str(Path(site).parent))
