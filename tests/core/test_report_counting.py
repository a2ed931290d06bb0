"""Counting translated calls: the first call at a site records it, later ones are a per-thread dictionary hit;
the report reads the same counts, lines and details either way."""
import sys
import threading

import torch

import ascend_shim
from ascend_shim.report import REPORT


def _events(api):
    return [(e["detail"], e["line"], e["count"]) for e in REPORT.events() if e["api"] == api]


def test_repeated_calls_at_one_site_are_counted_per_site_and_value():
    ascend_shim.activate(backend="sim", inherit=False, log_level="off")
    try:
        REPORT.reset()
        line = sys._getframe().f_lineno + 2
        for device in ["cuda", "cuda:0", "cuda", "cpu", "cuda"] * 4:
            torch.zeros(1, device=device)
        torch.zeros(1, device="cuda")  # another site
        assert sorted(_events("torch.zeros")) == sorted([
            ("device='cuda' -> 'npu'", line, 12), ("device='cuda:0' -> 'npu:0'", line, 4),
            ("device='cuda' -> 'npu'", line + 1, 1)])
    finally:
        ascend_shim.deactivate()


def test_threads_count_without_losing_calls_and_reset_forgets_them():
    ascend_shim.activate(backend="sim", inherit=False, log_level="off")
    try:
        REPORT.reset()
        x = torch.ones(1)

        def work():
            for _ in range(500):
                x.to("cuda")

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [count for _, _, count in _events("Tensor.to")] == [2000]
        REPORT.reset()
        assert _events("Tensor.to") == []
        work()
        assert [count for _, _, count in _events("Tensor.to")] == [500]
    finally:
        ascend_shim.deactivate()


def test_a_library_frame_is_attributed_to_the_user_line_that_called_it():
    ascend_shim.activate(backend="sim", inherit=False, log_level="off")
    try:
        REPORT.reset()
        layer = torch.nn.Linear(2, 2)
        line = sys._getframe().f_lineno + 2
        for _ in range(3):
            layer.to("cuda")  # Module.to runs torch's own code, which moves each tensor
        assert ("device='cuda' -> 'npu'", line, 3) in _events("Module.to")
    finally:
        ascend_shim.deactivate()


def test_a_deprecated_torch_alias_is_attributed_to_the_user_line():
    """torch.cuda.amp.GradScaler is wrapped by typing_extensions' @deprecated: that wrapper is not the call site."""
    import warnings

    ascend_shim.activate(backend="sim", inherit=False, log_level="off")
    try:
        REPORT.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            line = sys._getframe().f_lineno + 1
            torch.cuda.amp.GradScaler(enabled=True)
        assert ("device='cuda' -> 'npu'", line, 1) in _events("GradScaler")
    finally:
        ascend_shim.deactivate()


def test_a_call_through_torch_npus_own_wrapper_is_counted_at_the_users_line():
    """torch_npu wraps torch functions (its torch.load calls torch's): the site is the user's line, once."""
    from ascend_shim.report import Report

    report = Report()
    wrapper = {"__name__": "torch_npu.utils.serialization", "report": report}
    exec(compile("def load():\n    report.translated('torch.load', 'x')\n", "/site/torch_npu/utils/serialization.py",
                 "exec"), wrapper)
    line = sys._getframe().f_lineno + 1
    wrapper["load"]()
    assert [(e["file"], e["line"]) for e in report.events()] == [(__file__, line)]
