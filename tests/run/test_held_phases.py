"""A run on held reserved capacity leaves it when the reservation ends, on the run's clock.

The job holds one g4dn.xlarge in us-east-1 ``until`` a day; the run starts 0.04 h before that
day begins (UTC), and its 300 steps take 0.1 h. The plan is the held node (free), so the
controller must stop it at a checkpoint when the reservation ends, and the re-plan, dated by
the run's clock rather than the machine's, must no longer offer it: spot on AWS finishes.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from runtime.control.held import HeldAllotment, Window
from runtime.control.run_state import load_state, save_state
from tests.run.fake_run import AWS_A, SCALE, billed, new_run, open_run, script

HELD = "aws:us-east-1:g4dn.xlarge"
UNTIL = dt.date(2031, 3, 10)  # any day: the run's manual clock starts just before it
ENDS = dt.datetime.combine(UNTIL, dt.time(), tzinfo=dt.UTC).timestamp()
LEAD_S = 0.04 * 3600


def held_table(until: dt.date) -> str:
    return f"""
[[purchase.held]]
cloud = "aws"
region = "us-east-1"
instance_type = "g4dn.xlarge"
count = 1
until = {until.isoformat()}
"""


def start(tmp_path: Path, until: dt.date = UNTIL, held: HeldAllotment | None = None):
    run_dir = new_run(tmp_path, restart_minutes=0.1, extra=held_table(until))
    state = load_state(run_dir)
    save_state(run_dir, state.model_copy(update={"origin": ENDS - LEAD_S}))
    return open_run(run_dir, script(), held=held)


def test_the_held_reservation_ends_at_a_checkpoint_and_spot_finishes_the_job(tmp_path: Path) -> None:
    run = start(tmp_path)
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    # The first plan already counts the 0.04 h the reservation has left on the run's clock (not
    # the whole day it started in), so it pays for the spot node that must finish the job.
    assert run.events("plan")[0]["expected_cost_usd"] > 0
    first, second = summary["launches"]
    assert first["pool_id"] == HELD and first["outcome"] == "phase_end"
    assert second["pool_id"] == AWS_A and second["start_step"] == first["end_step"] > 0
    # Planned, not a preemption: nothing lost, and the held pool is left for the rest of the run.
    assert summary["preemptions"] == 0 and summary["lost_steps"] == 0 and summary["replans"] == 1
    assert load_state(run.run_dir).left_out == {HELD: None}
    stop = run.events("checkpoint_request")[0]
    assert stop["action"] == "stop" and f"the held reservation ends on {UNTIL}" in stop["reason"]
    # Released when the reservation ended (a poll and a heartbeat later at most), not when the job did.
    down = next(e for e in run.events("node_down") if e["launch"] == "l-1")
    assert ENDS <= down["t"] <= ENDS + 5 * SCALE
    # The held node is free; the spot node is billed at its price.
    assert [e["hourly_usd"] for e in run.events("node_up")] == [0.0, 0.16]
    assert summary["cost_usd"] == pytest.approx(billed(run.events()), rel=1e-9)


def test_a_reservation_that_outlasts_the_run_carries_it_to_the_end(tmp_path: Path) -> None:
    run = start(tmp_path, until=UNTIL + dt.timedelta(days=1))
    summary = run.run()
    assert summary["status"] == "completed" and summary["cost_usd"] == 0.0
    assert [(launch["pool_id"], launch["outcome"]) for launch in summary["launches"]] == [(HELD, "completed")]
    assert not run.events("phase_end")


def test_a_queue_window_that_closes_under_the_launch_stops_it_at_a_checkpoint(tmp_path: Path) -> None:
    """The queue holds the node for its first 0.03 h only (its `until_slot`); the job's own `until` is
    a year away. Past the window the team no longer has the node, so the launch must not keep it."""
    origin = ENDS - LEAD_S
    opened = {}  # the queue's clock is the run's manual clock here, known once the run is opened
    window_h = 0.03
    allotment = HeldAllotment([Window(("aws", "us-east-1", "g4dn.xlarge"), 1, 0.0, window_h)],
                              hours=lambda: (opened["run"].clock.now() - origin) / 3600)
    run = opened["run"] = start(tmp_path, until=UNTIL + dt.timedelta(days=365), held=allotment)
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    first, second = summary["launches"]
    assert first["pool_id"] == HELD and first["outcome"] == "phase_end"
    assert second["pool_id"] == AWS_A and second["start_step"] == first["end_step"] > 0
    assert summary["preemptions"] == 0 and summary["lost_steps"] == 0
    stop = run.events("checkpoint_request")[0]
    assert stop["action"] == "stop" and "the queue's reservation window closed" in stop["reason"]
    down = next(e for e in run.events("node_down") if e["launch"] == "l-1")
    assert origin + window_h * 3600 <= down["t"] <= origin + window_h * 3600 + 5 * SCALE
    # Not left out for the rest of the run (a later window may hold it again), but the re-plan saw
    # no free held node, and the allotment has the node back.
    assert HELD not in load_state(run.run_dir).left_out
    held_pool = run.controller.state.launches[0].pool
    assert allotment.free(held_pool) == 0 and not allotment.over(held_pool)
    assert summary["cost_usd"] > 0 and summary["cost_usd"] == pytest.approx(billed(run.events()), rel=1e-9)
