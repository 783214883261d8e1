"""`planner status`/`report` on a real `planner run` (local provider, digits example, one preemption).

The view is read over and over while the controller writes the run directory, then
compared with the ledger and summary.json the controller left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.cli import main
from runtime.accounting.ledger import Ledger
from runtime.reports.run_report import render_png, usd
from runtime.reports.run_view import load_run
from tests.run.helpers import REPO, digits_entrypoint, write_catalog, write_job

pytestmark = pytest.mark.ddp

STEPS = 150


def test_status_while_running_and_report_after(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    catalog = write_catalog(tmp_path / "catalog.csv")
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(STEPS), steps=STEPS, nproc=1)
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "planner.cli", "run", str(job), "--catalog", str(catalog), "--run-dir",
               str(run_dir), "--time-scale", "30", "--cooldown", "120", "--chaos", "at=0s"]
    seen: list[tuple[str, float]] = []
    with (tmp_path / "controller.log").open("wb") as log:
        controller = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while controller.poll() is None and time.monotonic() < deadline:
            if (run_dir / "state.json").exists():
                view = load_run(run_dir)  # must never fail on a directory being written
                seen.append((view.status, view.spent_usd))
            time.sleep(0.5)
        assert controller.wait(10) == 0, (tmp_path / "controller.log").read_text()[-3000:]
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait(10)
    running = [spent for status, spent in seen if status == "running"]
    assert len(running) >= 3, seen
    assert running == sorted(running), "spend read mid-run never goes backwards"

    summary = json.loads((run_dir / "summary.json").read_text())
    view = load_run(run_dir)
    with Ledger(run_dir) as ledger:
        total, by_pool, by_launch = ledger.total_usd(), ledger.by_pool(), ledger.by_launch()
    assert not (run_dir / "ledger.sqlite-wal").exists()
    assert view.spent_usd == total == summary["cost_usd"] > 0
    assert list(view.by_pool) == by_pool
    assert {s.launch_id: s.cost_usd for s in view.segments} == by_launch
    assert [s.launch_id for s in view.segments] == [launch["launch_id"] for launch in summary["launches"]]
    assert (view.status, view.steps, view.work_done) == ("completed", STEPS, float(STEPS))
    assert view.preemptions == summary["preemptions"] == 1 and view.replans == summary["replans"] >= 1
    kinds = [e.kind for e in view.timeline]
    assert kinds.count("launch") == len(summary["launches"]) == 2
    assert kinds.index("preemption") < kinds.index("replan") < len(kinds) - 1 and kinds[-1] == "run_end"
    assert view.timeline[-1].spent_usd == pytest.approx(total, rel=1e-9)
    assert render_png(view) is not None

    before = sorted(p.name for p in run_dir.iterdir())
    page = tmp_path / "report.html"
    assert main(["report", str(run_dir), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "preempted at step" in out and usd(total) in out
    assert "data:image/png;base64," in page.read_text()
    assert sorted(p.name for p in run_dir.iterdir()) == before
