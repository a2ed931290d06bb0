"""Load-time rewrite of CUDA device / NCCL backend comparisons in the user's own code.

On an NPU, ``x.device.type == "cuda"``, ``str(dev).startswith("cuda")``, ``"cuda" in str(device)``,
``dist.get_backend() == "nccl"``, ``x.device.type in ("cuda", "mps")``, ``torch.device("cuda") == x.device``
and ``match dev.type: case "cuda":`` are false (tensors report ``npu``, the backend is ``hccl``), and
unmodified code silently takes its CPU branch. For the user's modules only, these comparisons are routed to
helpers that compare *values*: the original comparison first, then the NPU value's CUDA counterpart
(``"npu"``->``"cuda"``, ``"npu:N"``->``"cuda:N"``, ``"hccl"``->``"nccl"``, ``torch.device("npu", N)`` ->
``torch.device("cuda", N)``). See :mod:`.transform` for the exact rules and :mod:`.runtime` for the
semantics.

API::

    install(roots, packages=())      # import hook for the user's modules (+ runpy.run_path for scripts)
    uninstall()
    run_path_rewritten(path, run_name="__main__", init_globals=None)   # runpy.run_path for the main script
    rewrite_source(source, filename) -> (code, [Site, ...])           # the pure transformation

Settings the caller maps from the environment: ``ASCEND_SHIM_REWRITE`` (0 = do not call ``install`` and run
the script with plain ``runpy.run_path``), ``ASCEND_SHIM_USER_PACKAGES`` -> ``packages``. Each rewritten site is
reported once as ``REPORT.rewritten(file, line, snippet, "compares as CUDA for npu" | "compares as NCCL for
hccl")``; each time an NPU value decides a rewritten comparison, a ``translated`` event with detail
``runtime.HIT_DETAIL`` is counted at that line.
"""
from .hook import RewritingLoader, install, is_installed, is_user_module, report_sites, run_path_rewritten, uninstall
from .transform import Site, rewrite_source, rewrite_to_text, rewrite_tree

__all__ = ["install", "uninstall", "is_installed", "is_user_module", "run_path_rewritten", "rewrite_source",
           "rewrite_tree", "rewrite_to_text", "report_sites", "Site", "RewritingLoader"]
