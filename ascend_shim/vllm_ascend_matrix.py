"""vllm-ascend's release compatibility matrix, as data (the rules that read it live in :mod:`ascend_shim.versions`).

Source: github.com/vllm-project/vllm-ascend, ``docs/source/community/versioning_policy.md``, section "Release
compatibility matrix", read at commit 182b75ea84ff13ece27b57391331ef8935410aea (main, 2026-08-22). The
v0.24.0rc1 row is that file's own row at tag v0.24.0rc1 (commit 412cda26814ff70c326f6eb6510f1b610f67bbc0); main's
copy lacks it. No other release has a row there (v0.25.1rc1 is tagged but its own copy lists no row for it), so
newer releases are unknown here rather than guessed.

Per row, from the matrix: the vLLM version(s), the Python range, the "Stable CANN", torch / torch_npu. numpy:
``requirements.txt`` at each release tag (``numpy<2.0.0``, written ``<2``, up to v0.19.1rc1; a bare ``numpy`` from
v0.20.2rc1 on, written ``""``: no bound).

vllm for v0.11.0rc0: the matrix names the vLLM git tag v0.11.0rc3 (not on PyPI); that release's installation page
(``pip_vllm_version`` in ``docs/source/conf.py`` at tag v0.11.0rc0) installs ``vllm==0.11.0``. The first vllm of
a row is the one to ``pip install``.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Release:
    ascend: str                 # the vllm-ascend release
    vllm: tuple[str, ...]       # the vllm versions it is released for; the first is the one to install
    python: str                 # a specifier on the Python version
    cann: str                   # the "Stable CANN" it is released with
    torch: str
    torch_npu: str
    numpy: str | None           # numpy's specifier ("" no bound); None: not published


_PY39, _PY310, _PY310_312 = ">=3.9,<3.12", ">=3.10,<3.12", ">=3.10,<3.13"


def _r(ascend, vllm, python, cann, torch, torch_npu, numpy) -> Release:
    return Release(ascend, vllm if isinstance(vllm, tuple) else (vllm,), python, cann, torch, torch_npu, numpy)


#: every vllm-ascend release of the matrix, newest first (as the matrix lists them)
RELEASES: tuple[Release, ...] = (
    _r("0.24.0rc1", "0.24.0", _PY310_312, "9.0.1", "2.10.0", "2.10.0.post2", ""),
    _r("0.23.0", "0.23.0", _PY310_312, "9.1.0", "2.10.0", "2.10.0.post4", ""),
    _r("0.23.0rc1", "0.23.0", _PY310_312, "9.0.1", "2.10.0", "2.10.0.post2", ""),
    _r("0.22.1rc1", "0.22.1", _PY310_312, "9.0.0", "2.10.0", "2.10.0", ""),
    _r("0.21.0rc1", "0.21.0", _PY310_312, "9.0.0", "2.10.0", "2.10.0", ""),
    _r("0.20.2rc1", "0.20.2", _PY310, "9.0.0", "2.10.0", "2.10.0", ""),
    _r("0.19.1rc1", "0.19.1", _PY310, "8.5.1", "2.9.0", "2.9.0", "<2"),
    _r("0.18.0", "0.18.0", _PY310, "8.5.1", "2.9.0", "2.9.0.post1+git4c901a4", "<2"),
    _r("0.18.0rc1", "0.18.0", _PY310, "8.5.1", "2.9.0", "2.9.0", "<2"),
    _r("0.17.0rc1", "0.17.0", _PY310, "8.5.1", "2.9.0", "2.9.0", "<2"),
    _r("0.16.0rc1", "0.16.0", _PY310, "8.5.1", "2.9.0", "2.9.0", "<2"),
    _r("0.15.0rc1", "0.15.0", _PY310, "8.5.0", "2.9.0", "2.9.0", "<2"),
    _r("0.14.0rc1", "0.14.1", _PY310, "8.5.0", "2.9.0", "2.9.0", "<2"),
    _r("0.13.0rc3", "0.13.0", _PY310, "8.5.1", "2.8.0", "2.8.0.post2", "<2"),
    _r("0.13.0", "0.13.0", _PY310, "8.5.0", "2.8.0", "2.8.0.post2", "<2"),
    _r("0.13.0rc2", "0.13.0", _PY310, "8.5.0", "2.8.0", "2.8.0.post1", "<2"),
    _r("0.13.0rc1", "0.13.0", _PY310, "8.3.RC2", "2.8.0", "2.8.0", "<2"),
    _r("0.12.0rc1", "0.12.0", _PY310, "8.3.RC2", "2.8.0", "2.8.0", "<2"),
    _r("0.11.0", "0.11.0", _PY39, "8.3.RC2", "2.7.1", "2.7.1.post1", "<2"),
    _r("0.11.0rc3", "0.11.0", _PY39, "8.3.RC2", "2.7.1", "2.7.1.post1", "<2"),
    _r("0.11.0rc2", "0.11.0", _PY39, "8.3.RC2", "2.7.1", "2.7.1", "<2"),
    _r("0.11.0rc1", "0.11.0", _PY39, "8.3.RC1", "2.7.1", "2.7.1", "<2"),
    _r("0.11.0rc0", ("0.11.0", "0.11.0rc3"), _PY39, "8.2.RC1", "2.7.1", "2.7.1.dev20250724", "<2"),
    _r("0.10.2rc1", "0.10.2", _PY39, "8.2.RC1", "2.7.1", "2.7.1.dev20250724", "<2"),
    _r("0.10.1rc1", ("0.10.1.1", "0.10.1"), _PY39, "8.2.RC1", "2.7.1", "2.7.1.dev20250724", "<2"),
    _r("0.10.0rc1", "0.10.0", _PY39, "8.2.RC1", "2.7.1", "2.7.1.dev20250724", "<2"),
    _r("0.9.2rc1", "0.9.2", _PY39, "8.1.RC1", "2.5.1", "2.5.1.post1.dev20250619", "<2"),
    _r("0.9.1", "0.9.1", _PY39, "8.2.RC1", "2.5.1", "2.5.1.post1", "<2"),
    _r("0.9.1rc3", "0.9.1", _PY39, "8.2.RC1", "2.5.1", "2.5.1.post1", "<2"),
    _r("0.9.1rc2", "0.9.1", _PY39, "8.2.RC1", "2.5.1", "2.5.1.post1", "<2"),
    _r("0.9.1rc1", "0.9.1", _PY39, "8.1.RC1", "2.5.1", "2.5.1.post1.dev20250528", "<2"),
    _r("0.9.0rc2", "0.9.0", _PY39, "8.1.RC1", "2.5.1", "2.5.1", "<2"),
    _r("0.9.0rc1", "0.9.0", _PY39, "8.1.RC1", "2.5.1", "2.5.1", "<2"),
    _r("0.8.5rc1", "0.8.5.post1", _PY39, "8.1.RC1", "2.5.1", "2.5.1", "<2"),
    _r("0.8.4rc2", "0.8.4", _PY39, "8.0.0", "2.5.1", "2.5.1", "<2"),
    _r("0.7.3.post1", "0.7.3", _PY39, "8.1.RC1", "2.5.1", "2.5.1", "<2"),
    _r("0.7.3", "0.7.3", _PY39, "8.1.RC1", "2.5.1", "2.5.1", "<2"),
)

#: Huawei's pip index for torch_npu builds PyPI lacks (the release notes' "pypi mirror"; the installation pages
#: add it as an extra index "for torch-npu dev version")
HUAWEI_INDEX = "https://mirrors.huaweicloud.com/ascend/repos/pypi"
#: torch_npu builds of the matrix that PyPI does not carry: an extra index, or a wheel URL with ``{py}`` (cp311)
#: and ``{arch}`` (x86_64 / aarch64) to fill in (release notes of v0.11.0rc3, v0.11.0, v0.13.0rc2, v0.18.0)
TORCH_NPU_OFF_PYPI: dict[str, str] = {
    "2.9.0.post1+git4c901a4": "https://vllm-ascend.obs.cn-north-4.myhuaweicloud.com/vllm-ascend/"
                              "torch_npu-2.9.0.post1%2Bgit4c901a4-{py}-{py}-manylinux_2_28_{arch}.whl",
    "2.8.0.post1": HUAWEI_INDEX, "2.7.1.post1": HUAWEI_INDEX, "2.7.1.dev20250724": HUAWEI_INDEX,
    "2.5.1.post1.dev20250619": HUAWEI_INDEX, "2.5.1.post1.dev20250528": HUAWEI_INDEX,
}
