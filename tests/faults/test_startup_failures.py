"""A worker that dies on start-up the same way twice is not retried again: the run stops with its error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from planner.cli import main
from runtime.control.events import read_events
from tests.run.helpers import write_catalog, write_job

pytestmark = [pytest.mark.ddp, pytest.mark.faults]


def test_the_same_import_error_twice_stops_the_run_with_it(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import danlu_no_such_module_for_this_test  # noqa: F401\n")
    job = write_job(tmp_path / "job.toml", entrypoint=[sys.executable, str(script)], steps=10, nproc=1,
                    max_restarts=3)
    run_dir = tmp_path / "run"
    rc = main(["run", str(job), "--catalog", str(write_catalog(tmp_path / "catalog.csv")), "--run-dir", str(run_dir)])

    assert rc != 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "danlu_no_such_module_for_this_test" in summary["cause"] and "twice" in summary["cause"]
    launches = [e for e in read_events(run_dir / "events.jsonl") if e["event"] == "launch"]
    assert len(launches) == 2, "max_restarts = 3 would have launched 4 times"
