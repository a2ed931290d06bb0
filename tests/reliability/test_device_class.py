"""``torch.device``, ``Generator``, ``Stream`` and ``Event`` stay the real classes under the shim.

CUDA devices still become npu ones, on every way of constructing them; and what needs the real class works as
without the shim: ``type(d) is torch.device``, pickle and cloudpickle (by reference and by value, unpickled in an
interpreter that has torch and nothing of the shim), and ``torch.compile(fullgraph=True)`` on code that reads,
compares and builds devices, with the graph count of the NPU-native code run without the shim.
"""
import copy
import os
import pickle
import subprocess
import sys

import cloudpickle
import pytest
import torch
from torch._dynamo.testing import CompileCounter

import ascend_shim

CLASSES = (torch.device, torch.Generator, torch.Stream, torch.Event)
ORIGINAL_NEW = {cls: cls.__dict__["__new__"] for cls in CLASSES}
CUDA_1_PICKLED = pickle.dumps(torch.device("cuda", 1))  # made without the shim: a genuine cuda device


class GeneratorBefore(torch.Generator):  # a subclass that exists before activation
    pass


@pytest.fixture
def shim():
    ascend_shim.activate(backend="sim", inherit=False)
    yield
    ascend_shim.deactivate()


def test_the_classes_are_the_real_ones_and_cuda_becomes_npu(shim):
    assert torch.device is type(torch.device("cpu"))
    made = torch.device("cuda", 1)
    assert type(made) is torch.device and made == torch.device("npu", 1)
    assert isinstance(torch.device("cuda"), torch.device) and torch.device("cuda").type == "npu"
    generator = torch.Generator(device="cuda")
    assert type(generator) is torch.Generator and generator.device.type == "npu"
    stream = torch.Stream("cuda:1")
    assert type(stream) is torch.Stream and stream.device == torch.device("npu", 1)
    event = torch.Event(device="cuda")
    assert type(event) is torch.Event and event.device.type == "npu"
    assert torch.device("cpu").type == "cpu" and torch.Generator().device.type == "cpu"


def test_every_way_of_constructing_a_device_is_translated(shim):
    assert torch.device.__new__(torch.device, "cuda:1") == torch.device("npu", 1)
    assert torch.device(type="cuda", index=2) == torch.device("npu", 2)
    assert pickle.loads(CUDA_1_PICKLED) == torch.device("npu", 1)  # reduce: torch.device('cuda', 1)
    assert copy.copy(torch.device("npu", 1)) == torch.device("npu", 1)
    assert copy.deepcopy({"d": torch.device("cuda")})["d"] == torch.device("npu")
    assert GeneratorBefore(device="cuda").device.type == "npu"

    class GeneratorDuring(torch.Generator):
        pass

    class StreamDuring(torch.Stream):
        def __new__(cls, device=None):
            return super().__new__(cls, device)

    assert GeneratorDuring(device="cuda").device.type == "npu"
    assert StreamDuring("cuda").device.type == "npu"


def test_rewritten_comparisons_still_get_real_cuda_counterparts(shim, monkeypatch):
    from ascend_shim.rewrite import runtime

    monkeypatch.setattr(runtime, "_cuda_devices", {})
    cuda = runtime.counterpart(torch.device("npu", 1))
    assert type(cuda) is torch.device and (cuda.type, cuda.index) == ("cuda", 1)
    assert runtime.eq(torch.device("npu", 1), cuda) is True


def test_errors_of_the_constructor_are_unchanged(shim):
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        torch.device("bogus")
    with pytest.raises(TypeError, match="invalid combination of arguments"):
        torch.device()
    with pytest.raises(RuntimeError, match="Device index must not be negative"):
        torch.device("cuda", -1)


def test_deactivate_restores_the_constructors():
    ascend_shim.activate(backend="sim", inherit=False)

    class GeneratorDuring(torch.Generator):
        pass

    ascend_shim.deactivate()
    for cls in CLASSES:
        assert cls.__dict__["__new__"] is ORIGINAL_NEW[cls]
    assert torch.device("cuda", 1).type == "cuda"
    assert GeneratorDuring().device.type == "cpu" and GeneratorBefore().device.type == "cpu"
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        torch.device("bogus")


