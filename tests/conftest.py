"""Shared fixtures. The emulated NPU is the backend of every test: no NPU exists on our machines."""
import os
import sys

import pytest

# A test run must never pick up activation from the environment it was started in.
for _var in [v for v in os.environ if v.startswith("ASCEND_SHIM")]:
    del os.environ[_var]


import ascend_shim.sim
from ascend_shim import activation as _activation

# Bring the emulated NPU up before any test runs autograd: torch sizes its per-device autograd queues at the
# first backward(), so a device registered later could not run backward in this process.
ascend_shim.sim.install()

_activation.set_summary_printing(False)  # the exit summary is for users, not for the test runner's output


@pytest.fixture
def clean_shim():
    """Deactivate after the test, whatever it did."""
    import ascend_shim

    yield ascend_shim
    ascend_shim.deactivate()
