"""The user's own code: CUDA comparisons rewritten at load time so they hold on the NPU.

``x.device.type == "cuda"``, ``str(dev).startswith("cuda")``, ``"cuda" in str(device)``,
``backend == "nccl"`` ... are False on an NPU (tensors report ``npu``, the backend is ``hccl``) and make
unmodified code silently take its CPU branch. User code is everything that is not the environment (outside
the interpreter's prefixes, site-packages and the shim), narrowed or extended by ``ASCEND_SHIM_USER_ROOTS``
and ``ASCEND_SHIM_USER_PACKAGES``; each rewritten site is reported. In a process activated at start-up (a
launcher's worker, a ``subprocess`` python) the main script is run the way ``ascend-shim run`` runs it, so it
is rewritten too. ``ASCEND_SHIM_REWRITE=0`` turns it off.
"""
from ascend_shim.errors import NotNeeded
from ascend_shim.registry import PatchSet

user_code = PatchSet(id="user_code", title="CUDA comparisons in the user's own modules hold for the NPU")


@user_code.patch("process:user-code-comparisons", kind="call",
                 covers=("device-compare:cuda", "device-compare:nccl"),
                 why="`x.device.type == 'cuda'`-style checks are the main reason unmodified code silently takes a "
                     "CPU branch on an NPU.",
                 what="an import hook rewrites such comparisons in the user's modules and main script (in every "
                      "process of a job, launcher workers included) into value comparisons that also accept the NPU "
                      "counterpart (npu, npu:N, hccl); line numbers are kept, sites are reported.",
                 remove_when="never while CUDA-targeted code must run unmodified on Ascend")
def rewrite_user_code(ctx):
    from ascend_shim import entry, rewrite

    if not ctx.config.rewrite:
        raise NotNeeded("ASCEND_SHIM_REWRITE=0")
    rewrite.install(list(ctx.config.user_roots), ctx.config.user_packages)
    ctx.on_undo(rewrite.uninstall)
    entry.arm_worker_main()
    return entry.disarm_worker_main


PATCH_SETS = [user_code]
