"""Imported by every Python a reference run without the shim starts (``run_plain_torch`` puts this folder first on
PYTHONPATH): at exit, before the interpreter finalizes, release the GIL for a moment so that a c10d or autograd
thread still dropping a finished job's tensors can finish (the same grace the emulator gives its own processes)."""
import atexit
import time

atexit.register(time.sleep, 0.05)  # registered first, so it runs last of all exit handlers
