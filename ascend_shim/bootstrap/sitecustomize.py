"""Bootstrap for child processes: put on PYTHONPATH by ``ascend-shim run`` (and ``activate(inherit=True)``).

Every Python process started below an activated one (torchrun workers, multiprocessing spawn, DataLoader
workers, ``subprocess`` pythons) imports this file at start-up through ``site``. It activates the shim with
the inherited ``ASCEND_SHIM_*`` settings when ``ASCEND_SHIM=1``, then runs the environment's own
``sitecustomize`` (the next one on ``sys.path``), so nothing the user had is lost. It never breaks start-up:
an activation error is printed (and raised only under ``ASCEND_SHIM_STRICT=1``). Interpreters that cannot
import ascend_shim at all (a system ``python3`` a tool starts with the inherited environment) stay silent.

In a process activated here, the main script Python was asked to run goes through the same path as under
``ascend-shim run`` (see ``ascend_shim.entry``).
"""
import os
import sys


def _chain_to_next_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _activate():
    if os.environ.get("ASCEND_SHIM", "").strip().lower() not in ("1", "true", "yes", "on"):
        return
    try:
        from ascend_shim.activation import activate, settle_start_up

        activate(root=False)
        settle_start_up()
    except Exception as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "ascend_shim":
            return  # another interpreter of the job, without the shim: not ours to activate
        if os.environ.get("ASCEND_SHIM_STRICT", "").strip().lower() in ("1", "true", "yes", "on"):
            raise
        print(f"ascend_shim: not activated in process {os.getpid()}: {type(exc).__name__}: {exc}",
              file=sys.stderr)

_activate()
try:
    _chain_to_next_sitecustomize()
except Exception as exc:  # the user's sitecustomize failing must look like it does without us
    print(f"ascend_shim: the environment's sitecustomize raised {type(exc).__name__}: {exc}", file=sys.stderr)
