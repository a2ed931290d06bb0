"""The builtin facade answers as torch_npu does where it rests on the shared runtime (ascend_shim.sim.runtime,
ascend_shim.sim.streams, ascend_shim.sim.formats): stream classes and handles, events with host timestamps,
device properties, sync debug mode, argument checks, the memory summary's layout, the native bindings."""
import uuid
import warnings

import pytest
import torch

import torch_npu

pytestmark = pytest.mark.builtin_layer


def test_streams_have_raw_handles_and_torch_npu_reprs():
    default, user = torch.npu.current_stream(), torch.npu.Stream()
    assert default != user and user.npu_stream != 0 and user.npu_stream != default.npu_stream
    assert repr(user).startswith("<torch_npu.npu.Stream device=npu:0 npu_stream=0x")
    assert isinstance(torch.npu.stream(user), torch.npu.utils.StreamContext)
    with torch.npu.stream(user):
        assert torch.npu.current_stream() == user
    assert torch.npu.current_stream() == default
    assert hash(user) == hash(torch.npu.Stream(stream_id=user.stream_id, device_index=user.device_index,
                                               device_type=user.device_type))
    with pytest.raises(RuntimeError, match="Unrecognized stream id"):
        torch.npu.Stream(stream_id=(7 << 5), device_index=0, device_type=20)


def test_sync_launch_and_external_streams():
    sync = torch.npu.SyncLaunchStream()
    assert sync.stream_id >> 5 == 2 and repr(sync).startswith("<torch_npu.npu.SyncLaunchStream")
    external = torch.npu.ExternalStream(0x1234_5000)
    assert external.npu_stream == 0x1234_5000 and isinstance(external, torch.npu.Stream)
    with pytest.raises(RuntimeError, match="External NPU stream"):
        external.synchronize()


def test_events_record_host_timestamps():
    first, second = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    assert repr(first) == "<torch_npu.npu.Event uninitialized>"
    with pytest.raises(RuntimeError, match="recorded"):
        first.elapsed_time(second)
    torch.npu.current_stream().record_event(first)
    second.record()
    assert repr(first).startswith("<torch_npu.npu.Event 0x")
    assert isinstance(first.recorded_time(), int) and second.recorded_time() > first.recorded_time() > 0
    assert second.elapsed_time(first) <= 0 <= first.elapsed_time(second)
    untimed = torch.npu.Event()
    untimed.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        untimed.elapsed_time(second)
    assert isinstance(torch.npu.current_stream().record_event(), torch.npu.Event)


def test_device_properties_have_uuid_and_none_for_cuda_only_fields():
    props = torch.npu.get_device_properties(0)
    assert isinstance(props.uuid, uuid.UUID) and props.uuid != torch.npu.get_device_properties(1).uuid
    assert props.major is None and props.warp_size is None and props.gcnArchName is None
    assert repr(props).startswith("_NPUDeviceProperties(name='Ascend910B3'")


def test_sync_debug_mode_warns_and_raises_on_device_to_host_transfers():
    x = torch.ones(4, device="npu")
    try:
        torch.npu.set_sync_debug_mode("warn")
        assert torch.npu.get_sync_debug_mode() == 1
        with pytest.warns(UserWarning, match="synchronizing NPU operation"):
            x.cpu()
        torch.npu.set_sync_debug_mode(2)
        with pytest.raises(RuntimeError, match="synchronizing NPU operation"):
            x.sum().item()
        with pytest.raises(RuntimeError, match="expected one of 0,1,2"):
            torch.npu.set_sync_debug_mode(-1)
        assert torch.npu.get_sync_debug_mode() == 2
    finally:
        torch.npu.set_sync_debug_mode(0)


def test_argument_checks_made_before_the_runtime():
    with pytest.raises(OverflowError, match="can't convert negative value to unsigned int"):
        torch.npu.set_op_timeout_ms(-1)
    with pytest.raises(OverflowError, match="Overflow when unpacking"):
        torch.npu.set_op_timeout_ms(2 ** 32)
    torch.npu.set_op_timeout_ms(1000)
    for device in ("0", 0.0, None, True):
        with pytest.raises(TypeError, match="device must be an int"):
            torch.npu.get_device_limit(device)
    with pytest.raises(AssertionError, match="Invalid device id"):
        torch.npu.set_device_limit(99, cube_num=1)
    with pytest.raises(ValueError, match="Invalid fraction value"):
        torch.npu.set_per_process_memory_fraction(1.5)
    with pytest.raises(TypeError, match="Invalid type"):
        torch.npu.set_per_process_memory_fraction(1)


