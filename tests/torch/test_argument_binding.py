"""Device arguments are bound by name from the original: a moved argument moves the binding, a removed one
skips the patch, and every declared position still matches what the installed torch accepts."""
import importlib
import inspect

import pytest
import torch

import ascend_shim
from ascend_shim import binding
from ascend_shim.binding import DECLARED, KEYWORD_ONLY, Binding, bind, documented_parameters
from ascend_shim.errors import TargetMissing
from ascend_shim.targets._shared.device_wrappers import translate_device
from ascend_shim.report import REPORT

TARGETS = ("torch.distributed", "torch.distributed.device_mesh", "torch.distributed.fsdp",
           "torch.distributed.fsdp.sharded_grad_scaler", "torch.nn.parallel", "torch.utils.data")


@pytest.fixture
def active():
    ascend_shim.activate(backend="sim", inherit=False, log_level="off")
    for name in TARGETS:
        importlib.import_module(name)
    yield
    ascend_shim.deactivate()


def test_every_device_argument_of_the_torch_sets_is_bound(active):
    unbound = {pid: p["reason"] for pid, p in REPORT.patches.items()
               if p["set"] in ("torch_devices", "torch_cuda", "torch_distributed") and "where" in p["reason"]}
    assert unbound == {}
    assert ("torch.zeros", "device") in binding.BOUND
    assert binding.BOUND["torch.zeros", "device"] == Binding("device", KEYWORD_ONLY, source="schema")
    assert binding.BOUND["torch.asarray", "device"] == Binding("device", KEYWORD_ONLY, source="documented")
    assert binding.BOUND["GradScaler", "device"].default == "cuda"  # read from the signature, not written here
    assert binding.BOUND["Tensor.pin_memory", "device"] == Binding("device", 1, source="schema")
    assert binding.BOUND["DistributedDataParallel", "output_device"].position == 3


def test_bindings_agree_with_what_torch_accepts_by_position(active):
    """Call each bound torch builtin with a CPU device at the bound position: it must be taken as the device."""
    assert torch.zeros(2, device="cpu").device.type == "cpu"
    assert torch.Tensor.pin_memory.__wrapped__  # the wrapper is in place
    assert torch.get_autocast_dtype("cpu") == torch.get_autocast_dtype(device_type="cpu")
    assert torch.is_autocast_enabled("cpu") is torch.is_autocast_enabled(device_type="cpu")
    # Module.to parses its own arguments: the device is the first one
    device, dtype, _, _ = torch._C._nn._parse_to("cpu")
    assert (device, dtype) == (torch.device("cpu"), None)
    assert DECLARED["Module.to", "device"] == 1


@pytest.mark.parametrize("api,name", sorted(DECLARED))
def test_declared_positions_match_the_installed_torch(api, name):
    """A declared position that torch can now show itself must agree with it; the C bindings must accept the
    argument both by position and by name."""
    owner, attr = {"Module.to": (torch.nn.Module, "to")}.get(api, (torch, api.rsplit(".", 1)[1]))
    orig = getattr(owner, attr)
    try:
        shown = bind(orig, name, "probe")
    except TargetMissing:
        shown = None
    if shown is not None and shown.source != "declared":
        assert shown.position == DECLARED[api, name]
    if owner is torch:  # C bindings: the device at the declared position, then by name, must be accepted
        rest = {"set_autocast_dtype": {"dtype": torch.float32},
                "set_autocast_enabled": {"enabled": False}}.get(attr, {})
        by_position = list(rest.values())
        by_position.insert(DECLARED[api, name], "cpu")
        before = torch.get_autocast_dtype("cpu"), torch.is_autocast_enabled("cpu")
        try:
            orig(*by_position)
            orig(**{name: "cpu"}, **rest)
        finally:
            torch.set_autocast_dtype("cpu", before[0])
            torch.set_autocast_enabled("cpu", before[1])


def test_a_moved_argument_moves_the_binding():
    seen = []

    def old(x, device=None):
        seen.append(device)

    def moved(device=None, x=None):
        seen.append(device)

    assert bind(old, "device", "f").position == 1
    assert bind(moved, "device", "f").position == 0
    translate_device(old, "f")(1, "cuda")
    translate_device(moved, "f")("cuda:1")
    assert seen == ["npu", "npu:1"]


def test_a_removed_argument_skips_the_patch():
    def renamed(x, dev=None):
        pass

    with pytest.raises(TargetMissing, match="no argument 'device'"):
        bind(renamed, "device", "f")


def test_documented_signatures_of_builtins_are_read():
    class Builtin:  # what a C binding shows: no signature, a documented first line
        __name__ = "not_an_aten_op"
        __doc__ = "f(size, device=None, *, dtype=None) -> Tensor\n\nMore text."

    assert documented_parameters(Builtin.__doc__) == ["size", "device", "*", "dtype"]
    assert bind(Builtin(), "device", "f") == Binding("device", 1, source="documented")
    Builtin.__doc__ = "f(size, *, device=None, dtype=None) -> Tensor"
    assert bind(Builtin(), "device", "f").position is KEYWORD_ONLY
    Builtin.__doc__ = "f(*size, dtype=None, device=None) -> Tensor"
    assert bind(Builtin(), "device", "f").position is KEYWORD_ONLY


def test_an_omitted_cuda_default_is_translated_and_recorded():
    got = []

    def scaler_init(self, device="cuda", enabled=True):
        got.append(device)

    wrapper = translate_device(scaler_init, "Scaler", ints=False)
    REPORT.reset()
    wrapper(object())
    wrapper(object(), "cpu")
    wrapper(object(), device="cuda:1")
    assert got == ["npu", "cpu", "npu:1"]
    assert inspect.signature(wrapper) == inspect.signature(scaler_init)
    details = sorted(e["detail"] for e in REPORT.events())
    assert details == ["device='cuda' -> 'npu'", "device='cuda:1' -> 'npu:1'"]
