"""CUDA idioms real code trips on, each a small unmodified CUDA script under `ascend-shim run --simulate`: the
script asserts the CUDA semantics itself (numbers against a CPU or one-device run where there are numbers)."""
import pytest

from .test_cuda_scripts import line_of, run_script


def test_precision_flags_and_the_is_built_gate(tmp_path):
    report, _ = run_script("precision_flags.py", tmp_path)
    details = {(e["api"], e["detail"]) for e in report["events"]}
    assert ("torch.backends.cudnn.allow_tf32", "torch.npu.conv.allow_hf32 = False") in details
    assert ("torch.backends.cudnn.flags", "torch.npu.conv.allow_hf32 = False") in details
    assert [(e["category"], e["line"]) for e in report["events"] if e["api"] == "Tensor.contiguous"] == [
        ("fallback", line_of("precision_flags.py", "batch = images"))]


def test_twinkle_metrics_on_an_npu_box_without_megatron(tmp_path):
    report, _ = run_script("twinkle_metrics.py", tmp_path)
    assert report["patches"]["twinkle.find_spec_megatron"]["status"] == "applied"
    assert any(e["api"] == "twinkle importlib.util.find_spec" and "megatron is not installed" in e["detail"]
               for e in report["events"])


def test_data_parallel_over_every_visible_device(tmp_path):
    report, proc = run_script("data_parallel.py", tmp_path)
    details = [e["detail"] for e in report["events"] if e["api"] == "nn.DataParallel"]
    assert details and details[0].startswith("8 devices: scatter, replicate, parallel_apply, gather"), details
    assert "NCCL" not in proc.stderr, proc.stderr  # torch's "not compiled with NCCL support", once per backward


def test_sparse_gcn_layer(tmp_path):
    report, proc = run_script("sparse_gcn.py", tmp_path)
    # torch's warning from C inside a translated call names the user's line, as without the shim
    assert (f"sparse_gcn.py:{line_of('sparse_gcn.py', 'adj = ')}: UserWarning: Sparse invariant checks"
            in proc.stderr), proc.stderr
    assert report["patches"]["torch_sparse.addmm"]["status"] == "applied"
    fallbacks = [e for e in report["events"] if e["api"] == "sparse @ dense (aten::addmm)"]
    assert {e["line"] for e in fallbacks if e["file"].endswith("sparse_gcn.py")} == {
        line_of("sparse_gcn.py", "hidden = F.relu"), line_of("sparse_gcn.py", "out = torch.sparse.mm")}


@pytest.mark.slow
def test_hogwild_workers_train_the_shared_model(tmp_path):
    _, proc = run_script("hogwild.py", tmp_path)
    assert "worker (0, 'npu:0')" in proc.stdout and "worker (1, 'npu:0')" in proc.stdout, proc.stdout
