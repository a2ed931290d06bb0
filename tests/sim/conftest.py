"""Shared fixtures of the sim tests.

The emulated NPU is installed at collection time, before any test runs: torch sizes its autograd device queues
at the process's first backward(), so the npu device must exist by then (install() refuses to run later).
"""
import pytest

import ascend_shim.sim as _sim

_sim.install()


@pytest.fixture(scope="session")
def sim():
    """The installed emulator (``ascend_shim.sim``)."""
    return _sim
