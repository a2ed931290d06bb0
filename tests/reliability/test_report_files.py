"""Report files are written atomically and never through a name another user can plant."""
import json
import os
import stat

import pytest

from ascend_shim.report import Report


@pytest.fixture
def root_process(monkeypatch):
    """The report goes to the path itself (no rank or pid in its name)."""
    for var in ("RANK", "ASCEND_SHIM_ROOT_PID"):
        monkeypatch.delenv(var, raising=False)


def _report() -> Report:
    rep = Report()
    rep.backend = "sim"
    rep.note("written for a test")
    return rep


def test_a_symlink_planted_at_the_old_temporary_name_is_not_followed(tmp_path, root_process):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    target = tmp_path / "report.json"
    planted = tmp_path / f"report.json.{os.getpid()}.tmp"  # the name writes used to go through
    planted.symlink_to(victim)

    written = _report().write_json(str(target))

    assert victim.read_text() == "precious\n"
    assert written == target and not target.is_symlink() and target.is_file()
    assert json.loads(target.read_text())["notes"] == ["written for a test"]
    assert planted.is_symlink()  # left alone, not used


def test_a_symlink_at_the_report_path_is_replaced_not_followed(tmp_path, root_process):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    target = tmp_path / "report.json"
    target.symlink_to(victim)

    _report().write_json(str(target))

    assert victim.read_text() == "precious\n"
    assert not target.is_symlink() and json.loads(target.read_text())["schema"] == "ascend_shim.report/1"


def test_the_report_is_0o644_or_stricter_and_no_temporary_file_is_left(tmp_path, root_process):
    old = os.umask(0o002)  # a permissive umask must not make the report group-writable
    try:
        target = _report().write_json(str(tmp_path / "r.json"))
    finally:
        os.umask(old)
    mode = stat.S_IMODE(os.stat(target).st_mode)
    assert mode & ~0o644 == 0, oct(mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_failed_write_leaves_no_temporary_file(tmp_path, root_process):
    target = tmp_path / "r.json"
    target.mkdir()  # the final rename fails
    (target / "keep").write_text("")
    with pytest.raises(OSError):
        _report().write_json(str(target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    assert [p.name for p in target.iterdir()] == ["keep"]


def test_rewriting_replaces_the_whole_file(tmp_path, root_process):
    target = tmp_path / "r.json"
    target.write_text("x" * 100_000)
    _report().write_json(str(target))
    assert json.loads(target.read_text())["process"]["backend"] == "sim"
