"""The README is generated where it can be, and its test command is what CI runs."""
import os
import re

from ascend_shim import readme_tables

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_readme_tables_match_the_declarations():
    current = open(readme_tables.README).read()
    assert readme_tables.render(current) == current, \
        "README tables are stale: run `python -m ascend_shim.readme_tables`"


def test_ci_runs_the_readme_test_command():
    readme = open(os.path.join(ROOT, "README.md")).read()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    test_cmd = next(c for c in commands if "pytest" in c)
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    for part in test_cmd.split("&&"):
        assert part.strip() in ci, part
