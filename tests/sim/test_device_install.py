"""Installing the emulator: idempotence, the torch_npu alias and distribution, what install() registers, the
build cache (fast path, file lock, key), ASCEND_SHIM_SIM_DEVICES, and the process-level rules a real device
imposes (no use after fork, install before the first backward).

Subprocess tests reuse the extension the session built (the cache is keyed by sources, not by process)."""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

from tests.conftest import LAYER

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code: str, env_extra: dict | None = None, timeout: int = 120,
               args: list[str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO, **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *(args or [])], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=timeout)


def test_install_is_idempotent_and_thread_safe(sim):
    errors = []

    def again():
        try:
            sim.install()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=again) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # the builtin layer installs; where Huawei's torch_npu Python brought the device up, install() leaves it alone
    assert sim.is_installed() is (LAYER == "builtin") and sim.layer() == LAYER
    assert torch._C._get_privateuse1_backend_name() == "npu"
    assert hasattr(torch.Tensor, "is_npu") and hasattr(torch.nn.Module, "npu") and hasattr(torch.UntypedStorage, "npu")


def test_import_torch_npu_returns_the_emulator(sim):
    import torch_npu

    if LAYER == "builtin":
        emulated = importlib.import_module("ascend_shim.sim.torch_npu")
        assert torch_npu is emulated
        # one module however it is imported (Huawei's registers torch.npu alone: dynamo's trace rules, which name
        # torch.npu.amp.autocast_mode, import a second copy of its amp package as torch.npu.amp)
        assert importlib.import_module("torch_npu.npu.amp") is torch.npu.amp
    else:  # Huawei's package, as fetch-torch-npu prepared it
        from ascend_shim.sim.real_layer import find_prepared

        assert torch_npu.__file__ == str(find_prepared() / "site" / "torch_npu" / "__init__.py")
    assert torch_npu.npu is torch.npu
    assert torch_npu.__version__ == sim.torch_base_version() == torch.__version__.split("+")[0]
    assert importlib.metadata.version("torch_npu") == torch_npu.__version__


def test_torch_npu_reexports_the_fused_ops():
    import torch_npu

    if importlib.util.find_spec("ascend_shim.sim.ops") is None:
        pytest.skip("the fused-op package is not present in this tree")
    ops = importlib.import_module("ascend_shim.sim.ops")
    assert ops.__all__
    for name in ops.__all__:  # the operators whose kernels these are, as torch_npu exports its ops
        assert getattr(torch_npu, name) is getattr(torch.ops.npu, name)
    if LAYER != "builtin":  # Huawei's own optimizer, over the emulated fused ops
        assert torch_npu.optim.NpuFusedAdamW.__module__ == "torch_npu.optim.npu_fused_adamw"
    elif importlib.util.find_spec("ascend_shim.sim.ops.optim") is not None:
        assert torch_npu.optim.NpuFusedAdamW is importlib.import_module("ascend_shim.sim.ops.optim").NpuFusedAdamW


def test_install_registers_the_hccl_backend():
    if importlib.util.find_spec("ascend_shim.sim.hccl") is None:
        pytest.skip("the hccl package is not present in this tree")
    import torch.distributed as dist

    assert "hccl" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map.get("npu") == "hccl"


def test_cache_key_tracks_sources_and_the_build_dir_is_overridable(monkeypatch, tmp_path):
    from ascend_shim.sim import _extension

    key = _extension.cache_key()
    assert key.startswith("torch" + torch.__version__.replace("+", "_"))
    monkeypatch.setenv("ASCEND_SHIM_SIM_BUILD_DIR", str(tmp_path))
    assert _extension.build_dir() == tmp_path / key
    copy = tmp_path / "csrc"
    shutil.copytree(_extension._csrc(), copy)
    (copy / "nn.cpp").write_text((copy / "nn.cpp").read_text() + "\n// edited\n")
    monkeypatch.setattr(_extension, "_csrc", lambda: copy)
    assert _extension.cache_key() != key
    assert all((_extension.Path(_extension.__file__).with_name("csrc") / n).exists() for n in _extension.SIM.sources)


def test_each_extension_has_its_own_cache_key_tracking_only_its_sources(monkeypatch, tmp_path):
    from ascend_shim.sim import _extension

    sim_key, hccl_key = _extension.cache_key(_extension.SIM), _extension.cache_key(_extension.HCCL)
    assert hccl_key.startswith("hccl-torch") and sim_key != hccl_key
    copy = tmp_path / "csrc"
    shutil.copytree(_extension._csrc(), copy)
    source = copy / _extension.HCCL.sources[0]
    source.write_text(source.read_text() + "\n// edited\n")
    monkeypatch.setattr(_extension, "_csrc", lambda: copy)
    assert _extension.cache_key(_extension.HCCL) != hccl_key
    assert _extension.cache_key(_extension.SIM) == sim_key


