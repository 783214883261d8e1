"""The hard budget cap: checkpoint and stop before the spend would pass budget_usd."""

from __future__ import annotations

import email
import json
from email import policy
from pathlib import Path

import pytest

from planner.cli import main
from runtime.control.events import read_events
from tests.run.helpers import digits_entrypoint, processes_of, write_catalog, write_job

pytestmark = pytest.mark.ddp

# The digits example does about 3.4 steps/h on a T4 at 30x; the job claims three times that, so the
# plan for 3000 steps, and the reserve the cap keeps for a stop, fit in the budget with little to spare.
STEPS, SPEED, BUDGET = 3000, 3.4, 0.045


def test_the_run_stops_after_a_checkpoint_before_overspending(tmp_path: Path, capsys) -> None:
    catalog = write_catalog(tmp_path / "catalog.csv")
    # The plan fits in the budget with the reserve for a stop and a release at $0.16/h and 30x -- 10 s
    # each, the shutdown timeout, until measured -- but the script is three times slower than the job
    # says: the controller must stop the run early, with a checkpoint, and still end under the cap.
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(STEPS), steps=STEPS, speed=3 * SPEED,
                    nproc=1, budget_usd=BUDGET)
    run_dir = tmp_path / "run"
    rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--time-scale", "30"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert rc == 1
    assert summary["status"] == "budget_cap", summary
    assert summary["cost_usd"] <= BUDGET
    events = read_events(run_dir / "events.jsonl")
    kinds = [e["event"] for e in events]
    assert "budget_cap" in kinds and kinds.index("budget_cap") < kinds.index("launch_end")
    cap = next(e for e in events if e["event"] == "budget_cap")
    assert cap["measured"] is False and cap["reserve_usd"] >= 0.16 * 2 * 10 * 30 / 3600  # nothing measured yet
    stop = next(e for e in events if e["event"] == "checkpoint_request")
    assert stop["action"] == "stop" and "budget" in stop["reason"]
    end = next(e for e in events if e["event"] == "launch_end")
    assert end["outcome"] == "preempted" and end["lost_steps"] == 0
    assert summary["final_checkpoint"] is not None  # the work done so far is kept
    ended_mail = email.message_from_bytes((run_dir / "outbox" / "run-ended.eml").read_bytes(), policy=policy.default)
    text = ended_mail.get_body(("plain",)).get_content()
    assert f"planner run --resume {run_dir} --budget-usd" in text, text  # the command that finishes it
    assert processes_of(str(run_dir)) == []

    # Resuming with a raised budget finishes the job from the cap's checkpoint.
    stopped_at = summary["steps"]
    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir)]) == 2  # the cap would stop it again at once
    assert f"`planner run --resume {run_dir} --budget-usd USD`" in capsys.readouterr().err
    assert main(["run", "--resume", str(run_dir), "--budget-usd", str(BUDGET / 2)]) == 2  # not larger: refused
    assert main(["run", "--resume", str(run_dir), "--budget-usd", "5"]) == 0
    final = json.loads((run_dir / "summary.json").read_text())
    assert final["status"] == "completed" and final["steps"] == STEPS
    assert final["cost_usd"] > summary["cost_usd"] and final["cost_usd"] <= 5
    resumed = [e for e in read_events(run_dir / "events.jsonl") if e["event"] == "launch"][-1]
    assert resumed["start_step"] == stopped_at > 0
    assert processes_of(str(run_dir)) == []
