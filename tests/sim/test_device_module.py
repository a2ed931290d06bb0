"""torch.npu (= torch_npu.npu) of the emulated device: devices, memory statistics, streams and events, amp
names, configuration switches, and what the module refuses (unemulated names, graphs)."""
from __future__ import annotations

import importlib
import inspect
import os
import threading
import warnings

import pytest
import torch

from tests.subprocess_env import shim_free_env

#: the builtin facade's torch.npu; on the real layer torch.npu is Huawei's (tests/real_layer/ judge it)
pytestmark = pytest.mark.builtin_layer

MiB = 1 << 20
#: the emulated device's memory: a 910B3's 64 GiB, capped at the host's physical memory
DEVICE_MEMORY = min(64 << 30, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


@pytest.fixture(autouse=True)
def _device(sim):
    torch.npu.set_device(0)
    yield
    torch.npu.set_device(0)


# ---- devices ---------------------------------------------------------------------------------------------


def test_device_queries():
    assert torch.npu.is_available() and torch.npu.device_count() == 8  # ASCEND_SHIM_SIM_DEVICES default
    assert torch.npu.get_device_name() == torch.npu.get_device_name(3) == "Ascend910B3"
    props = torch.npu.get_device_properties(1)
    assert props.name == "Ascend910B3" and props.total_memory == DEVICE_MEMORY
    assert (props.cube_core_num, props.vector_core_num, props.L2_cache_size) == (20, 40, 192 << 20)
    assert props.multi_processor_count == props.vector_core_num  # as torch_npu sets it (DataParallel's check)
    assert torch.npu.is_bf16_supported() and torch.npu.is_initialized()
    assert torch.npu.can_device_access_peer(0, 7)
    with pytest.raises(AssertionError):
        torch.npu.can_device_access_peer(0, 8)
    with pytest.raises(RuntimeError, match="Invalid NPU device index"):
        torch.npu.get_device_properties(8)
    torch.npu.synchronize()
    torch.npu.synchronize("npu:2")
    assert torch.accelerator.current_accelerator() == torch.device("npu")
    assert torch.get_device_module("npu") is torch.npu


def test_device_capability_is_none_unless_configured(monkeypatch):
    monkeypatch.delenv("TORCH_NPU_DEVICE_CAPABILITY", raising=False)
    with pytest.warns(UserWarning, match="TORCH_NPU_DEVICE_CAPABILITY"):
        assert torch.npu.get_device_capability() is None
    monkeypatch.setenv("TORCH_NPU_DEVICE_CAPABILITY", "8.0")
    with pytest.warns(UserWarning, match="only for compatibility"):
        assert torch.npu.get_device_capability(0) == (8, 0)


def test_current_device_selection():
    torch.npu.set_device("npu:2")
    assert torch.npu.current_device() == 2
    assert torch.empty(1, device="npu").device == torch.device("npu:2")
    with torch.npu.device(5):
        assert torch.npu.current_device() == 5
        assert torch.zeros(1, device="npu").get_device() == 5
    assert torch.npu.current_device() == 2
    with torch.npu.device_of(torch.empty(1, device="npu:4")):
        assert torch.npu.current_device() == 4
    with torch.npu.device_of(torch.empty(1)):  # a CPU tensor selects nothing
        assert torch.npu.current_device() == 2
    torch.npu.set_device(torch.device("npu", 1))
    assert torch.accelerator.current_device_index() == 1
    with pytest.raises(RuntimeError, match="Invalid NPU device index 9"):
        torch.npu.set_device(9)


def test_current_device_is_per_thread():
    torch.npu.set_device(3)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.npu.current_device()))
    thread.start()
    thread.join()
    assert seen == [0] and torch.npu.current_device() == 3


# ---- memory ----------------------------------------------------------------------------------------------


