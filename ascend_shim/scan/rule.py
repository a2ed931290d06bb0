"""What ``scan`` says about the rule for who believes in CUDA (:mod:`ascend_shim.callers`).

A static scan sees the repository's own CUDA code; the CUDA code inside the libraries it imports (Lightning's
``device.type != "cuda"`` checks, megatron-core's ``param.type() in ['torch.cuda.FloatTensor', ...]``) is
handled at run time by the same rule and is no finding here. So the scan names the libraries the repository
imports and how a run will treat them: as CUDA code (told CUDA is available, npu devices compared as CUDA,
``x.type()`` read as ``torch.cuda.*``) or as NPU-native (the real device), from the same declarations and
settings a run uses.
"""
from __future__ import annotations

import sys
import textwrap

from .. import callers

#: the text every explanation starts with
RULE = ("The repository's code and every library it imports that is not NPU-native are CUDA code at run time: told "
        "CUDA is available, their npu devices compared as CUDA (comparisons rewritten as modules load) and "
        "x.type() read as torch.cuda.*. NPU-native libraries (torch, torch_npu and those the patch sets "
        "declare) see the real device. Checks inside libraries are handled by this rule and are not findings here.")


def classify_imports(imported, own_names, patch_sets, selected_patch_ids, config) -> dict:
    """``{"cuda_code": [...], "native": [...]}``: the third-party top-level packages in ``imported`` (not the
    standard library, not ``own_names``), as a run with these patch sets and settings would treat them."""
    declared = set(callers.ALWAYS_NATIVE)
    for s in patch_sets:
        if f"{s.id}.native" in selected_patch_ids:
            declared.update(s.native)
    override = callers.overrides_of(config.user_packages, config.native_packages)
    names = sorted(n for n in imported if n not in sys.stdlib_module_names and n not in own_names
                   and n not in ("__future__", "ascend_shim"))
    native = [n for n in names if callers.decide(n, declared, override)]
    return {"cuda_code": [n for n in names if n not in native], "native": native}


def explain(rule: dict) -> list[str]:
    """The lines of the human report."""
    return [*textwrap.wrap(f"rule: {RULE}", 110, subsequent_indent="  "),
            "  imported, treated as CUDA code: " + (", ".join(rule["cuda_code"]) or "none"),
            "  imported, NPU-native: " + (", ".join(rule["native"]) or "none"),
            "  to change it for a package: ASCEND_SHIM_USER_PACKAGES=pkg (CUDA code), "
            "ASCEND_SHIM_NATIVE_PACKAGES=pkg (NPU-native)"]
