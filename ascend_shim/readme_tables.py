"""Regenerate the generated tables of README.md: ``python -m ascend_shim.readme_tables [--check]``.

The environment-variable table comes from ``config.ENV_VARS``, the coverage table from the built-in patch
declarations; a test fails when the README drifts from them.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from .config import Config
from .listing import collect, coverage_table, env_table

README = Path(__file__).resolve().parent.parent / "README.md"
SECTIONS = {"env-table": env_table, "coverage": lambda: coverage_table(collect(Config()))}


def render(text: str) -> str:
    for name, make in SECTIONS.items():
        pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.S)
        text = pattern.sub(lambda m: m.group(1) + make() + m.group(2), text)
    return text


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    current = README.read_text()
    wanted = render(current)
    if "--check" in argv:
        return 0 if current == wanted else 1
    README.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