def test_memory_statistics_are_real_per_device_numbers():
    torch.npu.reset_peak_memory_stats(3)
    base = torch.npu.memory_allocated(3)
    other = torch.npu.memory_allocated(4)
    x = torch.empty(MiB, dtype=torch.uint8, device="npu:3")
    assert torch.npu.memory_allocated(3) == base + MiB
    assert torch.npu.memory_allocated("npu:4") == other
    y = x.float()  # a fresh output of the CPU fallback is accounted too
    assert torch.npu.memory_allocated(3) == base + 5 * MiB
    del x, y
    assert torch.npu.memory_allocated(3) == base
    assert torch.npu.max_memory_allocated(3) >= base + 5 * MiB
    assert torch.npu.memory_reserved(3) >= base + 5 * MiB  # the caching allocator keeps the freed blocks
    assert torch.npu.max_memory_reserved(3) >= torch.npu.max_memory_allocated(3)
    torch.npu.empty_cache()
    assert torch.npu.memory_reserved(3) < base + MiB
    torch.npu.reset_peak_memory_stats(3)
    assert torch.npu.max_memory_allocated(3) == base
    torch.npu.reset_max_memory_allocated(3)
    torch.npu.empty_cache()


def test_memory_stats_summary_and_mem_get_info():
    with torch.npu.device(6):
        torch.npu.reset_accumulated_memory_stats()
        keep = torch.empty(2 * MiB, dtype=torch.uint8, device="npu")
        free, total = torch.npu.mem_get_info()
        stats = torch.npu.memory_stats()
        assert total == DEVICE_MEMORY and free == total - torch.npu.memory_reserved()
        assert stats["allocated_bytes.all.current"] == torch.npu.memory_allocated()
        assert stats["allocated_bytes.all.allocated"] >= 2 * MiB and stats["allocation.all.allocated"] >= 1
        assert stats["reserved_bytes.all.peak"] >= stats["allocated_bytes.all.peak"]
        assert stats["num_alloc_retries"] == 0
        nested = torch.npu.memory_stats_as_nested_dict()
        assert nested["allocated_bytes"]["all"]["current"] == stats["allocated_bytes.all.current"]
        assert "device ID 6" in torch.npu.memory_summary() and "2048 KB" in torch.npu.memory_summary()
        del keep


def test_torch_accelerator_memory_api_reads_the_same_accounting():
    with torch.npu.device(7):
        keep = torch.empty(3 * MiB, dtype=torch.uint8, device="npu")
        assert torch.accelerator.memory_allocated() == torch.npu.memory_allocated() >= 3 * MiB
        assert torch.accelerator.max_memory_allocated() == torch.npu.max_memory_allocated()
        stats = torch.accelerator.memory_stats()
        assert stats["allocated_bytes.all.current"] == torch.npu.memory_stats()["allocated_bytes.all.current"]
        assert torch.accelerator.get_memory_info() == torch.npu.mem_get_info()
        torch.accelerator.empty_cache()
        torch.accelerator.reset_peak_memory_stats()
        assert torch.npu.max_memory_allocated() == torch.npu.memory_allocated()
        del keep


def test_memory_fraction_limit_raises_out_of_memory():
    torch.npu.set_per_process_memory_fraction(1e-6, 2)  # ~68 KiB
    try:
        assert torch.npu.get_per_process_memory_fraction(2) == 1e-6
        with pytest.raises(torch.OutOfMemoryError, match="NPU out of memory. Tried to allocate 1.00 MiB"):
            torch.empty(MiB, dtype=torch.uint8, device="npu:2")
        assert torch.npu.memory_stats(2)["num_ooms"] >= 1
        torch.empty(MiB, dtype=torch.uint8, device="npu:1")  # other devices are not limited
    finally:
        torch.npu.set_per_process_memory_fraction(1.0, 2)
    with pytest.raises(TypeError):
        torch.npu.set_per_process_memory_fraction(1, 2)


# ---- streams and events ----------------------------------------------------------------------------------


def test_streams():
    default = torch.npu.default_stream()
    assert torch.npu.current_stream() == default and default.stream_id == 0
    s = torch.npu.Stream()
    assert isinstance(s, torch.Stream) and s.device == torch.device("npu:0") and s != default
    assert torch.npu.Stream(device=3).device == torch.device("npu:3")
    assert s.query()
    s.synchronize()
    with torch.npu.stream(s):
        assert torch.npu.current_stream() == s
        assert torch.accelerator.current_stream().stream_id == s.stream_id  # torch_npu's Stream equals Streams only
    assert torch.npu.current_stream() == default
    other = torch.npu.Stream(device=2)
    with torch.npu.stream(other):  # a stream on another device also selects that device
        assert torch.npu.current_device() == 2 and torch.npu.current_stream() == other
    assert torch.npu.current_device() == 0 and torch.npu.current_stream(2).stream_id == 0
    torch.npu.set_stream(s)
    assert torch.npu.current_stream() == s
    torch.npu.set_stream(default)
    with torch.npu.stream(None):
        pass


