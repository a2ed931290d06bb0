"""How a test starts a child process: from this environment without the shim's settings (each test sets the ones
it means), except the emulator layer the session runs on (the lane: builtin or real); and how a reference run
without the shim gets past plain torch's own exit race."""
import os
import subprocess

LANE = "ASCEND_SHIM_SIM_LAYER"


def shim_free_env(*also_drop: str) -> dict[str, str]:
    """``os.environ`` without ``ASCEND_SHIM_*`` (the lane's layer kept) and without the names starting with any of
    ``also_drop`` (``"CUDA_VISIBLE"``, ``"ASCEND_RT"`` ...)."""
    drop = ("ASCEND_SHIM", *also_drop)
    return {k: v for k, v in os.environ.items() if not k.startswith(drop) or k == LANE}


# Plain torch aborts a process now and then at interpreter exit: a c10d or autograd thread still dropping a
# finished job's tensors needs the GIL while the interpreter finalizes, and dies without it
# (pytorch/pytorch#179291). The emulator gives such threads their turn before exit; a CPU reference run gets the
# same grace from reference_exit/sitecustomize.py, and is run again if it still lost the race.
TORCH_EXIT_RACE = "terminate called without an active exception"
EXIT_GRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_exit")


def run_plain_torch(cmd: list[str], *, attempts: int = 3, **kwargs) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True, **kwargs)`` for a reference run without the shim, its
    Pythons given the exit grace, run again (up to ``attempts`` in all) when it failed only by torch's exit race."""
    env = dict(kwargs.pop("env", None) or os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (EXIT_GRACE, env.get("PYTHONPATH", "")) if p)
    kwargs["env"] = env
    for _attempt in range(attempts):
        proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
        if proc.returncode == 0 or TORCH_EXIT_RACE not in proc.stderr:
            break
    return proc