def test_memory_summary_has_torch_npus_layout():
    device = torch.npu.device_count() - 1  # one no other test of this process allocates on
    assert torch.npu.memory_allocated(device) == 0
    keep = torch.empty(3 << 20, dtype=torch.uint8, device=f"npu:{device}")
    summary = torch.npu.memory_summary(device)
    lines = summary.splitlines()
    assert all(len(line) == 77 for line in lines)  # 75 columns between the borders
    assert lines[1] == "|" + " " * 18 + f"PyTorch NPU memory summary, device ID {device}" + " " * 18 + "|"
    assert lines[3].startswith("|            NPU OOMs: 0 ")
    assert any(line.startswith("| Allocated memory      |    3072 KB |") for line in lines)
    assert len(torch.npu.memory_summary(device, abbreviated=True).splitlines()) < len(lines)
    del keep


def test_native_bindings_and_format_helpers():
    assert torch_npu._C._npu_getDeviceCount() == torch.npu.device_count()
    t = torch_npu._C._empty_strided_npu((2, 3), (1, 2), torch.float16)
    assert t.device == torch.device("npu", torch.npu.current_device()) and t.stride() == (1, 2)
    with pytest.raises(RuntimeError, match="exactly 3 args"):
        torch_npu._C._empty_strided_npu((2,), (1,))
    assert torch_npu._C._npu_getCurrentStream(0) == (0, 0, 20)
    with pytest.raises(AttributeError):
        _ = torch_npu._C._npu_no_such_binding
    x = torch.ones(2, 3, device="npu")
    assert torch_npu.get_npu_format(x) == 2 and str(torch_npu.get_npu_format(x)) == "ND"
    assert torch_npu.get_npu_format(x) is torch_npu.Format.ND and torch_npu.npu_format_cast(x, 2) is x
    assert torch_npu.empty_with_format((2, 3), dtype=torch.float32, device="npu").shape == (2, 3)
    with pytest.raises(NotImplementedError, match="private NPU format"):
        torch_npu.npu_format_cast(x, 29)


def test_erase_stream_lets_the_block_be_reused():
    side = torch.npu.Stream()
    t = torch.ones(1 << 18, device="npu")
    address = t.data_ptr()
    t.record_stream(side)
    torch_npu.erase_stream(t, side)
    del t
    assert torch.ones(1 << 18, device="npu").data_ptr() == address
    with pytest.raises(TypeError, match="torch_npu.npu.Stream"):
        torch_npu.erase_stream(torch.ones(1, device="npu"), 0)


def test_aclnn_module():
    with warnings.catch_warnings(record=True):
        assert torch.npu.aclnn.version() is None
    was = torch.npu.aclnn.allow_hf32
    try:
        torch.npu.aclnn.allow_hf32 = False
        assert torch.npu.conv.allow_hf32 is False and torch.npu.aclnn.allow_hf32 is False
        with torch.npu.aclnn.flags(allow_hf32=True):
            assert torch.npu.conv.allow_hf32 is True
        assert torch.npu.conv.allow_hf32 is False
    finally:
        torch.npu.aclnn.allow_hf32 = was


def test_device_core_limits_are_set_once_and_read_back():
    assert torch.npu.get_device_limit(5) == {"cube_core_num": 20, "vector_core_num": 40}
    was = torch.npu.set_device_limit.called
    try:
        torch.npu.set_device_limit.called = False
        torch.npu.set_device_limit(5, 12, 24)
        assert torch.npu.get_device_limit(5) == {"cube_core_num": 12, "vector_core_num": 24}
        assert torch_npu._C._npu_get_device_res_limit(5, 0) == 12
        with pytest.raises(RuntimeError, match="only set this interface once"):
            torch.npu.set_device_limit(5, 20, 40)
    finally:
        torch_npu._C._npu_set_device_res_limit(5, 0, 20)
        torch_npu._C._npu_set_device_res_limit(5, 1, 40)
        torch.npu.set_device_limit.called = was


def test_an_overflow_skips_every_later_optimizer_step_of_the_iteration():
    first, second = torch.nn.Linear(2, 1).npu(), torch.nn.Linear(2, 1).npu()
    opt_first, opt_second = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (first, second))
    scaler = torch.npu.amp.GradScaler(init_scale=128.0)
    x = torch.ones(3, 2, device="npu")
    scaler.scale(first(x).sum() + second(x).sum()).backward()
    first.weight.grad.fill_(float("inf"))
    before = second.weight.detach().clone()
    scaler.step(opt_first)
    scaler.step(opt_second)  # its gradients are finite: skipped all the same, as torch_npu's scaler does
    scaler.update()
    assert torch.equal(second.weight, before) and scaler.get_scale() == 64.0
    scaler.scale(second(x).sum()).backward()
    scaler.step(opt_second)
    assert not torch.equal(second.weight, before)


def test_a_disabled_scaler_unscales_nothing():
    model = torch.nn.Linear(2, 1).npu()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.npu.amp.GradScaler(enabled=False)
    model(torch.ones(1, 2, device="npu")).sum().backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 1.0