def test_events_record_wait_and_time():
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    assert isinstance(start, torch.npu.Event) and isinstance(start, torch.Event)
    assert not isinstance(torch.Event(device="cpu"), torch.npu.Event)
    start.record()
    x = torch.randn(64, 64, device="npu")
    for _ in range(5):
        x = x @ x
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
    s = torch.npu.Stream()
    s.wait_event(end)
    s.wait_stream(torch.npu.current_stream())
    recorded = s.record_event()
    assert recorded.query()
    untimed = torch.npu.Event()
    untimed.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):  # torch_npu's event class checks this
        untimed.elapsed_time(end)
    with pytest.raises((RuntimeError, ValueError), match="must be recorded"):
        torch.npu.Event(enable_timing=True).elapsed_time(end)


# ---- amp, config, graphs ---------------------------------------------------------------------------------


def test_amp_names():
    assert torch.npu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16, torch.float32]
    assert issubclass(torch.npu.amp.GradScaler, torch.amp.GradScaler)
    assert issubclass(torch.npu.amp.autocast, torch.amp.autocast)
    by_torch, by_torch_npu = importlib.import_module("torch.npu.amp"), importlib.import_module("torch_npu.npu.amp")
    assert by_torch is by_torch_npu is torch.npu.amp  # one module, however it is imported
    torch.npu.set_autocast_dtype(torch.bfloat16)
    try:
        assert torch.npu.get_autocast_dtype() == torch.bfloat16
        torch.npu.set_autocast_enabled(True)
        assert torch.npu.is_autocast_enabled()
    finally:
        torch.npu.set_autocast_enabled(False)
        torch.npu.set_autocast_dtype(torch.float16)

    class Double(torch.autograd.Function):
        @staticmethod
        @torch.npu.amp.custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, x):
            return x * 2

        @staticmethod
        @torch.npu.amp.custom_bwd
        def backward(ctx, grad):
            return grad * 2

    with torch.npu.amp.autocast():
        out = Double.apply(torch.ones(2, device="npu", dtype=torch.float16))
    assert out.dtype == torch.float32


def test_configuration_switches():
    assert torch.npu.matmul.allow_hf32 is False and torch.npu.conv.allow_hf32 is True
    assert torch.npu.config.allow_internal_format is False
    try:
        torch.npu.matmul.allow_hf32 = True
        torch.npu.conv.allow_hf32 = False
        torch.npu.config.allow_internal_format = True
        assert torch.npu.matmul.allow_hf32 and not torch.npu.conv.allow_hf32
        assert torch.npu.config.allow_internal_format
    finally:
        torch.npu.matmul.allow_hf32 = False
        torch.npu.conv.allow_hf32 = True
        torch.npu.config.allow_internal_format = False
    assert torch.npu.is_jit_compile_false()
    torch.npu.set_compile_mode(jit_compile=True)
    assert not torch.npu.is_jit_compile_false()
    torch.npu.set_compile_mode(jit_compile=False)
    torch.npu.set_option({"MM_BMM_ND_ENABLE": "disable"})
    assert torch.npu.get_mm_bmm_format_nd() is False
    torch.npu.set_mm_bmm_format_nd(True)
    with pytest.raises(TypeError):
        torch.npu.set_option(["not", "a", "dict"])


def test_npu_graphs_are_a_clear_error():
    from ascend_shim.sim.torch_npu.npu import NotEmulatedError

    graph_cls = torch.npu.NPUGraph  # referencing works (transfer_to_npu assigns it to torch.cuda.CUDAGraph)
    with pytest.raises(NotEmulatedError, match="NPUGraph is not emulated by ascend_shim's sim backend: "):
        graph_cls()
    with pytest.raises(NotEmulatedError, match="not emulated"):
        torch.npu.graph(None)
    with pytest.raises(NotEmulatedError, match="not emulated"):
        torch.npu.make_graphed_callables(torch.nn.Linear(2, 2), (torch.randn(1, 2, device="npu"),))
    with pytest.raises(NotEmulatedError):
        torch.npu.graph_pool_handle()
    assert torch.npu.is_current_stream_capturing() is False


