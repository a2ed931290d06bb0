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

from ascend_shim.registry import PatchSet


REMOVE = "never: Ray workers start without the shim unless told, and Ray finds NPUs only through AscendCL"

ray_set = PatchSet(
    id="ray", title="Ray: activation carried to every worker (runtime_env); emulated NPUs as Ray resources",
    requires={"ray": ">=2.9,<3"}, checked_against="ray 2.60.0 (torch 2.13.0 CPU + sim backend)",
    implementation=f"{__name__}.impl"
)


ray_set.patch(
    "ray._private.worker:init", id="ray.init",
    why="workers of a Ray cluster started on its own (`ray start --head`, then ray.init(address='auto')) do not "
        "inherit the driver's environment: tasks and actors run without the shim ('Torch not compiled with CUDA "
        "enabled').",
    what="ray.init adds to the job's runtime_env the shim's ASCEND_SHIM* settings (env_vars) and a "
         "worker_process_setup_hook that activates the shim in every worker, merged with the user's runtime_env "
         "(their env_vars win; their own setup hook, a callable or a module path, runs after the shim's) "
         "(reported).",
    remove_when=REMOVE, factory="ray_init")


ray_set.patch(
    "ray.dashboard.modules.job.sdk:JobSubmissionClient.submit_job", id="ray.submit_job",
    why="a Ray Job's tasks and actors run in workers of the cluster, which need not have the shim.",
    what="submit_job adds the same activation to the job's runtime_env (merged with the user's); the entrypoint "
         "itself is activated when it is `python -m ascend_shim run script.py` (reported).",
    remove_when=REMOVE, factory="submit_job")


ray_set.patch(
    "ray._private.accelerators.npu:NPUAcceleratorManager.get_current_node_num_accelerators", kind="replace",
    id="ray.sim_npu_count",
    why="Ray counts NPUs through AscendCL or /dev/davinci*, which the emulated NPU does not have: no NPU resource, "
        "so resources={'NPU': 1} and NPU placement groups never schedule.",
    what="with the sim backend, the node's NPU count is the emulated device count (ASCEND_SHIM_SIM_DEVICES); "
         "Ray itself still narrows it to ASCEND_RT_VISIBLE_DEVICES. Not applied with real NPUs.",
    remove_when=REMOVE, factory="emulated_npu_count")


ray_set.patch(
    "ray._private.accelerators.npu:NPUAcceleratorManager.get_current_node_num_accelerators",
    id="ray.npu_node_check",
    why="a node started under the shim for real NPUs (ASCEND_SHIM_BACKEND=npu) where the backend cannot come up "
        "(no torch_npu, no card visible) started silently with no NPU resource; jobs then waited on their "
        "placement groups forever.",
    what="when Ray finds no NPU on a node whose backend is npu, the node says so where it is started (one error "
         "line, and a note in the report): torch_npu missing (with the setting to use on the emulated NPU), or "
         "no Ascend device found. Ray's count is unchanged. Not applied on the emulated NPU.",
    remove_when=REMOVE, factory="npu_node_check")


ray_set.patch(
    "ray._private.accelerators.npu:NPUAcceleratorManager.get_current_node_accelerator_type", kind="replace",
    id="ray.sim_npu_type",
    why="Ray asks AscendCL for the NPU type and logs a traceback when it is missing, as on the emulated NPU.",
    what="with the sim backend, answers the emulated device's name (the accelerator_type resource). Not applied "
         "with real NPUs.",
    remove_when=REMOVE, factory="npu_type")


PATCH_SETS = [ray_set]
