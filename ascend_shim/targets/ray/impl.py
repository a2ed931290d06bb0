"""Ray: the shim's activation carried to every worker (``runtime_env``), and the NPUs of a node as Ray counts them.

``ray.init`` and Ray Jobs get the shim's settings as ``env_vars`` and a ``worker_process_setup_hook``
(:func:`activate_worker`) merged into the user's ``runtime_env``. On the emulated NPU, the node's NPU count is
the emulated devices'; with real NPUs, a node where Ray finds none says why where it is started.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_shim.context import PatchContext


#: the worker-side entry point Ray imports by name (``worker_process_setup_hook``)
SETUP_HOOK = "ascend_shim.targets.ray.impl.activate_worker"
#: the user's own setup hook given as a module path, run by :func:`activate_worker` after activation (Ray Jobs
#: accept only module paths, so the chain must be one too)
USER_HOOK_VAR = "ASCEND_SHIM_RAY_SETUP_HOOK"


def activate_worker() -> None:
    """Ray's ``worker_process_setup_hook``: activate the shim in this worker with the driver's settings, then
    run the user's own hook when it was given as a module path."""
    from ascend_shim.activation import activate

    activate(root=False)
    user_hook = os.environ.get(USER_HOOK_VAR)
    if user_hook:
        try:
            from ray._common.utils import load_class
        except ImportError:  # Ray before 2.47
            from ray._private.utils import load_class  # type: ignore[attr-defined,no-redef]

        load_class(user_hook)()


def _chained(user_hook: Callable[[], Any]) -> Callable[[], Any]:
    """A setup hook that activates the shim, then runs the user's own callable hook."""

    def ascend_shim_then_user_setup_hook():
        activate_worker()
        return user_hook()

    return ascend_shim_then_user_setup_hook


def shim_env_vars() -> dict[str, str]:
    """The variables that reproduce this process's activation in a worker (the emulator's ones included)."""
    from ascend_shim.activation import child_env

    env = child_env()
    if env:
        env.update({k: v for k, v in os.environ.items() if k.startswith("ASCEND_SHIM_SIM_") and k not in env})
    return env


def merge_runtime_env(runtime_env: dict | None) -> dict | None:
    """The user's ``runtime_env`` plus the shim's activation; the user's values win, their hook still runs."""
    shim_env = shim_env_vars()
    if not shim_env:
        return runtime_env
    merged = dict(runtime_env or {})
    merged["env_vars"] = {**shim_env, **dict(merged.get("env_vars") or {})}
    user_hook = merged.get("worker_process_setup_hook")
    if callable(user_hook):
        merged["worker_process_setup_hook"] = _chained(user_hook)
        return merged
    if user_hook and user_hook != SETUP_HOOK:
        merged["env_vars"].setdefault(USER_HOOK_VAR, user_hook)
    merged["worker_process_setup_hook"] = SETUP_HOOK
    return merged


def require_emulated(ctx: PatchContext) -> None:
    """Skip the patch (not needed) with real NPUs, which Ray detects itself."""
    from ascend_shim.errors import NotNeeded

    if not ctx.emulated:
        raise NotNeeded("real NPUs: Ray detects them through AscendCL or /dev/davinci*")


def _no_npu_on_this_node(reason: str) -> None:
    """Said where the node is started (`ray start`): without it the node comes up silently with no NPU and a
    job asking for NPUs waits on its placement group forever."""
    import logging

    from ascend_shim.report import REPORT

    message = (f"this Ray node offers no NPU: {reason}. Tasks, actors and placement groups asking for "
               f"resources={{'NPU': n}} will wait for a node that has them.")
    REPORT.note(message)
    logging.getLogger("ascend_shim").error("%s", message)


def emulated_npu_count(ctx: PatchContext) -> staticmethod:
    """NPUAcceleratorManager.get_current_node_num_accelerators answering the emulated device count."""
    require_emulated(ctx)

    def get_current_node_num_accelerators() -> int:
        try:
            import torch  # under the shim, importing torch brings the emulated NPU up

            return int(torch.npu.device_count())
        except Exception as exc:  # noqa: BLE001 -- Ray would log a traceback and start the node without NPUs
            _no_npu_on_this_node(f"the emulated NPU could not come up ({type(exc).__name__}: {exc})")
            return 0

    return staticmethod(get_current_node_num_accelerators)


def npu_node_check(ctx: PatchContext) -> staticmethod:
    """Ray's NPU count on a node of real NPUs, saying why where it finds none."""
    from ascend_shim.errors import NotNeeded

    if ctx.emulated:
        raise NotNeeded("the emulated NPU: its devices are counted by ray.sim_npu_count")
    orig = ctx.original

    @functools.wraps(orig)
    def get_current_node_num_accelerators() -> int:
        count = orig()
        if count == 0:
            import importlib.machinery

            if importlib.machinery.PathFinder.find_spec("torch_npu") is None:
                _no_npu_on_this_node("ASCEND_SHIM_BACKEND=npu, but torch_npu is not installed on it (on the "
                                     "emulated NPU, start the node with ASCEND_SHIM_BACKEND=sim)")
            else:
                _no_npu_on_this_node("Ray found no Ascend device (AscendCL, /dev/davinci*): check the driver, "
                                     "CANN (source its set_env.sh before `ray start`) and ASCEND_RT_VISIBLE_DEVICES")
        return count

    return staticmethod(get_current_node_num_accelerators)


def ray_init(ctx: PatchContext) -> Callable[..., Any]:
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def init(*args, **kwargs):
        job_config = kwargs.get("job_config")
        if job_config is not None and getattr(job_config, "runtime_env", None):
            job_config.set_runtime_env(merge_runtime_env(job_config.runtime_env))
        else:
            kwargs["runtime_env"] = merge_runtime_env(kwargs.get("runtime_env"))
        report.translated("ray.init", "runtime_env += shim activation (env_vars, worker_process_setup_hook)")
        return orig(*args, **kwargs)

    return init


def submit_job(ctx: PatchContext) -> Callable[..., Any]:
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def submit_job(self, *args, **kwargs):
        kwargs["runtime_env"] = merge_runtime_env(kwargs.get("runtime_env"))
        report.translated("JobSubmissionClient.submit_job", "runtime_env += shim activation")
        return orig(self, *args, **kwargs)

    return submit_job


def npu_type(ctx: PatchContext) -> staticmethod:
    require_emulated(ctx)

    def get_current_node_accelerator_type():
        return ctx.emulated_device_name

    return staticmethod(get_current_node_accelerator_type)
