"""`planner run --resume` after the controller was SIGKILLed mid-launch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.cli import main
from runtime.accounting.ledger import Ledger
from runtime.control.events import read_events
from runtime.training.store import CheckpointStore
from tests.run.helpers import (
    REPO,
    digits_entrypoint,
    processes_of,
    wait_for,
    write_catalog,
    write_job,
)

pytestmark = pytest.mark.ddp

STEPS = 1000


def test_resume_after_sigkill_finishes_without_double_billing(tmp_path: Path) -> None:
    catalog = write_catalog(tmp_path / "catalog.csv")
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(STEPS), steps=STEPS, nproc=1)
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "planner.cli", "run", str(job), "--catalog", str(catalog), "--run-dir",
               str(run_dir), "--time-scale", "30"]
    with (tmp_path / "controller.log").open("wb") as log:
        controller = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    store = CheckpointStore(str(run_dir / "ckpt"))
    try:
        wait_for(lambda: any(e["event"] == "training" for e in read_events(run_dir / "events.jsonl")), 90,
                  "training started", controller)
        wait_for(lambda: (store.latest_step() or 0) > 0, 30, "a checkpoint", controller)
        os.kill(controller.pid, signal.SIGKILL)  # the controller alone: its nodes keep running, and billing
        controller.wait(10)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait(10)
    orphans = processes_of(str(run_dir))
    assert orphans, "the node should have outlived its controller"
    time.sleep(1.0)  # the node is still up (and billed) while nobody watches it

    rc = main(["run", "--resume", str(run_dir)])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert rc == 0, summary
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    events = read_events(run_dir / "events.jsonl")
    recovered = [e for e in events if e["event"] == "recovered"]
    assert len(recovered) == 1 and recovered[0]["stale_nodes"] == ["l-1-n0"]
    assert [e["event"] for e in events].count("run_resumed") == 1
    assert summary["launches"][0]["outcome"] == "interrupted"
    assert summary["launches"][-1]["outcome"] == "completed"

    with Ledger(run_dir) as ledger:
        intervals = sorted(ledger.intervals(), key=lambda iv: iv.start)
        assert not ledger.open_intervals()
        assert [str(iv.key) for iv in intervals] == [f"l-{i}/l-{i}-n0/0" for i in range(1, len(intervals) + 1)]
        for earlier, later in zip(intervals, intervals[1:], strict=False):
            assert earlier.end <= later.start, "two launches billed for the same time"
        assert intervals[0].close_reason == "controller restart"
        killed_at = intervals[0].billed_until
        assert intervals[0].end >= killed_at  # billed through the time nobody was watching
        total = ledger.total_usd()
    up = {e["node"]: e for e in events if e["event"] == "node_up"}
    down = {e["node"]: e for e in events if e["event"] == "node_down"}
    assert sorted(up) == sorted(down) == [iv.key.node for iv in intervals]
    assert [e["event"] for e in events].count("node_down") == len(intervals)
    billed = sum((down[n]["t"] - up[n]["t"]) * up[n]["hourly_usd"] / 3600 for n in up)
    assert summary["cost_usd"] == pytest.approx(billed, rel=1e-9) == total
    assert all(pid not in processes_of(str(run_dir)) for pid in orphans)
    assert processes_of(str(run_dir)) == []


def test_resume_refuses_a_finished_or_missing_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--resume", str(tmp_path / "nowhere")]) == 2
    assert "no run state here" in capsys.readouterr().err
