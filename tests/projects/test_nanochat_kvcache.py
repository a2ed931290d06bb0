"""nanochat.kvcache_host_position: the KV cache position answered from the host, never stale."""
import os
import sys
from pathlib import Path

import pytest
import torch

from ascend_shim.report import REPORT
from ascend_shim.sim import counters

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nanochat_like")
PATCH = "nanochat.kvcache_host_position"


@pytest.fixture
def engine(clean_shim, monkeypatch):
    monkeypatch.syspath_prepend(FIXTURE)
    for name in [m for m in sys.modules if m == "nanochat" or m.startswith("nanochat.")]:
        monkeypatch.delitem(sys.modules, name)
    clean_shim.activate(backend="sim", inherit=False, log_level="off")
    import nanochat.engine

    yield nanochat.engine
    for name in [m for m in sys.modules if m == "nanochat" or m.startswith("nanochat.")]:
        sys.modules.pop(name, None)


def _cache(engine, batch=2):
    return engine.KVCache(batch, 2, 16, 4, 2, "cuda", torch.bfloat16)


def _syncs(fn):
    before = counters.d2h_syncs()
    out = fn()
    return out, counters.d2h_syncs() - before


@pytest.mark.parametrize("inference", [True, False], ids=["inference_mode", "grad_mode"])
def test_the_position_follows_the_cache_with_no_sync(engine, inference):
    assert REPORT.to_dict()["patches"][PATCH]["status"] == "applied"
    with torch.inference_mode(inference):
        cache = _cache(engine)
        steps = [(cache.get_pos, 0), (lambda: cache.advance(5), None), (cache.get_pos, 5),
                 (lambda: cache.advance(1), None), (cache.get_pos, 6), (cache.reset, None), (cache.get_pos, 0)]
        for call, expected in steps:
            out, syncs = _syncs(call)
            assert syncs == 0
            if expected is not None:
                assert out == expected == cache.cache_seqlens[0].item()
        one = _cache(engine, batch=1)
        one.advance(7)
        cache.prefill(one)
        out, syncs = _syncs(cache.get_pos)
        assert (out, syncs) == (7, 0) and cache.cache_seqlens.tolist() == [7, 7]


def test_a_moved_or_replaced_position_is_read_from_the_device(engine):
    cache = _cache(engine)
    cache.advance(3)
    cache.cache_seqlens.add_(2)  # outside the cache's methods: the version counter tells
    out, syncs = _syncs(cache.get_pos)
    assert (out, syncs) == (5, 1)
    cache.cache_seqlens = torch.full((2,), 9, dtype=torch.int32, device="cuda")  # another tensor
    out, syncs = _syncs(cache.get_pos)
    assert (out, syncs) == (9, 1)
    cache.advance(torch.tensor(1))  # not an int: the host position is dropped
    out, syncs = _syncs(cache.get_pos)
    assert (out, syncs) == (10, 1)
    assert _syncs(cache.get_pos) == (10, 0)  # read once, kept again


def test_an_outside_write_to_an_inference_tensor_is_caught_on_the_emulator(engine):
    with torch.inference_mode():
        cache = _cache(engine)
        cache.advance(4)
        cache.cache_seqlens.add_(1)  # no version counter to tell
        with pytest.raises(RuntimeError, match=f"{PATCH}.*kept on the host \\(4\\).*cache_seqlens \\(5\\)"):
            cache.get_pos()


def test_another_writer_in_the_source_skips_the_patch(clean_shim, monkeypatch, tmp_path):
    package = tmp_path / "nanochat"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = Path(FIXTURE, "nanochat", "engine.py").read_text()
    (package / "engine.py").write_text(source + "\n\ndef rewind(cache):\n    cache.cache_seqlens -= 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "nanochat" or m.startswith("nanochat.")]:
        monkeypatch.delitem(sys.modules, name)
    clean_shim.activate(backend="sim", inherit=False, log_level="off")
    try:
        import nanochat.engine

        record = REPORT.to_dict()["patches"][PATCH]
        assert record["status"] == "skipped" and "cache.cache_seqlens -= 1" in record["reason"]
        assert not hasattr(nanochat.engine.KVCache.get_pos, "__wrapped__")  # nanochat's own
    finally:
        for name in [m for m in sys.modules if m == "nanochat" or m.startswith("nanochat.")]:
            sys.modules.pop(name, None)


def test_deactivation_gives_nanochat_its_methods_back(engine, clean_shim):
    cls = engine.KVCache
    assert cls.get_pos.__wrapped__ is not None
    clean_shim.deactivate()
    assert not hasattr(cls.get_pos, "__wrapped__") and cls.get_pos.__module__ == "nanochat.engine"
