"""``scan`` reads regular files only; ``report`` checks its input and fails in one line; no category is lost."""
import json
import os
import subprocess
import sys

import pytest

from ascend_shim import cli
from ascend_shim.report import Report

SCHEMA = "ascend_shim.report/1"


# -- scan ---------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_scan_skips_a_fifo_named_like_a_module_and_says_so(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text("import torch\nx = torch.randn(2).cuda()\n")
    os.mkfifo(repo / "x.py")  # nobody ever writes to it: opening it for reading would wait forever
    try:
        proc = subprocess.run([sys.executable, "-m", "ascend_shim", "scan", "--json", str(repo)],
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("scan hung on a FIFO named x.py")
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    assert data["files_scanned"] == 1
    assert data["skipped"] == [{"path": "x.py", "reason": "a FIFO, not a regular file"}]
    assert any(f["path"] == "train.py" for f in data["findings"])

    text = subprocess.run([sys.executable, "-m", "ascend_shim", "scan", str(repo)], capture_output=True,
                          text=True, timeout=60)
    assert "skipped x.py: a FIFO, not a regular file" in text.stdout
    assert "1 skipped (not regular files)" in text.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_scan_of_a_fifo_given_by_name_skips_it(tmp_path):
    from ascend_shim.scan import scan_paths

    os.mkfifo(tmp_path / "alone.py")
    result = scan_paths([str(tmp_path / "alone.py")], patch_sets=[])
    assert result.files_scanned == 0 and result.findings == []
    assert result.skipped == [("alone.py", "a FIFO, not a regular file")]


# -- report -------------------------------------------------------------------------------------------------
def _report_cli(capsys, *args) -> tuple[int, str, str]:
    rc = cli.main(["report", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def _valid() -> dict:
    rep = Report()
    rep.backend = "sim"
    rep.translated("torch.cuda.synchronize()", "torch.npu.synchronize()")
    return rep.to_dict()


@pytest.mark.parametrize("content, says", [
    (b"[]", "the top level is a list, not an object"),
    (b"null", "the top level is null, not an object"),
    (b"{}", "missing key 'schema'"),
    (b'"a string"', "the top level is a string, not an object"),
    (b'{"schema": "something/else"}', "schema is 'something/else'"),
    (b"\xff\xfe{not utf8", "is not UTF-8 text"),
    (b"{not json", "is not JSON"),
])
def test_report_rejects_what_is_not_a_report_in_one_line(tmp_path, capsys, content, says):
    path = tmp_path / "r.json"
    path.write_bytes(content)
    rc, out, err = _report_cli(capsys, path)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and says in err and str(path) in err, err


@pytest.mark.parametrize("damage, says", [
    (lambda r: r.pop("events"), "missing key 'events'"),
    (lambda r: r.pop("process"), "missing key 'process'"),
    (lambda r: r.update(events={}), "events is an object, not a list"),
    (lambda r: r.update(patches=[]), "patches is a list, not an object"),
    (lambda r: r["events"][0].update(line="12"), "events[0].line is a string, not an integer"),
    (lambda r: r["events"][0].update(count=None), "events[0].count is null, not an integer"),
    (lambda r: r["events"][0].pop("api"), "events[0] has no 'api'"),
    (lambda r: r["events"].append(3), "events[1] is a number, not an object"),
    (lambda r: r["patch_sets"].update(x={"reason": "r"}), "patch_sets['x'] has no 'status'"),
    (lambda r: r["patches"].update(y={"status": 1}), "patches['y'].status is a number, not a string"),
    (lambda r: r["process"].update(rank="0"), "process.rank is a string, not an integer or null"),
    (lambda r: r.update(notes="n"), "notes is not a list of strings"),
])
def test_report_rejects_wrong_types_and_missing_keys_in_one_line(tmp_path, capsys, damage, says):
    rep = _valid()
    damage(rep)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rep))
    rc, out, err = _report_cli(capsys, path)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and says in err, err


def test_a_missing_file_is_one_line(tmp_path, capsys):
    rc, out, err = _report_cli(capsys, tmp_path / "absent.json")
    assert rc == 2 and err.count("\n") == 1 and "absent.json" in err


def test_unknown_event_categories_are_kept_and_shown(tmp_path, capsys):
    first, second = _valid(), _valid()
    event = {"category": "quantized", "api": "torch.cuda.fp8_thing()", "detail": "int8 path", "file": "t.py",
             "line": 3, "count": 2}
    first["events"].append(dict(event))
    second["events"].append(dict(event))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(first))
    b.write_text(json.dumps(second))

    rc, out, err = _report_cli(capsys, a)
    assert rc == 0, err
    assert "quantized events" in out and "torch.cuda.fp8_thing() -> int8 path  x2" in out

    rc, out, err = _report_cli(capsys, "--json", a, b)
    assert rc == 0, err
    merged = json.loads(out)
    [kept] = [e for e in merged["events"] if e["category"] == "quantized"]
    assert kept["count"] == 4
    assert merged["schema"] == SCHEMA and len(merged["processes"]) == 2

    merged_file = tmp_path / "merged.json"
    merged_file.write_text(out)
    rc, out, err = _report_cli(capsys, merged_file)  # a merged report reads back
    assert rc == 0 and "2 processes merged" in out and "quantized events" in out, err


def test_a_valid_report_still_prints(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_valid()))
    rc, out, err = _report_cli(capsys, path)
    assert rc == 0 and "translated CUDA calls: 1 sites, 1 calls" in out, err
