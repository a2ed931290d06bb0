"""``pip install ascend-shim[sim]`` gives a clean first run: torch's wheels do not require numpy, and without it
every ``import torch`` opens with "Failed to initialize NumPy"."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")
REPO = Path(__file__).resolve().parents[2]


def test_without_numpy_torch_opens_with_a_warning(tmp_path):
    """Why the extra needs it (a numpy that is not there: the state of a fresh venv with torch only)."""
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'numpy'\", "
                                                    "name='numpy')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_SHIM")}
    env["PYTHONPATH"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1)"], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0 and "Failed to initialize NumPy" in proc.stderr, proc.stderr


def test_the_sim_extra_installs_numpy():
    from packaging.requirements import Requirement

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "numpy" in {Requirement(r).name for r in extras["sim"]}