# ---- the module's name space -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["set_dump", "MemPool", "use_mem_pool", "get_stream_limit", "host_memory_stats",
                                  "graph_task_group_begin", "npurt", "NPUPluggableAllocator"])
def test_unemulated_real_names_exist_and_raise_only_when_used(name):
    from ascend_shim.sim.torch_npu.npu import NotEmulatedError

    assert hasattr(torch.npu, name)  # looking it up never raises
    assert name in torch.npu.unemulated_names()
    with pytest.raises(NotEmulatedError, match=f"torch.npu.{name} is not emulated by ascend_shim's sim backend"):
        _call_as_the_real_function_takes_it(getattr(torch.npu, name))


def _call_as_the_real_function_takes_it(placeholder):
    """Call with the real function's required arguments (a placeholder refuses other calls as it would)."""
    required = [p for p in inspect.signature(placeholder).parameters.values()
                if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    return placeholder(*[None] * len(required))


def test_placeholder_classes_stay_classes():
    assert isinstance(torch.npu.MemPool, type) and isinstance(torch.npu.NPUPluggableAllocator, type)

    class Sub(torch.npu.MemPool):
        pass

    with pytest.raises(NotImplementedError, match="MemPool is not emulated"):
        Sub()


@pytest.mark.parametrize("qualname", ["memory.MemPool", "memory.host_memory_stats", "graphs.graph_task_group_begin",
                                      "memory.change_current_allocator"])
def test_names_of_submodules_exist_and_raise_when_used(qualname):
    module, name = qualname.split(".")
    obj = getattr(getattr(torch.npu, module), name)
    with pytest.raises(NotImplementedError, match=f"torch.npu.{name} is not emulated"):
        _call_as_the_real_function_takes_it(obj)
    with pytest.raises(AttributeError):
        _ = getattr(torch.npu, module).no_such_name


def test_every_name_of_the_real_module_is_present():
    assert len(torch.npu.__all__) == len(set(torch.npu.__all__)) == 144
    for name in torch.npu.__all__:
        assert getattr(torch.npu, name) is not None
    unemulated = set(torch.npu.unemulated_names())
    assert {"NPUGraph", "graph", "MemPool", "set_dump", "npurt", "graph_task_group_begin"} <= unemulated
    assert not {"utilization", "mstx", "FloatTensor", "memory_snapshot"} & unemulated


# ---- names computed on the host -------------------------------------------------------------------------


def test_typed_tensor_classes():
    x = torch.ones(3, device="npu")
    assert isinstance(x, torch.npu.FloatTensor) and not isinstance(x, torch.npu.HalfTensor)
    assert not isinstance(torch.ones(3), torch.npu.FloatTensor)
    h = torch.npu.HalfTensor(2, 3)
    assert h.dtype == torch.float16 and h.device == torch.device("npu", 0) and h.shape == (2, 3)
    assert torch.npu.LongTensor([1, 2]).tolist() == [1, 2]
    assert torch.npu.FloatTensor(2, device="npu:1").device == torch.device("npu", 1)
    assert x.type() == "torch.npu.FloatTensor"
    for target in (torch.npu.HalfTensor, "torch.npu.HalfTensor"):
        y = x.type(target)
        assert y.dtype == torch.float16 and y.device.type == "npu" and y.tolist() == [1.0, 1.0, 1.0]
    assert x.type(torch.float64).dtype == torch.float64
    assert torch.npu.BFloat16Tensor.dtype == torch.bfloat16
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage deprecation
        s = torch.npu.FloatStorage(4)
    assert s.device.type == "npu" and s.dtype == torch.float32 and s.size() == 4


def test_mstx_ranges_return_torch_npu_values():
    from ascend_shim.sim.torch_npu.npu.mstx import annotate

    mstx = torch.npu.mstx
    first, second = mstx.range_start("step"), mstx.range_start("step")
    assert isinstance(first, int) and first > 0 and second != first
    assert mstx.range_end(first) is None and mstx.mark("here") is None
    assert mstx.range_push("outer") == 0 and mstx.range_push("inner") == 1
    assert mstx.range_pop() == 1 and mstx.range_pop() == 0 and mstx.range_pop() == -1
    with pytest.warns(UserWarning, match="Invalid message") as caught:
        assert mstx.range_start("") == 0
    with pytest.warns(UserWarning, match="Invalid stream") as caught_stream:
        assert mstx.range_start("x", stream="not a stream") == 0
    with pytest.warns(UserWarning, match="Invalid stream") as caught_annotate, annotate("x", stream="not a stream"):
        pass
    # each warning names the caller's line, never the emulator's
    assert {w.filename for w in (*caught, *caught_stream, *caught_annotate)} == {__file__}
    assert mstx.range_start("on a stream", stream=torch.npu.current_stream()) > 0

    @mstx.mstx_range("decorated")
    def double(v):
        return 2 * v

    assert double(3) == 6


def test_utilization_ipc_collect_and_device_checks():
    assert torch.npu.utilization() == 0 and torch.npu.utilization(1) == 0
    with pytest.raises(AssertionError, match="Invalid device id"):
        torch.npu.utilization(99)
    assert torch.npu.ipc_collect() is None
    assert torch.npu.check_uce_in_memory(0) == 0
    with pytest.warns(UserWarning, match="NPU does not use blas handle"):
        assert torch.npu.current_blas_handle() is None
    with pytest.raises(RuntimeError, match="soc_version >= Ascend910B1"):
        torch.npu.get_npu_overflow_flag()


def test_memory_snapshot_lists_the_allocators_blocks():
    torch.npu.empty_cache()
    keep = torch.empty(3 * MiB, dtype=torch.uint8, device="npu:1")
    segments = [s for s in torch.npu.memory_snapshot() if s["address"] == keep.data_ptr()]
    assert len(segments) == 1
    seg = segments[0]
    size = 3 * MiB + 512  # torch_npu's block: 32 bytes of padding, rounded up to 512
    assert seg["device"] == 1 and seg["total_size"] == size and seg["segment_type"] == "large"
    assert seg["blocks"] == [{"address": keep.data_ptr(), "size": size, "requested_size": 3 * MiB,
                              "state": "active_allocated", "frames": []}]
    listed = sum(s["total_size"] for s in torch.npu.memory_snapshot() if s["device"] == 1)
    assert listed == torch.npu.memory_reserved(1)
    address = keep.data_ptr()
    del keep  # cached: still a segment, inactive, until empty_cache()
    cached = [s for s in torch.npu.memory_snapshot() if s["address"] == address]
    assert [s["blocks"][0]["state"] for s in cached] == ["inactive"] and cached[0]["allocated_size"] == 0
    torch.npu.empty_cache()
    assert all(s["address"] != address for s in torch.npu.memory_snapshot())
    snap = torch.npu.memory._snapshot()
    assert set(snap) == {"segments", "device_traces", "allocator_settings"}
    assert len(snap["device_traces"]) == torch.npu.device_count()


def test_record_memory_history_and_dump(tmp_path):
    import pickle

    with pytest.warns(UserWarning, match="no allocation stack frames"):
        torch.npu.memory._record_memory_history(max_entries=1000)
    x = torch.ones(1024, device="npu")
    torch.npu.memory._dump_snapshot(str(tmp_path / "snap.pickle"))
    torch.npu.memory._record_memory_history(enabled=None)
    snap = pickle.loads((tmp_path / "snap.pickle").read_bytes())
    assert any(s["address"] == x.data_ptr() for s in snap["segments"])
    with pytest.raises(ValueError):
        torch.npu.memory._record_memory_history(enabled="sometimes")


def test_caching_allocator_alloc_and_delete_are_accounted():
    before = torch.npu.memory_allocated(0)
    ptr = torch.npu.caching_allocator_alloc(4096)
    assert isinstance(ptr, int) and torch.npu.memory_allocated(0) == before + 4096
    torch.npu.caching_allocator_delete(ptr)
    assert torch.npu.memory_allocated(0) == before
    with pytest.raises(RuntimeError):
        torch.npu.caching_allocator_delete(ptr)
    assert torch.npu.get_allocator_backend() == "native"


def test_task_queue_and_sync_debug_switches(monkeypatch):
    assert torch.npu.get_task_queue_enable() == 1
    torch.npu.set_task_queue_enable(2)
    assert torch.npu.get_task_queue_enable() == 2
    monkeypatch.setenv("ASCEND_LAUNCH_BLOCKING", "1")
    assert torch.npu.get_task_queue_enable() == 0
    monkeypatch.delenv("ASCEND_LAUNCH_BLOCKING")
    torch.npu.set_task_queue_enable("1")
    assert torch.npu.get_task_queue_enable() == 1
    with pytest.raises(RuntimeError, match="mode must be 0, 1, or 2"):
        torch.npu.set_task_queue_enable(3)
    torch.npu.set_sync_debug_mode("default")
    assert torch.npu.get_sync_debug_mode() == 0
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.npu.set_sync_debug_mode("loud")
    with pytest.raises(RuntimeError, match="expected one of 0,1,2"):
        torch.npu.set_sync_debug_mode(3)


def test_deterministic_level_drives_torch_switch():
    from ascend_shim.sim.torch_npu.npu import npu_config

    was = torch.are_deterministic_algorithms_enabled()
    try:
        with pytest.warns(UserWarning):
            torch.npu.set_deterministic_level(1)
        assert torch.are_deterministic_algorithms_enabled() and npu_config._get_deterministic_level() == 1
        torch.use_deterministic_algorithms(False)
        assert npu_config._get_deterministic_level() == 0  # torch's later setting wins, as in torch_npu
        x = torch.ones(2, device="npu", requires_grad=True)
        y = torch.npu.enable_deterministic_with_backward(x)
        assert torch.are_deterministic_algorithms_enabled()
        torch.npu.disable_deterministic_with_backward(y).sum().backward()
        assert torch.are_deterministic_algorithms_enabled() is False and x.grad.tolist() == [1.0, 1.0]
    finally:
        torch.use_deterministic_algorithms(was)


def test_compatible_impl_cube_math_and_graph_handlers():
    torch.npu.use_compatible_impl(True)
    assert torch.npu.are_compatible_impl_enabled() is True
    torch.npu.use_compatible_impl(False)
    assert torch.npu.are_compatible_impl_enabled() is False
    assert torch.npu.CubeMathType.USE_HF32 == 3

    @torch.npu.register_npu_graph_handler(["my_op.default"])
    class Handler(torch.npu.NpuGraphOpHandler):
        pass

    from ascend_shim.sim.torch_npu.npu import graphs

    assert graphs._NPU_GRAPH_OP_HANDLERS["my_op.default"] is Handler
    assert isinstance(torch.npu.SyncLaunchStream(), torch.Stream)  # a sibling of torch.npu.Stream, as in torch_npu


@pytest.mark.parametrize("mode", ["sitecustomize", "run"])
def test_import_torch_npu_before_torch(tmp_path, mode):
    import os
    import subprocess
    import sys

    import ascend_shim

    script = tmp_path / "first.py"
    script.write_text("import torch_npu\nimport torch\nassert torch_npu.npu is torch.npu\n"
                      "print(torch_npu.__version__, torch.ones(2).cuda().device, len(torch.npu.__all__))\n")
    env = shim_free_env()
    if mode == "sitecustomize":
        bootstrap = os.path.join(os.path.dirname(ascend_shim.__file__), "bootstrap")
        env.update(ASCEND_SHIM="1", ASCEND_SHIM_BACKEND="sim",
                   PYTHONPATH=os.pathsep.join(filter(None, [bootstrap, env.get("PYTHONPATH")])))
        cmd = [sys.executable, str(script)]
    else:
        cmd = [sys.executable, "-m", "ascend_shim", "run", "--simulate", str(script)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "npu:0 144" in out.stdout


def test_unknown_names_raise_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_api'"):
        _ = torch.npu.no_such_api
    assert not hasattr(torch.npu, "no_such_api")
    assert getattr(torch.npu, "no_such_api", None) is None


def test_warnings_are_not_left_behind():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.npu.memory_allocated()
        torch.npu.current_stream()
        torch.randn(2, device="npu").cpu()


def test_memory_snapshot_ignores_tensors_without_storage_data():
    """Functional tensors left alive by tracing (torch.compile) wrap npu storages with no data pointer."""
    keep = torch.empty(MiB, dtype=torch.uint8, device="npu:2")
    functional = torch._to_functional_tensor(keep)
    assert any(s["address"] == keep.data_ptr() for s in torch.npu.memory_snapshot())
    del functional, keep
