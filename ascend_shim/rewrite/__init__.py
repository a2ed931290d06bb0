"""Load-time rewrite of CUDA device / NCCL backend comparisons in CUDA code.

On an NPU, ``x.device.type == "cuda"``, ``str(dev).startswith("cuda")``, ``"cuda" in str(device)``,
``dist.get_backend() == "nccl"``, ``x.device.type in ("cuda", "mps")``, ``torch.device("cuda") == x.device``
and ``match dev.type: case "cuda":`` are false (tensors report ``npu``, the backend is ``hccl``), and
unmodified code silently takes its CPU branch, or rejects the device it was handed. In CUDA code -- the
user's modules and every library that is not NPU-native (:mod:`ascend_shim.callers`) -- these comparisons are
routed to helpers that compare *values*: the original comparison first, then the NPU value's CUDA counterpart
(``"npu"``->``"cuda"``, ``"npu:N"``->``"cuda:N"``, ``"hccl"``->``"nccl"``, ``torch.device("npu", N)`` ->
``torch.device("cuda", N)``). See :mod:`.transform` for the exact rules, :mod:`.runtime` for the semantics,
:mod:`.hook` for which modules, :mod:`.cache` for the bytecode kept between runs.

API::

    install(roots, packages=())      # import hook for CUDA code's modules (+ runpy.run_path for scripts)
    uninstall()
    run_path_rewritten(path, run_name="__main__", init_globals=None)   # runpy.run_path for the main script
    rewritten_code(source, path) -> (code or None, [Site, ...])       # one file, cached and reported
    rewrite_source(source, filename) -> (code, [Site, ...])           # the pure transformation

Settings the caller maps from the environment: ``ASCEND_SHIM_REWRITE`` (0 = do not call ``install`` and run
the script with plain ``runpy.run_path``), ``ASCEND_SHIM_USER_ROOTS`` -> ``roots``, ``ASCEND_SHIM_USER_PACKAGES``
-> ``packages`` (and, with ``ASCEND_SHIM_NATIVE_PACKAGES``, :func:`ascend_shim.callers.set_overrides`). Each
rewritten site is reported once as ``REPORT.rewritten(file, line, snippet, "compares as CUDA for npu" |
"compares as NCCL for hccl")``; each time an NPU value decides a rewritten comparison, a ``translated`` event
with detail ``runtime.HIT_DETAIL`` is counted at that line.
"""
from .hook import (RewritingLoader, install, is_installed, is_user_module, report_sites, rewritten_code,
                   run_path_rewritten, uninstall)
from .transform import Site, rewrite_source, rewrite_to_text, rewrite_tree

__all__ = ["install", "uninstall", "is_installed", "is_user_module", "run_path_rewritten", "rewritten_code",
           "rewrite_source", "rewrite_tree", "rewrite_to_text", "report_sites", "Site", "RewritingLoader"]
