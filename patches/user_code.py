"""The user's own code: CUDA comparisons rewritten at load time so they hold on the NPU.

``x.device.type == "cuda"``, ``str(dev).startswith("cuda")``, ``"cuda" in str(device)``,
``backend == "nccl"`` ... are False on an NPU (tensors report ``npu``, the backend is ``hccl``) and make
unmodified code silently take its CPU branch. Only modules under the user's roots (the run target's
directory, ``ASCEND_SHIM_USER_ROOTS``) and ``ASCEND_SHIM_USER_PACKAGES`` are rewritten, never site-packages or
the standard library; each rewritten site is reported. ``ASCEND_SHIM_REWRITE=0`` turns it off.
"""
from ascend_shim.errors import NotNeeded
from ascend_shim.registry import PatchSet

user_code = PatchSet(id="user_code", title="CUDA comparisons in the user's own modules hold for the NPU")


@user_code.patch("process:user-code-comparisons", kind="call",
                 covers=("device-compare:cuda", "device-compare:nccl"),
                 why="`x.device.type == 'cuda'`-style checks are the main reason unmodified code silently takes a "
                     "CPU branch on an NPU.",
                 what="an import hook rewrites such comparisons in the user's modules (and the run script) into "
                      "value comparisons that also accept the NPU counterpart (npu, npu:N, hccl); line numbers are "
                      "kept, sites are reported.",
                 remove_when="never while CUDA-targeted code must run unmodified on Ascend")
def rewrite_user_code(ctx):
    import os

    from ascend_shim import rewrite

    if not ctx.config.rewrite:
        raise NotNeeded("ASCEND_SHIM_REWRITE=0")
    rewrite.install(list(ctx.config.user_roots) or [os.getcwd()], ctx.config.user_packages)
    return rewrite.uninstall


PATCH_SETS = [user_code]
