"""Ray: every task and actor on every node runs activated, and the emulated NPUs are Ray resources.

A Ray worker is started by its node's raylet, not by the driver: it inherits the shim only when the raylet
itself was started from an activated process (``ray.init()`` under the shim, or ``ASCEND_SHIM=1 ray start``
with the bootstrap on ``PYTHONPATH``). A cluster started on its own runs tasks without the shim. Ray's own
mechanism carries it instead: ``ray.init`` and Ray Jobs submitted under the shim add the shim's settings as
``runtime_env`` ``env_vars`` and a ``worker_process_setup_hook`` that activates the shim in each worker before
it runs anything, merged with the user's ``runtime_env`` (the user's values and own setup hook are kept).

With the ``sim`` backend, Ray's NPU detection (``NPUAcceleratorManager``: AscendCL or ``/dev/davinci*``) finds
no card; it is answered with the emulated device count and type, so ``resources={"NPU": 1}`` schedules.
"""
from __future__ import annotations

import functools
import os

from ascend_shim.registry import PatchSet

REMOVE = "never while unmodified Ray programs must run on Ascend"
#: the worker-side entry point Ray imports by name (``worker_process_setup_hook``)
SETUP_HOOK = "ascend_shim.patches.ray.activate_worker"
#: the user's own setup hook given as a module path, run by :func:`activate_worker` after activation (Ray Jobs
#: accept only module paths, so the chain must be one too)
USER_HOOK_VAR = "ASCEND_SHIM_RAY_SETUP_HOOK"

ray_set = PatchSet(
    id="ray", title="Ray: activation carried to every worker (runtime_env); emulated NPUs as Ray resources",
    requires={"ray": ">=2.9,<3"}, checked_against="ray 2.60.0 (torch 2.13.0 CPU + sim backend)",
)


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
            from ray._private.utils import load_class

        load_class(user_hook)()


def _chained(user_hook):
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


def merge_runtime_env(runtime_env):
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


@ray_set.patch(
    "ray._private.worker:init", id="ray.init",
    why="workers of a Ray cluster started on its own (`ray start --head`, then ray.init(address='auto')) do not "
        "inherit the driver's environment: tasks and actors run without the shim ('Torch not compiled with CUDA "
        "enabled').",
    what="ray.init adds to the job's runtime_env the shim's ASCEND_SHIM* settings (env_vars) and a "
         "worker_process_setup_hook that activates the shim in every worker, merged with the user's runtime_env "
         "(their env_vars win; their own setup hook, a callable or a module path, runs after the shim's) "
         "(reported).",
    remove_when=REMOVE)
def ray_init(ctx):
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


@ray_set.patch(
    "ray.dashboard.modules.job.sdk:JobSubmissionClient.submit_job", id="ray.submit_job",
    why="a Ray Job's tasks and actors run in workers of the cluster, which need not have the shim.",
    what="submit_job adds the same activation to the job's runtime_env (merged with the user's); the entrypoint "
         "itself is activated when it is `python -m ascend_shim run script.py` (reported).",
    remove_when=REMOVE)
def submit_job(ctx):
    orig, report = ctx.original, ctx.report

    @functools.wraps(orig)
    def submit_job(self, *args, **kwargs):
        kwargs["runtime_env"] = merge_runtime_env(kwargs.get("runtime_env"))
        report.translated("JobSubmissionClient.submit_job", "runtime_env += shim activation")
        return orig(self, *args, **kwargs)

    return submit_job


def _sim_only(ctx):
    from ascend_shim.errors import NotNeeded

    if not ctx.emulated:
        raise NotNeeded("real NPUs: Ray detects them through AscendCL or /dev/davinci*")


@ray_set.patch(
    "ray._private.accelerators.npu:NPUAcceleratorManager.get_current_node_num_accelerators", kind="replace",
    id="ray.sim_npu_count",
    why="Ray counts NPUs through AscendCL or /dev/davinci*, which the emulated NPU does not have: no NPU resource, "
        "so resources={'NPU': 1} and NPU placement groups never schedule.",
    what="with the sim backend, the node's NPU count is the emulated device count (ASCEND_SHIM_SIM_DEVICES); "
         "Ray itself still narrows it to ASCEND_RT_VISIBLE_DEVICES. Not applied with real NPUs.",
    remove_when=REMOVE)
def num_npus(ctx):
    _sim_only(ctx)

    def get_current_node_num_accelerators() -> int:
        try:
            import torch  # under the shim, importing torch brings the emulated NPU up

            return int(torch.npu.device_count())
        except Exception as exc:  # noqa: BLE001 -- Ray would log a traceback and start the node without NPUs
            _no_npu_on_this_node(f"the emulated NPU could not come up ({type(exc).__name__}: {exc})")
            return 0

    return staticmethod(get_current_node_num_accelerators)


def _no_npu_on_this_node(reason: str) -> None:
    """Said where the node is started (`ray start`): without it the node comes up silently with no NPU and a
    job asking for NPUs waits on its placement group forever."""
    import logging

    from ascend_shim.report import REPORT

    message = (f"this Ray node offers no NPU: {reason}. Tasks, actors and placement groups asking for "
               f"resources={{'NPU': n}} will wait for a node that has them.")
    REPORT.note(message)
    logging.getLogger("ascend_shim").error("%s", message)


@ray_set.patch(
    "ray._private.accelerators.npu:NPUAcceleratorManager.get_current_node_num_accelerators",
    id="ray.npu_node_check",
    why="a node started under the shim for real NPUs (ASCEND_SHIM_BACKEND=npu) where the backend cannot come up "
        "(no torch_npu, no card visible) started silently with no NPU resource; jobs then waited on their "
        "placement groups forever.",
    what="when Ray finds no NPU on a node whose backend is npu, the node says so where it is started (one error "
         "line, and a note in the report): torch_npu missing (with the setting to use on the emulated NPU), or "
         "no Ascend device found. Ray's count is unchanged. Not applied on the emulated NPU.",
    remove_when=REMOVE)
def npu_node_check(ctx):
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


@ray_set.patch(
    "ray._private.accelerators.npu:NPUAcceleratorManager.get_current_node_accelerator_type", kind="replace",
    id="ray.sim_npu_type",
    why="Ray asks AscendCL for the NPU type and logs a traceback when it is missing, as on the emulated NPU.",
    what="with the sim backend, answers the emulated device's name (the accelerator_type resource). Not applied "
         "with real NPUs.",
    remove_when=REMOVE)
def npu_type(ctx):
    _sim_only(ctx)

    def get_current_node_accelerator_type():
        from ascend_shim.sim import DEVICE_NAME

        return DEVICE_NAME

    return staticmethod(get_current_node_accelerator_type)


PATCH_SETS = [ray_set]
