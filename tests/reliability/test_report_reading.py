"""``report FILE...`` reads only regular files of bounded size, as ``scan`` does, and every input it cannot use
is one line naming the file and what is wrong (exit 2): a FIFO never blocks it, ``/dev/zero`` never fills the
memory, a deeply nested or absurd JSON never gives a traceback."""
import json
import os
import resource
import subprocess
import sys

import pytest

from .test_scan_report_inputs import _report_cli, _valid
from tests.subprocess_env import shim_free_env


def _one_line(rc: int, out: str, err: str, *needles: str) -> None:
    assert rc == 2 and out == "", (rc, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def _limited_memory():
    """The child may not take more than 1 GiB: a reader that does not stop fails there, not on the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _report_process(*files, timeout=60) -> subprocess.CompletedProcess:
    env = shim_free_env()
    try:
        return subprocess.run([sys.executable, "-m", "ascend_shim", "report", *map(str, files)], env=env,
                              capture_output=True, text=True, timeout=timeout, preexec_fn=_limited_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"report {' '.join(map(str, files))} did not return in {timeout} s")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)  # nobody ever writes to it: opening it for reading would wait forever
    proc = _report_process(fifo)
    _one_line(proc.returncode, proc.stdout, proc.stderr, str(fifo), "a FIFO, not a regular file")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_an_endless_device_is_refused_without_reading_it():
    proc = _report_process("/dev/zero")
    _one_line(proc.returncode, proc.stdout, proc.stderr, "/dev/zero", "a character device, not a regular file")


def test_a_directory_is_one_line(tmp_path, capsys):
    _one_line(*_report_cli(capsys, tmp_path), str(tmp_path), "a directory, not a regular file")


def test_a_file_over_the_size_bound_is_refused_unread(tmp_path, capsys):
    from ascend_shim.report import MAX_REPORT_BYTES as bound

    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(bound + 1)  # sparse: costs no disk
    _one_line(*_report_cli(capsys, big), str(big), f"more than the {bound} bytes")


@pytest.mark.parametrize("depth", [100_000, 5_000])
def test_deeply_nested_json_is_one_line(tmp_path, capsys, depth):
    """json.loads raised RecursionError."""
    path = tmp_path / "deep.json"
    path.write_text('{"schema": ' + "[" * depth + "]" * depth + "}")
    _one_line(*_report_cli(capsys, path), str(path), "nested")


def test_a_report_nested_deeper_than_any_report_is_one_line(tmp_path, capsys):
    """A few hundred levels load, but no report is that deep: refused before anything prints or re-encodes it."""
    rep = _valid()
    rep["patch_sets"]["deep"] = {"status": "active", "reason": "", "versions": json.loads("[" * 600 + "]" * 600)}
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(rep))
    _one_line(*_report_cli(capsys, path), str(path), "nested")
    _one_line(*_report_cli(capsys, "--json", path), str(path), "nested")


def test_an_integer_too_long_to_convert_is_one_line(tmp_path, capsys):
    """Python refuses to convert an integer of more than 4300 digits (ValueError, not a JSON error)."""
    rep = _valid()
    rep["events"][0]["line"] = 0
    path = tmp_path / "long.json"
    path.write_text(json.dumps(rep).replace('"line": 0', '"line": ' + "9" * 5000))
    _one_line(*_report_cli(capsys, path), str(path), "is not JSON")


def test_every_bad_file_is_one_line_and_a_good_one_does_not_hide_them(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_valid()))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    rc, out, err = _report_cli(capsys, good, tmp_path / "absent.json", bad)
    assert rc == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 2 and "absent.json" in lines[0] and str(bad) in lines[1], err


def test_a_valid_report_still_prints(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_valid()))
    rc, out, err = _report_cli(capsys, path)
    assert rc == 0 and err == "" and "translated CUDA calls: 1 sites, 1 calls" in out
