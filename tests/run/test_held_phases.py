"""A run on held reserved capacity leaves it when the reservation ends, on the run's clock.

The job holds one g4dn.xlarge in us-east-1 ``until`` a day; the run starts 0.04 h before that
day begins (UTC), and its 300 steps take 0.1 h. The plan is the held node (free), so the
controller must stop it at a checkpoint when the reservation ends, and the re-plan, dated by
the run's clock rather than the machine's, must no longer offer it: spot on AWS finishes.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pytest

from pricing.catalog import Offering
from pricing.pool import Pool
from runtime.control.held import HeldAllotment, Window
from runtime.control.replan import raised_rate
from runtime.control.run_state import load_state, save_state
from runtime.providers.fake import Reclaim
from tests.run.fake_run import AWS_A, SCALE, billed, new_run, open_run, phase, script
from tests.run.helpers import write_catalog

HELD = "aws:us-east-1:g4dn.xlarge"
UNTIL = dt.date(2031, 3, 10)  # any day: the run's manual clock starts just before it
ENDS = dt.datetime.combine(UNTIL, dt.time(), tzinfo=dt.UTC).timestamp()
LEAD_S = 0.04 * 3600


def held_table(until: dt.date | dt.datetime, block: str = "") -> str:
    return f"""
[[purchase.held]]
cloud = "aws"
region = "us-east-1"
instance_type = "g4dn.xlarge"
count = 1
until = {until.isoformat()}
{block}
"""


def start(tmp_path: Path, until: dt.date | dt.datetime = UNTIL, held: HeldAllotment | None = None, block: str = "",
          leave_at: float = ENDS):
    run_dir = new_run(tmp_path, restart_minutes=0.1, extra=held_table(until, block))
    state = load_state(run_dir)
    save_state(run_dir, state.model_copy(update={"origin": leave_at - LEAD_S}))
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


def test_a_capacity_block_is_left_forty_minutes_before_its_end_when_aws_warns_of_its_termination(
        tmp_path: Path) -> None:
    """AWS terminates a Capacity Block's instances from 30 minutes before its end and warns 10
    minutes before that: the plan counts the block's hours up to the warning and the run stops there
    at a checkpoint, not at the end, when its node would long be gone with the work since its last save."""
    end = dt.datetime(2031, 3, 10, 11, 30, tzinfo=dt.UTC)
    leave = end.timestamp() - 40 * 60
    run = start(tmp_path, until=end, block='reservation_id = "cr-0123456789abcdef0"\ncapacity_block = true',
                leave_at=leave)
    # The provider is given the reservation its launches on the held pool target.
    assert [(h.reservation_id, h.capacity_block) for h in run.provider.context.held] == [("cr-0123456789abcdef0", True)]
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    first, second = summary["launches"]
    # The pool is the block's own: another reservation of the type would be another pool.
    assert first["pool_id"] == f"{HELD}@cr-0123456789abcdef0"
    assert first["outcome"] == "phase_end" and summary["lost_steps"] == 0
    assert second["pool_id"] == AWS_A and second["start_step"] == first["end_step"] > 0
    stop = run.events("checkpoint_request")[0]
    assert "capacity block cr-0123456789abcdef0 ends at 2031-03-10 11:30 UTC" in stop["reason"]
    assert leave <= stop["t"] < leave + 5 * SCALE
    down = next(e for e in run.events("node_down") if e["launch"] == "l-1")
    assert leave <= down["t"] <= leave + 5 * SCALE


def test_a_reservation_that_starts_while_the_job_trains_on_spot_takes_it_over_at_a_checkpoint(
        tmp_path: Path) -> None:
    """A capacity block bought for a later date is in no plan made before it starts; when it starts,
    the re-plan moves the job onto it (free) at a checkpoint: planned, nothing lost, no cool-down."""
    origin = dt.datetime(2031, 3, 10, tzinfo=dt.UTC).timestamp()
    starts = dt.datetime(2031, 3, 10, 0, 1, 48, tzinfo=dt.UTC)  # 0.03 h into the 0.1 h job
    run = start(tmp_path, until=UNTIL + dt.timedelta(days=1), leave_at=origin + LEAD_S,
                block=f"starts = {starts.isoformat().replace('+00:00', 'Z')}")
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    first, second = summary["launches"]
    assert first["pool_id"] == AWS_A and first["outcome"] == "held_start"
    assert second["pool_id"] == HELD and second["start_step"] == first["end_step"] > 0
    assert summary["preemptions"] == 0 and summary["lost_steps"] == 0 and not load_state(run.run_dir).cooling
    (moved,) = run.events("held_start")
    assert moved["move_to"].endswith("reserved_held aws:us-east-1") and starts.timestamp() <= moved["t"]
    assert moved["t"] < starts.timestamp() + 5 * SCALE
    assert "held capacity started at 2031-03-10 00:01 UTC" in run.events("checkpoint_request")[0]["reason"]
    # Spot until the move, the held node free after it.
    assert [e["hourly_usd"] for e in run.events("node_up")] == [0.16, 0.0]
    assert summary["cost_usd"] == pytest.approx(billed(run.events()), rel=1e-9)
    # The terminal's lines: the move and a re-plan over every pool (not a policy's "spot").
    from rich.console import Console

    from planner.commands.run import _View

    console = Console(record=True, width=400)
    for record in run.events():
        _View(console).event(record)
    lines = console.export_text()
    assert f"held capacity started: {first['pool']} is left (held capacity started at" in lines
    assert "policy danlu: re-plan over every pool the job allows -- held capacity started: re-plan now" in lines


def test_two_reservations_of_one_type_each_end_the_launches_in_them(tmp_path: Path) -> None:
    """The plan puts the first launch in the reservation that ends first: the launch leaves it then, not
    when the other one of its instance type ends, and the run goes on in the other one, still free."""
    a, b = "cr-0aaaaaaaaaaaaaaaa", "cr-0bbbbbbbbbbbbbbbb"
    tables = (held_table(UNTIL, f'reservation_id = "{a}"')
              + held_table(UNTIL + dt.timedelta(days=1), f'reservation_id = "{b}"'))
    run_dir = new_run(tmp_path, restart_minutes=0.1, extra=tables,
                      plan=phase("reserved_held", hourly_usd=0.0, reservation=a))
    save_state(run_dir, load_state(run_dir).model_copy(update={"origin": ENDS - LEAD_S}))
    run = open_run(run_dir, script())
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    first, second = summary["launches"]
    assert (first["pool_id"], first["outcome"]) == (f"{HELD}@{a}", "phase_end")
    assert f"the held reservation ends on {UNTIL}" in run.events("checkpoint_request")[0]["reason"]
    assert ENDS <= next(e for e in run.events("node_down") if e["launch"] == "l-1")["t"] <= ENDS + 5 * SCALE
    assert second["pool_id"] == f"{HELD}@{b}" and second["start_step"] == first["end_step"] > 0
    assert summary["cost_usd"] == 0.0


def test_hours_on_a_held_node_are_not_exposure_of_the_spot_pool_with_the_same_id(tmp_path: Path) -> None:
    """Azure's spot pools have no zone, so a held (or on-demand) Azure pool's id is its spot pool's.
    The run holds an Azure T4 until the reservation ends, re-plans onto Azure spot and is preempted
    there: the raised interruption rate counts the spot launch's hours only, not the held node's."""
    azure = "azure:eastus:Standard_NC4as_T4_v3"
    run_dir = new_run(tmp_path, restart_minutes=0.1, extra=held_table(UNTIL).replace(
        '"aws"', '"azure"').replace('"us-east-1"', '"eastus"').replace('"g4dn.xlarge"', '"Standard_NC4as_T4_v3"'))
    write_catalog(tmp_path / "catalog.csv", rows=[("azure", "eastus", "", "Standard_NC4as_T4_v3", 0.60, 0.20)])
    save_state(run_dir, load_state(run_dir).model_copy(update={"origin": ENDS - LEAD_S}))
    run = open_run(run_dir, script(reclaims=(Reclaim("l-2", after_s=1.0, notice=True, lead_s=0.5),)))
    summary = run.run()
    assert summary["status"] == "completed"
    held_launch, spot_launch = summary["launches"][:2]
    assert (held_launch["pool_id"], held_launch["purchase"], held_launch["outcome"]) == (
        azure, "reserved_held", "phase_end")
    assert (spot_launch["pool_id"], spot_launch["purchase"], spot_launch["outcome"]) == (azure, "spot", "preempted")
    state = load_state(run.run_dir)
    held_hours, spot_hours = (launch.hours(launch.released_at) for launch in state.launches[:2])
    assert held_hours > 0.03  # the 0.04 h up to the reservation's end
    (preemption,) = run.events("preemption")
    assert preemption["interruption_rate"] == pytest.approx(
        raised_rate(0.5, preemptions=1, exposed_hours=spot_hours), abs=1e-4)
    assert (run.events("phase_end")[0]["hours"]) == pytest.approx(held_hours, abs=1e-4)


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


KEY = ("aws", "us-east-1", "g4dn.xlarge")


def queue_run(tmp_path: Path, on_sleep, **job) -> tuple[HeldAllotment, object]:
    """A run of a queue with one held node (no window end), its allotment, and ``on_sleep(run)`` called
    after every sleep of the run's clock (what the queue's other job does meanwhile)."""
    opened = {}
    allotment = HeldAllotment([Window(KEY, 1, 0.0)],
                              hours=lambda: (opened["run"].clock.now() - (ENDS - LEAD_S)) / 3600)
    run_dir = new_run(tmp_path, extra=held_table(UNTIL + dt.timedelta(days=365)), **{"restart_minutes": 0.1, **job})
    state = load_state(run_dir)
    save_state(run_dir, state.model_copy(update={"origin": ENDS - LEAD_S}))
    run = opened["run"] = open_run(run_dir, script(), held=allotment)
    clock = run.clock
    sleep = clock.sleep

    def sleep_then(seconds: float) -> None:
        sleep(seconds)
        on_sleep(run)
    clock.sleep = sleep_then
    return allotment, run


@pytest.mark.parametrize("waiter_hours, price_ratio, moves", [
    (1.0, None, True), (0.01, None, False), (1.0, 0.01, False), (0.01, 100.0, True)])
def test_a_queue_launch_moves_off_the_held_node_for_a_job_that_cannot_wait_for_it(
        tmp_path: Path, waiter_hours: float, price_ratio: float | None, moves: bool) -> None:
    """Job b of the queue waits for the node this run trains on, and its deadline leaves it no time
    to wait for this run to finish: the run whose move would cost less moves off at a checkpoint. With
    b's price (``price_ratio`` times this run's for an hour of the node's work elsewhere) that decides;
    without it, node-hours do."""
    arrived = []

    def b_arrives(run) -> None:
        launches = run.controller.state.launches
        if not arrived and launches and launches[0].training_at is not None:
            pool = launches[0].pool
            mine = run.controller.held_lease.usd_per_hour(pool, 1)
            assert mine is not None and mine > 0  # the cheapest on-demand the job may use, for this node's work
            allotment.wait("b", pool, 1, slack_h=0.0, hours=waiter_hours,
                           usd_per_hour=None if price_ratio is None else price_ratio * mine)
            arrived.append(run.clock.now())
    allotment, run = queue_run(tmp_path, b_arrives)
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300 and arrived
    held_pool = run.controller.state.launches[0].pool
    if not moves:  # b's move costs less than this run's remainder would elsewhere: it keeps the node
        assert [(launch["purchase"], launch["outcome"]) for launch in summary["launches"]] == [
            ("reserved_held", "completed")]
        assert not allotment.yield_pending(held_pool)
        return
    first, second = summary["launches"]
    assert first["purchase"] == "reserved_held" and first["outcome"] == "phase_end"
    assert second["pool_id"] == AWS_A and second["start_step"] == first["end_step"] > 0
    assert summary["preemptions"] == 0 and summary["lost_steps"] == 0
    stop = run.events("checkpoint_request")[0]
    assert stop["action"] == "stop" and "job 'b' of the queue waits for the held nodes" in stop["reason"]
    down = next(e for e in run.events("node_down") if e["launch"] == "l-1")
    assert down["t"] <= arrived[0] + 5 * SCALE  # a poll, a checkpoint and a heartbeat after b came
    # The re-plan left the node to b, the allotment has it back, and b is first in line for it.
    assert HELD not in load_state(run.run_dir).left_out
    assert not allotment.yield_pending(held_pool) and allotment.free(held_pool) == 1
    assert not allotment.try_take(held_pool, 1, "c") and allotment.try_take(held_pool, 1, "b")
    assert summary["cost_usd"] > 0 and summary["cost_usd"] == pytest.approx(billed(run.events()), rel=1e-9)


@pytest.mark.parametrize("told_to_move", [True, False])
def test_a_job_out_of_time_waits_for_a_holder_moving_off_and_no_other(tmp_path: Path, told_to_move: bool) -> None:
    """This run's plan is the held node job a holds. Its deadline leaves it a few minutes to wait;
    a gives the node back a minute after they are up. Told to move off (a is on its way to a
    checkpoint), a is worth waiting for, a minute being less than a restart elsewhere (5 minutes);
    otherwise this run re-plans once its slack is gone."""
    times = {}

    def a_holds(run) -> None:
        pool = Pool.held(t4, hours_left=1.0)
        if "latest" not in times:
            hours = run.controller.state.plan["expected_hours"]
            times["latest"] = run.controller.deadline_at - hours * 3600
            if told_to_move:
                assert allotment.must_yield("a", pool, 1, remaining_h=0.07, restart_h=0.0) == "digits-test"
        elif "back" not in times and run.clock.now() >= times["latest"] + 60:
            allotment.give_back(pool, 1, "a")
            times["back"] = run.clock.now()
    allotment, run = queue_run(tmp_path, a_holds, deadline_hours=0.15, restart_minutes=5.0)
    t4 = Offering("aws", "us-east-1", None, "g4dn.xlarge", "T4", 1, 16, 4, 16, 0.526, spot=0.16)
    assert allotment.try_take(Pool.held(t4, hours_left=1.0), 1, "a")
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    assert run.events("held_wait") and times["latest"] > run.controller.state.origin
    first, launched = summary["launches"][0], run.events("launch")[0]["t"]
    if told_to_move:
        assert first["purchase"] == "reserved_held" and times["latest"] + 60 <= times["back"] <= launched
    else:  # gone to on-demand a poll or two after its slack ran out, before a gave the node back
        assert first["purchase"] == "on_demand" and launched < times.get("back", math.inf)
        assert run.events("held_wait")[0]["t"] < times["latest"] <= run.events("plan")[1]["t"] < times["latest"] + 60