# -- pickling -----------------------------------------------------------------------------------------------
def _actor_class():
    """A class cloudpickle can only pickle by value (it is local), holding references to the classes."""

    class Actor:
        device_class = torch.device
        enter = torch.device.__enter__
        generator_class = torch.Generator
        stream_class = torch.Stream

        def __init__(self):
            self.home = torch.device("cpu")

        def where(self, kind):
            return torch.device(kind)

        def check(self):
            return type(self.home) is torch.device and self.device_class is torch.device

    return Actor


REFERENCES = {
    "device": lambda: torch.device, "device.__enter__": lambda: torch.device.__enter__,
    "device.__new__": lambda: torch.device.__new__, "Generator": lambda: torch.Generator,
    "Generator.manual_seed": lambda: torch.Generator.manual_seed, "Stream": lambda: torch.Stream,
    "Stream.query": lambda: torch.Stream.query, "Event": lambda: torch.Event,
    "Event.record": lambda: torch.Event.record,
}


def _plain_python(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` where only torch is importable: no site processing (no .pth, no sitecustomize), isolated."""
    site = os.path.dirname(os.path.dirname(torch.__file__))
    prelude = (f"import sys; sys.path.append({site!r})\n"
               "import importlib.util\n"
               "assert importlib.util.find_spec('ascend_shim') is None, 'the shim is importable'\n")
    return subprocess.run([sys.executable, "-I", "-S", "-c", prelude + code], capture_output=True, text=True,
                          timeout=300)


def test_classes_methods_and_instances_pickle_by_reference_and_by_value(shim, tmp_path):
    payload = {}
    for name, get in REFERENCES.items():
        obj = get()
        for dumps in (pickle.dumps, cloudpickle.dumps):
            assert pickle.loads(dumps(obj)) is obj, name
            payload[f"{dumps.__module__}:{name}"] = dumps(obj)
    for obj in (torch.device("cuda", 1), torch.device("cpu"), torch.Generator().manual_seed(3)):
        for dumps in (pickle.dumps, cloudpickle.dumps):
            again = pickle.loads(dumps(obj))
            assert type(again) is type(obj)
            if isinstance(obj, torch.device):
                assert again == obj
    payload["cpu_device"] = cloudpickle.dumps(torch.device("cpu"))
    payload["generator"] = cloudpickle.dumps(torch.Generator().manual_seed(3))
    actor = _actor_class()
    payload["actor_class"] = cloudpickle.dumps(actor)
    payload["actor"] = cloudpickle.dumps(actor())
    loaded = cloudpickle.loads(payload["actor"])
    assert loaded.check() and loaded.where("cuda") == torch.device("npu")
    (tmp_path / "payload.pkl").write_bytes(pickle.dumps(payload))

    proc = _plain_python(f"""
import pickle, torch
payload = pickle.loads(open({str(tmp_path / 'payload.pkl')!r}, 'rb').read())
expected = {{"device": torch.device, "device.__enter__": torch.device.__enter__,
            "device.__new__": torch.device.__new__, "Generator": torch.Generator,
            "Generator.manual_seed": torch.Generator.manual_seed, "Stream": torch.Stream,
            "Stream.query": torch.Stream.query, "Event": torch.Event, "Event.record": torch.Event.record}}
for key, data in payload.items():
    if ":" in key:
        name = key.split(":")[1]
        assert pickle.loads(data) is expected[name] or pickle.loads(data) == expected[name], key
assert pickle.loads(payload["cpu_device"]) == torch.device("cpu")
assert pickle.loads(payload["generator"]).initial_seed() == 3
Actor = pickle.loads(payload["actor_class"])
assert Actor.device_class is torch.device and Actor.enter is torch.device.__enter__
assert Actor.generator_class is torch.Generator and Actor.stream_class is torch.Stream
actor = pickle.loads(payload["actor"])
assert actor.check() and Actor().check()
assert actor.where("cuda") == torch.device("cuda")  # no shim here: cuda stays cuda
with torch.device("cpu"):
    assert torch.ones(1).device.type == "cpu"
print("OK plain")
""")
    assert proc.returncode == 0 and "OK plain" in proc.stdout, proc.stdout + proc.stderr


# -- torch.compile ------------------------------------------------------------------------------------------
DEV = "cuda"  # what the code names; the NPU-native port of the same code names "npu"


def reads(x):
    y = torch.ones(2, device=x.device)
    if x.device.type == DEV or x.is_cpu:
        return x * 2 + y
    return x - y


def compares(x):
    same = x.device == torch.device(DEV, 0) and str(x.device).startswith(DEV)
    return x + 1 if same else x + 2


def builds(x):
    d = torch.device(DEV)
    e = torch.device(x.device.type, x.device.index)
    y = torch.zeros(2, device=d) + torch.ones(2, device=e)
    return x.to(d) + y.sum(), d.type


def checks_type(x):
    d = x.device
    return x + (1 if isinstance(d, torch.device) and type(d) is torch.device else 2)


def _graphs(fn, x, fullgraph):
    torch._dynamo.reset()
    counter = CompileCounter()
    out = torch.compile(fn, backend=counter, fullgraph=fullgraph)(x)
    return counter.frame_count, out


@pytest.mark.parametrize("fn", [reads, compares, builds, checks_type], ids=lambda f: f.__name__)
def test_compile_traces_device_code_like_the_npu_native_code(fn, monkeypatch):
    """Same graph count (fullgraph or not) as the NPU-native port without the shim; same results as eager
    (the test module is not rewritten, so only checks_type, which names no device, must equal the port)."""
    import ascend_shim.sim

    ascend_shim.sim.install()
    monkeypatch.setitem(fn.__globals__, "DEV", "npu")  # the NPU-native port, without the shim
    x = torch.arange(2.0, device="npu")
    native = {full: _graphs(fn, x, full) for full in (True, False)}
    monkeypatch.setitem(fn.__globals__, "DEV", "cuda")
    ascend_shim.activate(backend="sim", inherit=False)
    try:
        x = torch.arange(2.0, device="cuda")
        eager = fn(x)
        for full in (True, False):
            graphs, out = _graphs(fn, x, full)
            assert graphs == native[full][0] >= 1, (fn.__name__, full, graphs, native[full][0])
            assert repr(out) == repr(eager)  # values, devices and the plain Python results alike
            if fn is checks_type:
                assert repr(out) == repr(native[full][1])
    finally:
        torch._dynamo.reset()
        ascend_shim.deactivate()


# -- the constructor hook itself ------------------------------------------------------------------------------
def test_the_constructor_hook_on_another_c_type_and_what_it_refuses():
    import datetime

    from ascend_shim.errors import TargetMissing
    from ascend_shim.constructors import hook_constructor

    cls = datetime.timedelta  # a static C type with its own constructor, as torch.device

    def doubling(original):
        def __new__(klass, *args, **kwargs):
            return original(klass, (args[0] * 2,) + args[1:] if args else args, kwargs)
        return __new__

    class Before(cls):
        pass

    builtin_new = cls.__dict__["__new__"]
    undo = hook_constructor(cls, doubling, probe=(1,))
    try:
        assert cls(1).days == 2 and cls(days=3).days == 3 and cls.__new__(cls, 5).days == 10
        assert type(cls(1)) is cls and Before(2).days == 4
        with pytest.raises(TypeError):
            cls("x")
    finally:
        undo()
    assert cls(1).days == 1 and cls.__dict__["__new__"] is builtin_new and Before(2).days == 2

    class Heap:
        pass

    with pytest.raises(TargetMissing, match="not a C extension type"):
        hook_constructor(Heap, doubling)
    with pytest.raises(TargetMissing, match="no constructor of its own"):
        hook_constructor(type(iter([])), doubling)
