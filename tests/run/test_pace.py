"""A launch whose workers train slower than the job's table leaves at a checkpoint for a plan that meets
the deadline, when one does; otherwise, or when the deadline is far, it keeps going (fake provider)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.control.pace import MIN_STEPS
from tests.run.fake_run import billed, script, start_run

STEPS = 3000  # 0.98 h on one T4 by the table (0.85 steps/s); long enough for the measure to outweigh it


def _slow_run(tmp_path: Path, deadline_hours: float, pace: float = 0.25):
    return start_run(tmp_path, script(total_steps=STEPS, heartbeat_s=1.0, pace={"l-1": pace}), steps=STEPS,
                     max_nodes=2, deadline_hours=deadline_hours, budget_usd=20.0)


def test_a_launch_too_slow_for_the_deadline_moves_to_a_plan_that_meets_it(tmp_path: Path) -> None:
    # By the table one node meets 2.5 h; at a quarter of that pace it needs about 3.9 h.
    run = _slow_run(tmp_path, deadline_hours=2.5)
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == STEPS, summary
    first, second = summary["launches"][:2]
    assert first["nodes"] == 1 and first["outcome"] == "too_slow", first
    assert second["nodes"] == 2 and second["start_step"] == first["end_step"] > MIN_STEPS
    slow = run.events("too_slow")
    assert len(slow) == 1 and slow[0]["launch"] == "l-1" and slow[0]["move_to"].startswith("2x ")
    assert slow[0]["hours_needed"] > slow[0]["hours_left"]
    # Left at a checkpoint: nothing redone, no preemption counted, the move re-planned at once.
    assert summary["lost_steps"] == 0 and summary["preemptions"] == 0 and summary["replans"] >= 1
    decision = run.events("decision")[0]
    assert decision["target"] == "replan" and "too slow for the deadline" in decision["trigger"]
    assert not run.events("deadline_miss")
    end = run.events("run_end")[-1]
    assert end["t"] <= run.controller.deadline_at  # the deadline the first pool's pace would have missed
    assert summary["cost_usd"] == pytest.approx(billed(run.events()), rel=1e-9)


def test_a_slow_launch_that_still_meets_the_deadline_keeps_going(tmp_path: Path) -> None:
    run = _slow_run(tmp_path, deadline_hours=6.0)
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    assert [launch["outcome"] for launch in summary["launches"]] == ["completed"]
    assert not run.events("too_slow")


def test_a_slow_launch_with_nowhere_faster_to_go_keeps_going(tmp_path: Path) -> None:
    # One node allowed: no plan does better than the launch that runs, however late it will be.
    run = start_run(tmp_path, script(total_steps=STEPS, heartbeat_s=1.0, pace={"l-1": 0.25}), steps=STEPS,
                    max_nodes=1, allow=("on_demand",), deadline_hours=2.5, budget_usd=20.0)
    summary = run.run()
    assert summary["status"] == "completed"
    assert [launch["outcome"] for launch in summary["launches"]] == ["completed"]
    assert not run.events("too_slow")
