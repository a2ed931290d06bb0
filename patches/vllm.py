"""vLLM on the NPU (seed 003's evaluation step): vllm-ascend as the platform, eager mode, version pairing.

vLLM runs on Ascend through the vllm-ascend platform plugin (entry point ``vllm.platform_plugins``). A CUDA
script's ``vllm.LLM(...)`` then needs: vllm-ascend installed in the *matching* release line (vllm X.Y <->
vllm-ascend X.Y), torch_npu on the same torch base version as torch, numpy < 2 (vllm-ascend's pin), and
``enforce_eager=True`` unless the user asked for graph mode (ACL graph capture is the most fragile part of
vllm-ascend). NOT EXERCISED HERE: vLLM itself is not installed in the test environment (its wheels are CUDA
builds); only :func:`pairing_problems` is unit-tested. ``vllm serve`` (engine args from the CLI) is not patched.
"""
from __future__ import annotations

import functools

from ascend_shim.registry import PatchSet

vllm = PatchSet(
    id="vllm", title="vLLM: vllm-ascend platform check, enforce_eager default, version pairing",
    requires={"vllm": ">=0.9,<0.30"},
    checked_against="source reading only (vllm / vllm-ascend not installable on this CPU box)",
)


def _base(version: str | None) -> tuple[int, ...] | None:
    from packaging.version import Version

    return None if version is None else Version(version).release[:3]


def pairing_problems(found: dict) -> list[str]:
    """Problems with the installed versions ``{dist: version or None}``; [] when the pairing is sound."""
    problems = []
    vl, va = found.get("vllm"), found.get("vllm-ascend") or found.get("vllm_ascend")
    if va is None:
        problems.append("vllm-ascend is not installed: vLLM has no NPU platform (pip install vllm-ascend of "
                        f"the same X.Y release line as vllm {vl})")
    elif vl is not None and _base(vl)[:2] != _base(va)[:2]:
        problems.append(f"vllm {vl} and vllm-ascend {va} are different release lines; install the vllm-ascend "
                        f"{'.'.join(map(str, _base(vl)[:2]))}.x that matches vllm")
    t, tn = found.get("torch"), found.get("torch-npu") or found.get("torch_npu")
    if t is not None and tn is not None and _base(t) != _base(tn):
        problems.append(f"torch_npu {tn} is built for torch {'.'.join(map(str, _base(tn)))}, not torch {t}")
    np_ = found.get("numpy")
    if va is not None and np_ is not None and _base(np_)[0] >= 2:
        problems.append(f"numpy {np_}: vllm-ascend needs numpy<2")
    return problems


@vllm.patch("vllm.entrypoints.llm:LLM.__init__", covers=("vllm.LLM",),
            why="a CUDA script's vllm.LLM(...) on an NPU needs the vllm-ascend platform in the matching release "
                "line, and graph capture off unless asked for.",
            what="before the engine starts: checks the vllm / vllm-ascend / torch / torch_npu / numpy pairing and "
                 "raises a ShimError listing every problem; defaults enforce_eager=True (reported) when the "
                 "caller did not pass it.",
            remove_when="vllm-ascend's graph mode is the reliable default")
def llm_init(ctx):
    from ascend_shim import versions
    from ascend_shim.errors import ShimError

    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        found = {d: versions.installed_version(d) for d in ("vllm", "vllm-ascend", "torch", "torch-npu", "numpy")}
        problems = pairing_problems(found)
        if problems:
            raise ShimError("vLLM cannot run on the NPU with these packages (ascend_shim patch vllm): "
                            + "; ".join(problems))
        if "enforce_eager" not in kwargs:
            kwargs["enforce_eager"] = True
            report.translated("vllm.LLM", "enforce_eager=True (NPU default; pass enforce_eager=False for graphs)")
        return orig(self, *args, **kwargs)

    return __init__


PATCH_SETS = [vllm]
