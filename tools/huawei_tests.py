"""Huawei's own torch_npu tests as the emulated NPU's judge: run them over either torch_npu layer, count per file.

The tests live in Huawei's repository (Ascend/pytorch, ``test/``), which this project never ships: fetch it
(``git clone`` at the commit nearest the paired wheel), then

    python tools/huawei_tests.py PATH/TO/pytorch/test --layer real [--layer builtin] [--junit-dir DIR] [FILE ...]

Each file runs in its own ``python -m ascend_shim run --simulate --disable '*' -m pytest`` (the shim's patches
off: the emulator alone answers), with pytest-timeout per test and a limit per file. The default files are the
API-level ones the emulator claims (device, memory, streams, events, generators, amp, storage, serialization,
c10d, transfer_to_npu, accelerator, autocast). Prints ``file: ran / passed / failed`` per layer and the total;
exit 1 when a file could not run. ``expecttest`` must be installed (Huawei's testing package imports torch's).

On the builtin layer, the files that test Huawei's Python around the device rather than the device
(``NOT_CLAIMED_BY_BUILTIN``) are not run; the others import Huawei's test support (``torch_npu.testing`` and the
path helper it uses), which is test code, not the device's contract: it is lent from the prepared package
(``fetch-torch-npu``) for the run, and nothing else of Huawei's Python is.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

FILES = ["npu/test_device", "npu/test_generators", "npu/test_utilities", "npu/test_copy",
         "npu/test_empty_strided_npu", "npu/test_npu", "npu/test_torch_npu", "npu/test_amp", "npu/test_stream",
         "npu/test_multi_devices_single_process", "npu/test_c10d", "npu/test_storage", "npu/test_serialization",
         "test_torch_npu_init", "contrib/test_transfer_to_npu", "contrib/test_transfer_to_npu_env",
         "test_accelerator", "test_autocast", "distributed/test_device"]
#: files that test Huawei's Python around the device, which the builtin layer does not claim (docs/emulator.md):
#: not run on that layer
NOT_CLAIMED_BY_BUILTIN = {
    "npu/test_stream": "imports torch_npu._inductor, Huawei's inductor backend",
    "contrib/test_transfer_to_npu": "tests torch_npu.contrib.transfer_to_npu, Huawei's migration tool",
    "contrib/test_transfer_to_npu_env": "tests torch_npu.contrib.transfer_to_npu, Huawei's migration tool",
    "test_torch_npu_init": "checks the layout of Huawei's package (distributed, utils, _afd, _C submodules)",
}
REPO = Path(__file__).resolve().parents[1]
#: Huawei's test support, lent to the builtin layer: (package of the builtin facade, module or folder in it)
TEST_SUPPORT = [("torch_npu", "testing"), ("torch_npu.utils", "_path_manager.py")]
#: pytest's entry point with the test support lent first; a process started with the ``spawn`` method runs it
#: again as ``__mp_main__`` (the ``__main__`` block aside), so the ranks of a multiprocess test have it too
_RUNNER = """\
import importlib
import sys

for package, folder in {lent!r}:
    importlib.import_module(package).__path__.append(folder)

if __name__ == "__main__":
    import pytest

    sys.exit(pytest.main(sys.argv[1:]))
"""


def lend_test_support(into: Path) -> Path:
    """A pytest runner in ``into`` that makes Huawei's test support importable over the builtin facade."""
    sys.path.insert(0, str(REPO))
    from ascend_shim.sim.real_layer import find_prepared

    prepared = find_prepared()
    if prepared is None:
        sys.exit("the builtin layer runs Huawei's tests with Huawei's test support: run `python -m ascend_shim "
                 "fetch-torch-npu` first")
    lent = []
    for package, name in TEST_SUPPORT:
        folder = into / ("lent_" + package.replace(".", "_"))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).symlink_to(prepared / "site" / Path(*package.split(".")) / name)
        lent.append((package, str(folder)))
    runner = into / "huawei_test_runner.py"
    runner.write_text(_RUNNER.format(lent=lent))
    return runner


def run_file(test_dir: Path, name: str, layer: str, junit: Path, per_file_s: int,
             runner: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    env.update(ASCEND_SHIM_SIM_LAYER=layer, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO),
                                                                                    env.get("PYTHONPATH")])))
    pytest = [str(runner)] if runner else ["-m", "pytest"]
    cmd = [sys.executable, "-m", "ascend_shim", "run", "--simulate", "--disable", "*", *pytest, "-q",
           "-p", "no:cacheprovider", "--timeout", "120", f"--junitxml={junit}", f"{name}.py"]
    try:
        return subprocess.run(cmd, cwd=test_dir, env=env, capture_output=True, text=True, timeout=per_file_s)
    except subprocess.TimeoutExpired as exc:  # its output comes as bytes, text=True or not
        def text(out) -> str:
            return out.decode(errors="replace") if isinstance(out, bytes) else out or ""

        return subprocess.CompletedProcess(cmd, 124, text(exc.stdout), text(exc.stderr))


def counts(junit: Path) -> tuple[int, int] | None:
    """(tests that ran, tests that passed) from a JUnit file; None when the file never ran or did not import."""
    if not junit.is_file():
        return None
    root = ET.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return None
    if any(case.get("classname") == "" for case in suite.iter("testcase")):
        return None  # a collection error: the file did not import
    ran = int(suite.get("tests", 0)) - int(suite.get("skipped", 0))
    return ran, ran - int(suite.get("failures", 0)) - int(suite.get("errors", 0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test_dir", type=Path, help="the test/ folder of a checkout of Ascend/pytorch")
    parser.add_argument("files", nargs="*", default=FILES, help="test files, relative, without .py")
    parser.add_argument("--layer", action="append", choices=("real", "builtin"), help="default: real")
    parser.add_argument("--junit-dir", type=Path, help="keep the JUnit files and logs here")
    parser.add_argument("--per-file-s", type=int, default=900)
    ns = parser.parse_args(argv)
    out = ns.junit_dir or Path(tempfile.mkdtemp(prefix="huawei-tests-"))
    broken = 0
    for layer in ns.layer or ["real"]:
        total_ran = total_passed = 0
        runner = lend_test_support(out / "test-support") if layer == "builtin" else None
        for name in ns.files:
            if layer == "builtin" and name in NOT_CLAIMED_BY_BUILTIN:
                print(f"{layer:8s} {name:42s} not run: {NOT_CLAIMED_BY_BUILTIN[name]}")
                continue
            junit = out / layer / f"{name.replace('/', '_')}.xml"
            junit.parent.mkdir(parents=True, exist_ok=True)
            done = run_file(ns.test_dir, name, layer, junit, ns.per_file_s, runner)
            junit.with_suffix(".log").write_text(done.stdout + done.stderr)
            got = counts(junit)
            if got is None:
                broken += 1
                print(f"{layer:8s} {name:42s} did not import or run (exit {done.returncode}; "
                      f"log {junit.with_suffix('.log')})")
                continue
            ran, passed = got
            total_ran, total_passed = total_ran + ran, total_passed + passed
            late = " (timed out after its tests)" if done.returncode == 124 else ""
            print(f"{layer:8s} {name:42s} ran {ran:4d}  passed {passed:4d}  failed {ran - passed:3d}{late}")
        share = 100.0 * total_passed / total_ran if total_ran else 0.0
        print(f"{layer:8s} {'TOTAL':42s} ran {total_ran:4d}  passed {total_passed:4d}  ({share:.1f}%)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
