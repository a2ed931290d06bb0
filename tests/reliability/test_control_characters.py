"""Text that comes from files or reports (file names, snippets, reasons, notes) is printed with its control
characters escaped: a hostile repository or report cannot clear, rewrite or retitle what the terminal shows.
JSON output is left to json, which escapes them itself."""
import csv
import io
import json
import os
import subprocess
import sys

import pytest

from ascend_shim import cli
from ascend_shim.report import Report, format_summary

from tests.subprocess_env import shim_free_env

#: what a hostile name carries: erase the line and go back to its start, a window title, a bidi override, a newline
HOSTILE = "\x1b[2K\x1b[1G\x1b]0;owned\x07\u202e\r\nfake"
RAW = ("\x1b", "\x07", "\r", "\u202e")


def _assert_clean(text: str) -> None:
    for ch in RAW:
        assert ch not in text, repr(text)


def _scan(repo, *args) -> subprocess.CompletedProcess:
    env = shim_free_env()
    return subprocess.run([sys.executable, "-m", "ascend_shim", "scan", *args, str(repo)], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def hostile_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / f"train{HOSTILE}.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    (repo / f"broken{HOSTILE}.py").write_text("def f(:\n")
    if hasattr(os, "mkfifo"):
        os.mkfifo(repo / f"pipe{HOSTILE}.py")
    return repo


def test_scan_text_escapes_file_names(hostile_repo):
    proc = _scan(hostile_repo)
    assert proc.returncode in (0, 1), proc.stderr
    _assert_clean(proc.stdout)
    assert "train\\x1b[2K\\x1b[1G\\x1b]0;owned\\x07\\u202e\\x0d\\x0afake.py:2:1" in proc.stdout, proc.stdout
    assert "could not parse broken\\x1b[2K" in proc.stdout
    if hasattr(os, "mkfifo"):
        assert "skipped pipe\\x1b[2K" in proc.stdout
    # no line of the output was forged by the newline in a name
    assert not any(line.startswith("fake") for line in proc.stdout.splitlines()), proc.stdout


def test_scan_csv_escapes_file_names_and_its_stderr_lines(hostile_repo):
    proc = _scan(hostile_repo, "--csv")
    assert proc.returncode in (0, 1), proc.stderr
    _assert_clean(proc.stdout)
    _assert_clean(proc.stderr)
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [r["path"] for r in rows] == ["train\\x1b[2K\\x1b[1G\\x1b]0;owned\\x07\\u202e\\x0d\\x0afake.py"]
    assert "could not parse broken\\x1b[2K" in proc.stderr


def test_scan_json_keeps_the_real_names(hostile_repo):
    proc = _scan(hostile_repo, "--json")
    _assert_clean(proc.stdout)  # json escapes them itself
    data = json.loads(proc.stdout)
    assert [f["path"] for f in data["findings"]] == [f"train{HOSTILE}.py"]


def _hostile_report() -> dict:
    rep = Report()
    rep.backend = "sim" + HOSTILE
    rep.event("translated", "torch.cuda.synchronize()" + HOSTILE, "torch.npu.synchronize()" + HOSTILE,
              site=(f"/tmp/train{HOSTILE}.py", 3))
    rep.note("a note" + HOSTILE)
    rep.record_set("set" + HOSTILE, "skipped", "because" + HOSTILE)
    data = rep.to_dict()
    data["patches"]["patch" + HOSTILE] = {"set": "s", "target": "t", "status": "failed", "reason": "why" + HOSTILE,
                                          "aliases": []}
    return data


def test_the_exit_summary_escapes_what_it_prints():
    text = format_summary(_hostile_report(), json_path=f"r{HOSTILE}.json")
    _assert_clean(text)
    assert "train\\x1b[2K" in text and "a note\\x1b[2K" in text and "because\\x1b[2K" in text
    assert "why\\x1b[2K" in text and "backend sim\\x1b[2K" in text
    assert not any(line.startswith("fake") for line in text.splitlines()), text


def test_report_pretty_print_escapes_what_it_prints(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_hostile_report()))
    assert cli.main(["report", str(path)]) == 0
    out, err = capsys.readouterr()
    _assert_clean(out)
    assert "torch.cuda.synchronize()\\x1b[2K" in out and "-> torch.npu.synchronize()\\x1b[2K" in out


def test_report_errors_escape_the_file_name(tmp_path, capsys):
    path = tmp_path / f"bad{HOSTILE}.json"
    path.write_text("{not json")
    assert cli.main(["report", str(path)]) == 2
    out, err = capsys.readouterr()
    _assert_clean(err)
    assert err.count("\n") == 1 and "bad\\x1b[2K" in err
