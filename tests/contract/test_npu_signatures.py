"""The emulated torch.npu takes the paired release's parameters, and the torch.cuda patches bind on the real ones.

The manifest records the Python signatures of torch_npu.npu's public functions and classes in every release
(read from the wheels' source, never imported). The emulator's must be the paired release's (names, order, kinds,
defaults); and the patches mapping torch.cuda onto torch.npu must apply, and take CUDA's keywords, on every
release their torch range admits.
"""
from __future__ import annotations

import ast
import inspect

import pytest
import torch

import ascend_shim
from ascend_shim.report import REPORT

from .conftest import builtin_layer_only
from .test_patch_targets import _admitted

KINDS = {inspect.Parameter.POSITIONAL_ONLY: "posonly", inspect.Parameter.POSITIONAL_OR_KEYWORD: "pos",
         inspect.Parameter.VAR_POSITIONAL: "varargs", inspect.Parameter.KEYWORD_ONLY: "kw",
         inspect.Parameter.VAR_KEYWORD: "varkw"}
REQUIRED = "<required>"


class _Source(str):
    """A default that is an expression, not a literal (``sys.maxsize``): compared as source text."""


def _default(source):
    if source is None:
        return REQUIRED
    try:
        return ast.literal_eval(source)
    except ValueError:
        return _Source(source)


def _real(params) -> list:
    return [(name, kind, _default(default)) for name, kind, default in params]


def _emulated(path: str) -> list:
    obj = torch.npu
    for part in path.split("."):
        obj = getattr(obj, part)
    return [(p.name, KINDS[p.kind], REQUIRED if p.default is p.empty else p.default)
            for p in inspect.signature(obj).parameters.values()]


def _same(mine, theirs) -> bool:
    if [m[:2] for m in mine] != [t[:2] for t in theirs]:
        return False
    for (_, _, a), (_, _, b) in zip(mine, theirs, strict=True):
        if isinstance(b, _Source):
            continue  # an expression default: presence is what the caller sees
        if a != b or type(a) is not type(b):
            return False
    return True


def _recorded(paired) -> dict:
    return {name: entry for name, entry in paired["npu_signatures"].items() if entry["params"] is not None}


def test_the_manifest_records_the_signatures_the_patches_rely_on(releases):
    for version, rel in releases.items():
        sigs = rel["npu_signatures"]
        assert sigs["get_device_name"]["params"] == [["device_name", "pos", "None"]], version
        assert sigs["memory._record_memory_history"]["params"][0] == ["enabled", "pos", "'all'"], version
        assert len(sigs) > 100, version


@builtin_layer_only
def test_every_recorded_signature_is_the_emulator_s(paired):
    drift = [f"torch.npu.{name}: real {_real(entry['params'])}, emulated {_emulated(name)}"
             for name, entry in sorted(_recorded(paired).items()) if not _same(_emulated(name), _real(entry["params"]))]
    assert not drift, "\n".join(drift)


def test_the_known_renames():
    assert list(inspect.signature(torch.npu.get_device_name).parameters) == ["device_name"]
    assert list(inspect.signature(torch.npu.get_device_properties).parameters) == ["device_name"]
    assert torch.npu.get_device_name(device_name="npu:0") == torch.npu.get_device_name(0)
    assert torch.npu.is_bf16_supported(including_emulation=True) is True
    with torch.npu.StreamContext(stream_ctx=torch.npu.current_stream()):
        pass


# ------------------------------------------------------------------ the torch.cuda patches on the real signatures

def _stand_in(name: str, params: list, calls: list):
    """A function with torch_npu's signature ``params`` that records how it was called."""
    kinds = {kind: k for k, kind in KINDS.items()}
    signature = inspect.Signature([
        inspect.Parameter(n, kinds[kind], default=inspect.Parameter.empty if default is None else _default(default))
        for n, kind, default in params])

    def stand_in(*args, **kwargs):
        calls.append((name, dict(signature.bind(*args, **kwargs).arguments)))
        return name

    stand_in.__name__ = stand_in.__qualname__ = name
    stand_in.__signature__ = signature
    return stand_in


def _torch_cuda_functions(rel) -> dict:
    from ascend_shim.targets import torch_cuda

    names = set(torch_cuda.ALIASES) | set(torch_cuda.DEVICE_ARG)
    return {name: entry["params"] for name, entry in rel["npu_signatures"].items()
            if name in names and entry["kind"] == "function"}


def test_torch_cuda_patches_apply_on_every_admitted_release_s_signatures(releases, clean_shim, monkeypatch):
    from ascend_shim.targets import torch_cuda

    problems = []
    for version, rel in _admitted(releases, torch_cuda.PATCH_SETS).items():
        calls: list = []
        with monkeypatch.context() as patch:
            for name, params in _torch_cuda_functions(rel).items():
                patch.setattr(torch.npu, name, _stand_in(name, params, calls))
            ascend_shim.activate(backend="sim", only="torch_cuda")
            try:
                for name in _torch_cuda_functions(rel):
                    info = REPORT.patches[f"torch_cuda.torch.cuda.{name}"]
                    if info["status"] != "applied":
                        problems.append(f"{version}: torch.cuda.{name} {info['status']}: {info.get('reason')}")
                # CUDA's keywords reach torch_npu's parameters, the device translated
                torch.cuda.get_device_name(device="cuda:1")
                torch.cuda.can_device_access_peer(device=0, peer_device=1)
                torch.cuda.is_bf16_supported(including_emulation=False)
                torch.cuda.memory_allocated(device="cuda")
                torch.cuda.is_bf16_supported(True)
                with pytest.raises(TypeError):  # an argument too many is refused, never dropped
                    torch.cuda.get_device_name(0, 1)
            finally:
                ascend_shim.deactivate()
        assert ("get_device_name", {"device_name": "npu:1"}) in calls, (version, calls)
        assert ("can_device_access_peer", {"device_id": 0, "peer_device_id": 1}) in calls, (version, calls)
        assert ("memory_allocated", {"device": "npu"}) in calls, (version, calls)
        assert calls[2][0] == "is_bf16_supported" and calls[2][1] in ({}, {"including_emulation": False}), calls
        assert calls[4][0] == "is_bf16_supported" and calls[4][1] in ({}, {"including_emulation": True}), calls
    assert not problems, "\n".join(problems)


def test_the_emulator_s_torch_cuda_patches_all_apply(clean_shim):
    from ascend_shim.targets import torch_cuda

    ascend_shim.activate(backend="sim", only="torch_cuda")
    skipped = {pid: info.get("reason") for pid, info in REPORT.patches.items()
               if pid.startswith("torch_cuda.") and info["status"] == "skipped"}
    assert not skipped, skipped
    assert torch.cuda.get_device_name(device="cuda:0") == torch.npu.get_device_name(0)
    assert set(torch_cuda.DEVICE_ARG.values()) == {"device"}
