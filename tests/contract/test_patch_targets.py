"""Every torch.npu / torch_npu name a patch maps onto exists in every torch_npu release its torch range admits,
or the patch declares how it copes where it does not (skipped and reported, or a reported fallback)."""
from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest
import torch

import ascend_shim
import ascend_shim.targets as patches_pkg
from ascend_shim.registry import PatchSet
from ascend_shim.report import REPORT
from ascend_shim.versions import satisfies

_NPU_REF = re.compile(r"\b(?:torch\.npu|torch_npu\.npu)\.([A-Za-z_][A-Za-z0-9_]*)")
_OP_REF = re.compile(r"\btorch_npu\.(npu_[A-Za-z0-9_]+)")


def _patch_modules():
    for info in pkgutil.walk_packages(patches_pkg.__path__, patches_pkg.__name__ + "."):
        module = importlib.import_module(info.name)
        sets = [s for s in getattr(module, "PATCH_SETS", []) if isinstance(s, PatchSet)]
        yield module, sets


def _admitted(releases, sets):
    """Releases whose paired torch (same version) some set of the module admits (no torch bound: all)."""
    specs = [dict(s.requires).get("torch") for s in sets] or [None]
    return {v: rel for v, rel in releases.items()
            if any(spec is None or satisfies(re.match(r"\d+\.\d+\.\d+", v).group(0), spec) for spec in specs)}


def _referenced(module) -> tuple[set[str], set[str]]:
    source = Path(module.__file__).read_text()
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith("#")]
    text = "\n".join(lines)
    names = set(_NPU_REF.findall(text)) - {"md", "__all__"}
    return names | set(getattr(module, "NPU_NAMES", {})), set(_OP_REF.findall(text))


def test_declared_and_referenced_names_exist_in_every_admitted_release(releases):
    problems, checked = [], 0
    for module, sets in _patch_modules():
        names, ops = _referenced(module)
        declared = getattr(module, "NPU_NAMES", {})
        for version, rel in _admitted(releases, sets).items():
            for name in sorted(names):
                checked += 1
                if name not in rel["npu_names"] and declared.get(name) not in ("skip", "fallback"):
                    problems.append(f"{module.__name__}: torch.npu.{name} missing in torch_npu {version}")
            for op in sorted(ops):
                checked += 1
                if op not in rel["ops"]:
                    problems.append(f"{module.__name__}: torch_npu.{op} not in the manifest of {version}")
    assert checked > 500
    assert not problems, "\n".join(problems)


def test_torch_cuda_declares_what_it_maps_onto():
    from ascend_shim.targets import torch_cuda

    assert set(torch_cuda.ALIASES) | set(torch_cuda.DEVICE_ARG) <= set(torch_cuda.NPU_NAMES)
    assert set(torch_cuda.NPU_NAMES.values()) <= {"skip", "fallback", "required"}


def test_names_missing_in_some_admitted_release_are_the_known_ones(releases):
    from ascend_shim.targets import torch_cuda

    missing = {name for rel in _admitted(releases, torch_cuda.PATCH_SETS).values()
               for name in torch_cuda.NPU_NAMES if name not in rel["npu_names"]}
    # verified in the wheels: absent from 2.4-2.6 and/or 2.8-2.9 (newest post-release of each line)
    assert {"ExternalStream", "ipc_collect", "host_memory_stats", "get_per_process_memory_fraction"} <= missing
    assert all(torch_cuda.NPU_NAMES[name] == "skip" for name in missing)


@pytest.mark.parametrize("name", ["ExternalStream", "ipc_collect", "host_memory_stats"])
def test_a_release_without_the_name_skips_and_reports_the_patch(clean_shim, monkeypatch, name):
    monkeypatch.delattr(torch.npu, name)
    assert not hasattr(torch.npu, name)
    ascend_shim.activate(backend="sim", only="torch_cuda")
    info = REPORT.patches[f"torch_cuda.torch.cuda.{name}"]
    assert info["status"] == "skipped", info
    assert f"torch.npu.{name} is not available here" in info["reason"]
    assert REPORT.patches["torch_cuda.torch.cuda.empty_cache"]["status"] == "applied"
