"""``scan`` judges device comparisons by the rewrite's own rules: what it calls covered is what runs rewritten."""
import pytest

from ascend_shim.config import Config
from ascend_shim.rewrite import rewrite_source
from ascend_shim.scan import scan_paths

SOURCE = '''\
import torch
x = torch.zeros(1)
a = x.device.type == "cuda"
b = x.device.type == "cuda" == True
c = str(x.device) == f"cuda:{0}"
d = str(x.device).endswith("cuda")
def aware(d):
    if d.type == "cuda":
        return 1
    elif d.type == "npu":
        return 2
match x.device.type:
    case "cuda":
        pass
e = torch.device("cuda") == x.device
f = dist_backend in ("nccl", "gloo")
g = str(x.device).startswith("cuda")
'''


def _verdicts(tmp_path, **config):
    (tmp_path / "t.py").write_text(SOURCE)
    result = scan_paths([str(tmp_path / "t.py")], config=Config(**config))
    return {f.line: f for f in result.findings if f.category == "device-compare"}


def test_verdicts_follow_the_rewrite(tmp_path):
    found = _verdicts(tmp_path)
    _, sites = rewrite_source(SOURCE, "t.py")
    rewritten = {s.line for s in sites if s.rewritten}
    assert rewritten == {3, 13, 15, 16, 17}
    for line, f in found.items():
        if line in rewritten:
            assert f.verdict == "covered" and f.patches == ("user_code.process.user-code-comparisons",), f
        elif line == 8:   # the code has its own "npu" branch: left alone on purpose, and that works
            assert f.verdict == "covered" and "already compares against" in f.reason
        else:             # a chain, an f-string, .endswith: not rewritten, so not covered
            assert f.verdict == "not covered" and f.reason.startswith("left as is"), f
    assert set(found) == {3, 4, 5, 6, 8, 13, 15, 16, 17}
    assert found[13].symbol == "device-compare:cuda"   # a case pattern is a comparison, not a device string
    assert found[16].symbol == "device-compare:nccl"


def test_rewrite_off_means_not_covered(tmp_path):
    found = _verdicts(tmp_path, rewrite=False)
    assert found[3].verdict == "not covered" and "ASCEND_SHIM_REWRITE=0" in found[3].reason


@pytest.mark.parametrize("disabled", ["user_code"])
def test_disabled_user_code_set_means_not_covered(tmp_path, disabled):
    found = _verdicts(tmp_path, disable=(disabled,))
    assert found[3].verdict == "not covered"
