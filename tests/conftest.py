"""Shared fixtures. The emulated NPU is the backend of every test: no NPU exists on our machines."""
import os

import pytest

#: The torch_npu Python the emulated NPU runs under in this test run, in-process and in the processes tests
#: start: ``real`` (Huawei's, prepared by fetch-torch-npu: the layer a dry run gets, the default) or ``builtin``
#: (the emulator's own: ``ASCEND_SHIM_SIM_LAYER=builtin python -m pytest ...`` runs the builtin lane).
LAYER = os.environ.get("ASCEND_SHIM_SIM_LAYER", "real")
# A test run must never pick up activation from the environment it was started in.
for _var in [v for v in os.environ if v.startswith("ASCEND_SHIM")]:
    del os.environ[_var]
os.environ["ASCEND_SHIM_SIM_LAYER"] = LAYER
#: The backend the shim's patches serve under ``--simulate`` in this lane (``current_backend()``, the report's
#: ``process.backend``): on the real layer the shim runs its ``npu`` code, as on hardware.
SIM_BACKEND = "npu" if LAYER == "real" else "sim"


# imported once the environment is clean (above)
import ascend_shim.sim  # noqa: E402
from ascend_shim import activation as _activation  # noqa: E402

# Bring the emulated NPU up before any test runs autograd: torch sizes its per-device autograd queues at the
# first backward(), so a device registered later could not run backward in this process. As the shim brings it up:
# the shim listens to the device (operators falling back to the CPU go into the report).
from ascend_shim import backend as _backend  # noqa: E402

if LAYER == "real":
    from ascend_shim.sim import real_layer as _real_layer

    _PREPARED = _real_layer.find_prepared()
    if _PREPARED is None:
        raise pytest.UsageError("the tests run on Huawei's torch_npu Python over the emulated NPU: prepare it "
                                "first (python -m ascend_shim fetch-torch-npu), or run the builtin lane "
                                "(ASCEND_SHIM_SIM_LAYER=builtin)")

    _backend.prepare("sim", "real")
    _backend.bring_up("sim", "real")
else:
    _backend.bring_up("sim")

_activation.set_summary_printing(False)  # the exit summary is for users, not for the test runner's output


def pytest_runtest_setup(item):
    if LAYER != "builtin" and item.get_closest_marker("builtin_layer") is not None:
        pytest.skip("builtin layer only: the emulator's own torch_npu facade, or a listed layer difference")


@pytest.fixture(autouse=True)
def emulated_npu_layer():
    """Each test starts with the emulator's torch_npu layer in place: a deactivate() in an earlier test takes the
    builtin layer away, or stops the real layer answering imports and metadata queries for torch_npu (as it must
    for users); the device itself, and an imported torch_npu, stay."""
    if LAYER == "real":
        _real_layer.enable(_PREPARED)
    else:
        ascend_shim.sim.install()
    yield


@pytest.fixture
def clean_shim():
    """Deactivate after the test, whatever it did."""
    import ascend_shim

    yield ascend_shim
    ascend_shim.deactivate()
