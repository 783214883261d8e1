"""A missing optional extra is one line naming the pip install, exit 2, and nothing left behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.run.helpers import REPO

pytestmark = pytest.mark.faults

# Importing a module set to None in sys.modules raises ImportError, as a missing package does.
HIDE_AND_RUN = "import sys; sys.modules[sys.argv[1]] = None; from planner.cli import main; sys.exit(main(sys.argv[2:]))"


@pytest.mark.parametrize("module", ["fsspec", "torch"])
def test_planner_run_without_the_train_extra_says_what_to_install(tmp_path: Path, module: str) -> None:
    job = tmp_path / "job.toml"
    job.write_text((REPO / "examples" / "digits-local.toml").read_text())
    done = subprocess.run([sys.executable, "-c", HIDE_AND_RUN, module, "run", str(job)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and module in lines[0] and "pip install 'danlu[train]'" in lines[0]
    assert not (tmp_path / "runs").exists(), "a refused run must not leave a run directory"