def test_cached_extension_loads_without_a_build_and_honours_the_device_count():
    result = run_python("""
        import threading, time
        import torch
        import torch.utils.cpp_extension as cpp
        def no_build(*a, **k):
            raise AssertionError("the cached extension must load without running ninja")
        cpp.load = no_build
        import ascend_shim.sim as sim
        start = time.perf_counter()
        threads = [threading.Thread(target=sim.install) for _ in range(4)]
        [t.start() for t in threads]; [t.join() for t in threads]
        took = time.perf_counter() - start
        from ascend_shim.sim import counters
        assert torch.npu.device_count() == 2 and len(torch.npu.default_generators) == 2
        assert sorted(counters.snapshot()["live_bytes"]) == [0, 1]
        try:
            torch.empty(1, device="npu:2")
        except RuntimeError as exc:
            assert "the emulated NPU has 2 devices" in str(exc)
        else:
            raise AssertionError("npu:2 must not exist")
        x = torch.ones(3, device="npu:1", requires_grad=True)
        (x * 2).sum().backward()
        print("OK", round(took, 3), x.grad.tolist())
    """, {"ASCEND_SHIM_SIM_DEVICES": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout and "[2.0, 2.0, 2.0]" in result.stdout


def test_concurrent_first_builds_serialize_on_the_lock(sim, tmp_path):
    from ascend_shim.sim import _extension

    real_so = _extension.build_dir() / f"{_extension.SIM.name}.so"
    assert real_so.exists()
    log = tmp_path / "builds.log"
    child = f"""
        import os, shutil, sys, time
        import torch
        from ascend_shim.sim import _extension
        def fake_build(ext, directory, verbose):  # stands in for the compiler: slow, then produces the .so
            with open({str(log)!r}, "a") as f:
                f.write(f"start {{os.getpid()}}\\n")
            time.sleep(1.5)
            target = directory / (ext.name + ".so")
            shutil.copy({str(real_so)!r}, str(target) + ".tmp")
            os.replace(str(target) + ".tmp", target)
            with open({str(log)!r}, "a") as f:
                f.write(f"end {{os.getpid()}}\\n")
            return _extension._import_built(target)
        _extension._build = fake_build
        print("OK", _extension.load().device_count())
    """
    env = dict(os.environ, PYTHONPATH=REPO, ASCEND_SHIM_SIM_BUILD_DIR=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(child)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=REPO) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
        assert out.strip() == "OK 8"
    lines = log.read_text().split()
    assert lines[0] == "start" and lines[2] == "end" and len(lines) == 4  # exactly one build ran


def test_install_after_the_first_backward_is_refused():
    result = run_python("""
        import torch
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
        import ascend_shim.sim as sim
        try:
            sim.install()
        except RuntimeError as exc:
            print("REFUSED", "first autograd backward" in str(exc))
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REFUSED True" in result.stdout


def test_a_forked_child_cannot_use_the_device_once_the_parent_has():
    """torch_npu's rule: a child forked before the parent used the device uses it; one forked after is refused
    (``_is_in_bad_fork()``), the parent goes on. In a fresh process brought up on the lane's layer, so that the
    fork before first use exists; forked by multiprocessing, as DataLoader workers and ``mp.Process`` are."""
    result = run_python("""
        import multiprocessing as mp, sys
        import torch
        import ascend_shim.sim as sim
        if sys.argv[1] == "real":  # as tests/conftest.py brings it up
            from ascend_shim import backend
            backend.prepare("sim", "real")
            backend.bring_up("sim", "real")
        else:
            sim.install()

        def child(q):
            try:
                q.put(("used", torch.ones(2, device="npu").sum().item(), torch.npu._is_in_bad_fork()))
            except RuntimeError as exc:
                q.put(("refused", "forked subprocess" in str(exc), torch.npu._is_in_bad_fork()))

        def fork():
            ctx = mp.get_context("fork")
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,))
            p.start()
            got = q.get(timeout=120)
            p.join(120)
            return got + (p.exitcode,)

        print("before", fork())
        torch.ones(1, device="npu")  # the parent uses the device
        print("after", fork())
        print("parent", torch.npu._is_in_bad_fork(), torch.ones(2, device="npu").sum().item(), sim.layer())
    """, args=[LAYER])
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()[-3:]
    expected = ["before ('used', 2.0, False, 0)", "after ('refused', True, True, 0)", f"parent False 2.0 {LAYER}"]
    assert lines == expected, result.stdout + result.stderr[-3000:]


def test_device_state_initializes_lazily_like_torch_npu():
    """is_initialized() is False until the program uses the device (the emulator's own probe does not count), so
    DeviceMesh selects the device from LOCAL_RANK as it does on torch_npu; first use latches it True."""
    out = run_python("""
        import os, torch, ascend_shim.sim as sim
        sim.install()
        seen = [torch.npu.is_initialized(), torch.npu._initialized]
        from torch.distributed.device_mesh import DeviceMesh
        import torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29613", LOCAL_RANK="1")
        dist.init_process_group("gloo", rank=0, world_size=1)
        DeviceMesh("npu", [0])
        seen.append(torch.npu.current_device())
        seen += [torch.npu.is_initialized(), torch.npu._initialized]
        print(seen)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[False, False, 1, True, True]"


def test_first_npu_tensor_initializes_the_device_state():
    out = run_python("""
        import torch, ascend_shim.sim as sim
        sim.install()
        before = torch.npu.is_initialized()
        torch.zeros(1, device="npu:1")
        print([before, torch.npu.is_initialized()])
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[False, True]"


@pytest.mark.parametrize("visible, expected", [("2,5", "2 npu:1"), ("5,2", "0 -"), ("3,9,1", "1 npu:0"),
                                               ("1,1", "0 -"), ("", "0 -")])
def test_visible_devices_narrow_the_emulated_ones_as_on_the_runtime(visible, expected):
    """ASCEND_RT_VISIBLE_DEVICES (what Ray and launchers set per worker) decides what the process sees, parsed as
    torch_npu parses it: ids must ascend ("5,2" shows no device), the list ends at an id the machine lacks."""
    out = run_python("""
        import torch, ascend_shim.sim as sim
        sim.install()
        n = torch.npu.device_count()
        last = str(torch.ones(1, device=f"npu:{n - 1}").device) if n else "-"
        print(n, last)
    """, env_extra={"ASCEND_RT_VISIBLE_DEVICES": visible})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == expected


def _fake_ninja_module(monkeypatch, bin_dir):
    import types

    monkeypatch.setitem(sys.modules, "ninja", types.SimpleNamespace(BIN_DIR=str(bin_dir)))


def test_a_build_finds_the_ninja_wheel_off_path_and_restores_path(monkeypatch, tmp_path):
    """An environment's python run without activating it: its ninja wheel's bin directory is not on PATH."""
    import torch.utils.cpp_extension as cpp

    from ascend_shim.sim import _extension

    wheel_bin, empty = tmp_path / "venv-bin", tmp_path / "empty"
    wheel_bin.mkdir(), empty.mkdir()
    (wheel_bin / "ninja").write_text("#!/bin/sh\necho 1.13.2\n")
    (wheel_bin / "ninja").chmod(0o755)
    _fake_ninja_module(monkeypatch, wheel_bin)
    monkeypatch.setenv("PATH", str(empty))
    seen = []
    monkeypatch.setattr(cpp, "load", lambda **kw: seen.append((os.environ["PATH"], kw["name"])) or "built")
    build = tmp_path / "build"
    build.mkdir()
    assert _extension._build(_extension.HCCL, build, verbose=False) == "built"
    assert seen == [(f"{wheel_bin}{os.pathsep}{empty}", "_ascend_shim_sim_hccl")]
    assert os.environ["PATH"] == str(empty)


def test_a_build_without_ninja_names_the_install_command(monkeypatch, tmp_path):
    import torch.utils.cpp_extension as cpp

    from ascend_shim.errors import ShimError
    from ascend_shim.sim import _extension

    _fake_ninja_module(monkeypatch, tmp_path)  # a directory without ninja in it
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(cpp, "load", lambda **kw: pytest.fail("must not start a build without ninja"))
    with pytest.raises(ShimError, match=r"pip install 'ascend-shim\[sim\]'"):
        _extension._build(_extension.SIM, tmp_path, verbose=False)


def test_a_fresh_build_is_importable_by_name_for_the_ops_that_need_it(tmp_path):
    """torch's extension loader does not put the module in sys.modules; the first process on a machine builds
    the emulator, and its dropout masks (which take the device generator's Philox state) must work too."""
    from ascend_shim.sim import _extension

    real_so = _extension.build_dir() / f"{_extension.SIM.name}.so"
    result = run_python(f"""
        import importlib.util, shutil, sys
        import torch
        from ascend_shim.sim import _extension
        def torch_like_build(ext, directory, verbose):  # copies the built .so and loads it as torch does
            target = directory / (ext.name + ".so")
            shutil.copy({str(real_so)!r}, target)
            spec = importlib.util.spec_from_file_location(ext.name, target)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        _extension._build = torch_like_build
        import ascend_shim.sim
        ascend_shim.sim.install()
        import torch_npu
        assert sys.modules[_extension.SIM.name] is _extension.load()
        q = torch.randn(1, 8, 2, 16, dtype=torch.float16).npu()
        out = torch_npu.npu_fusion_attention(q, q, q, 2, "BSND", keep_prob=0.5)
        print("OK", out[0].device)
    """, env_extra={"ASCEND_SHIM_SIM_BUILD_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "OK npu:0"
