"""Activate ascend_shim in every Python process of this environment when ASCEND_SHIM=1.

For users who cannot change their launch command: copy this file into the environment's site-packages (or
any directory on PYTHONPATH), then `export ASCEND_SHIM=1` (and e.g. ASCEND_SHIM_BACKEND=sim). With ASCEND_SHIM
unset or 0 it does nothing, and it never stops Python from starting.
"""
import os
import sys

if os.environ.get("ASCEND_SHIM", "").strip().lower() in ("1", "true", "yes", "on"):
    try:
        import ascend_shim

        ascend_shim.activate(root=False)  # summary at exit only from processes that patched something
    except Exception as exc:  # an environment problem must not make every python unusable
        if os.environ.get("ASCEND_SHIM_STRICT", "").strip().lower() in ("1", "true", "yes", "on"):
            raise
        print(f"ascend_shim: not activated: {type(exc).__name__}: {exc}", file=sys.stderr)
