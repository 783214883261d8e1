"""The controller on the scripted fake provider and a manual clock (no torchrun, no waiting).

Each run is a 300-step job at 60x; the fake's workers write status.json and commit
checkpoints as the contract says, so everything the controller decides comes from the
same files and node states a real launch gives it.
"""

from __future__ import annotations

import email
import json
import re
from email import policy
from pathlib import Path

import pytest

from runtime.accounting.ledger import Ledger, LedgerError
from runtime.control.events import read_events
from runtime.control.reopen import raise_budget
from runtime.control.run_state import load_state, save_state
from runtime.providers.fake import FakeProvider, Reclaim
from runtime.training.store import CheckpointStore
from tests.run.fake_run import (
    AWS_A,
    GCP,
    SCALE,
    SPEED,
    TUNING,
    billed,
    new_run,
    open_run,
    phase,
    script,
    start_run,
)


def test_a_run_completes_on_the_planned_pool_billed_by_the_clock(tmp_path: Path) -> None:
    run = start_run(tmp_path, script())
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300 and summary["failures"] == 0
    assert [launch["pool_id"] for launch in summary["launches"]] == [AWS_A]
    assert CheckpointStore(load_state(run.run_dir).checkpoint_dir).latest_step() == 300
    # 300 steps at 51 steps/s after a 1 s start-up, on the manual clock: about 6.9 s real, 6.9 min simulated.
    up, down = run.events("node_up")[0], run.events("node_down")[0]
    assert (down["t"] - up["t"]) / SCALE == pytest.approx(1 + 300 / 51, abs=0.25)
    assert summary["cost_usd"] == pytest.approx(billed(run.events()), rel=1e-9)
    assert summary["cost_usd"] == pytest.approx(0.16 * (down["t"] - up["t"]) / 3600, rel=1e-6)
    assert run.provider.provisioned == [("l-1", load_state(run.run_dir).launches[0].pool, 1)]
    assert run.state_json()["status"] == "completed"


def test_a_notice_checkpoints_at_once_and_the_job_moves_to_another_pool(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(reclaims=(Reclaim("l-1", after_s=2.0, notice=True, lead_s=1.0),)))
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    first, second = summary["launches"]
    assert first["outcome"] == "preempted" and first["pool_id"] == AWS_A
    assert second["pool_id"] == GCP and second["start_step"] == first["end_step"] > 50  # not the interval one
    assert summary["preemptions"] == 1 and summary["replans"] == 1 and summary["lost_steps"] == 0
    stop = run.events("checkpoint_request")[0]
    assert stop["action"] == "stop" and "interruption notice for l-1-n0" in stop["reason"]
    assert run.events("preemption")[0]["pool"] == AWS_A
    assert AWS_A in load_state(run.run_dir).cooling


def test_a_reclaim_without_notice_loses_the_steps_since_the_last_checkpoint(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(reclaims=(Reclaim("l-1", after_s=2.5, notice=False),)))
    summary = run.run()
    assert summary["status"] == "completed"
    first = summary["launches"][0]
    assert first["outcome"] == "preempted" and "before the workers could checkpoint" in first["reason"]
    assert first["end_step"] == 100  # 2.5 s at 51 steps/s reached 127; the checkpoint every 50 steps kept 100
    assert summary["lost_steps"] == run.events("launch_end")[0]["lost_steps"] > 0
    assert run.events("checkpoint_request") == []


@pytest.mark.parametrize("every", [70, 50], ids=["final-save", "interval-save-on-the-last-step"])
def test_a_reclaim_after_the_final_checkpoint_committed_ends_the_run_completed(tmp_path: Path, every: int) -> None:
    run = start_run(tmp_path, script(reclaim_at_final=frozenset({"l-1"}), checkpoint_every=every))
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    assert [launch["outcome"] for launch in summary["launches"]] == ["preempted"]
    assert summary["replans"] == 0 and run.events("replan") == [] and len(run.events("launch")) == 1
    assert summary["final_checkpoint"].endswith("step-300")


def test_the_steps_lost_to_a_reclaim_never_count_past_the_jobs_last_step(tmp_path: Path) -> None:
    # Workers ten times slower than the table: the controller's estimate of where a launch
    # killed without a notice had got to (its time x the table's speed) overshoots the job.
    run = start_run(tmp_path, script(steps_per_s=SPEED * SCALE / 10,
                                     reclaims=(Reclaim("l-1", after_s=50.0, notice=False),)))
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    end = run.events("launch_end")[0]
    assert end["outcome"] == "preempted" and end["committed_step"] == 250
    assert end["reached_step"] <= 300 and 0 <= summary["lost_steps"] <= 300 - 250


def test_workers_that_hung_before_a_silent_reclaim_are_not_counted_as_training_on(tmp_path: Path) -> None:
    # The workers report their step every 0.5 s (the session does every 10 s), hang 1.2 s into
    # training at step 61 (the checkpoint at 50 kept), and the node goes without a notice at 10 s.
    # Counting the 10 s at the table's speed would say the launch reached the job's end (250 lost).
    run = start_run(tmp_path, script(heartbeat_s=0.5, stalls={"l-1": 1.2},
                                     reclaims=(Reclaim("l-1", after_s=10.0, notice=False),)))
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    end = run.events("launch_end")[0]
    assert end["outcome"] == "preempted" and end["committed_step"] == 50
    hung_at = int(1.2 * SPEED * SCALE)  # 61: the steps really lost are 11
    # The last report (1.0 s, step 51) plus at most a heartbeat and a step at the table's speed.
    assert hung_at <= end["reached_step"] <= 51 + int(0.5 * SPEED * SCALE) + 1
    assert summary["lost_steps"] == end["lost_steps"] == end["reached_step"] - 50


def test_the_last_heartbeat_places_a_silent_reclaim_to_within_a_heartbeat(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(heartbeat_s=0.5, reclaims=(Reclaim("l-1", after_s=2.5, notice=False),)))
    summary = run.run()
    assert summary["status"] == "completed"
    end = run.events("launch_end")[0]
    reached = int(2.5 * SPEED * SCALE)  # 127 when the node went
    assert abs(end["reached_step"] - reached) <= int(0.5 * SPEED * SCALE) + 1


def test_a_crash_is_retried_on_the_same_pool(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(exits={"l-1": 3}), max_restarts=1)
    summary = run.run()
    assert summary["status"] == "completed" and summary["failures"] == 1 and summary["replans"] == 0
    assert [launch["pool_id"] for launch in summary["launches"]] == [AWS_A, AWS_A]
    assert "workers exited (l-1-n0: 3)" in summary["launches"][0]["reason"]
    assert summary["launches"][1]["start_step"] == 50


def test_crashes_past_max_restarts_fail_the_run_with_the_cause(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(exits={"l-1": 3, "l-2": 3}), max_restarts=1)
    summary = run.run()
    assert summary["status"] == "failed" and summary["failures"] == 2
    assert "workers exited (l-2-n0: 3)" in summary["cause"] and "max_restarts" in summary["cause"]
    assert summary["cost_usd"] == pytest.approx(billed(run.events()), rel=1e-9)


def test_a_pool_without_capacity_cools_down_and_the_job_is_planned_elsewhere(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(no_capacity=frozenset({AWS_A})), max_restarts=1)
    summary = run.run()
    assert summary["status"] == "completed" and summary["failures"] == 1
    assert [launch["pool_id"] for launch in summary["launches"]] == [GCP]
    failed = run.events("provision_failed")[0]
    assert "InsufficientInstanceCapacity" in failed["reason"] and failed["pool"].endswith("aws:us-east-1/use1-az1")
    assert run.events("node_up")[0]["pool"] == GCP  # nothing was billed for the refused request


AWS_OD, GCP_OD = "aws:us-east-1:g4dn.xlarge", "gcp:us-central1:n1-standard-4-t4"
AZURE_T4 = "azure:eastus:Standard_NC4as_T4_v3"  # its spot pool has no zone: the same id


def test_an_on_demand_pool_without_capacity_is_left_out_and_the_job_planned_on_another_cloud(tmp_path: Path) -> None:
    # Before, the cool-down blocked (id, "spot") only: the re-plan chose the same on-demand pool until
    # max_restarts ran out, with GCP's and Azure's on-demand T4s there all along.
    run = start_run(tmp_path, script(no_capacity=frozenset({AWS_OD})), max_restarts=3, allow=("on_demand",))
    summary = run.run()
    assert summary["status"] == "completed" and summary["failures"] == 1
    assert [launch["pool_id"] for launch in summary["launches"]] == [GCP_OD]
    assert [e["pool"] for e in run.events("provision_failed")] == ["1x g4dn.xlarge on_demand aws:us-east-1"]
    state = load_state(run.run_dir)
    assert set(state.refused) == {"on_demand"} and set(state.refused["on_demand"]) == {AWS_OD}
    assert state.cooling == {}  # the spot pools of that type were never refused


def test_when_every_on_demand_pool_refuses_the_policy_s_choice_the_job_goes_on_spot(tmp_path: Path) -> None:
    # A preemption with the deadline close: the policy asks for on-demand, which no cloud has now.
    # Azure's spot pool has no zone, so its id is its on-demand pool's: the fake refuses both.
    run = start_run(tmp_path, script(no_capacity=frozenset({AWS_OD, GCP_OD, AZURE_T4}),
                                     reclaims=(Reclaim("l-1", after_s=2.0, notice=True, lead_s=1.0),)),
                    max_restarts=3, deadline_hours=0.25)
    summary = run.run()
    decisions = [e["target"] for e in run.events("decision")]
    assert decisions[0] == "on_demand"
    assert [e["pool"].split()[2] for e in run.events("provision_failed")] == ["on_demand"] * 3
    assert summary["status"] == "completed" and summary["failures"] == 3
    assert [(launch["pool_id"], launch["purchase"]) for launch in summary["launches"]] == [
        (AWS_A, "spot"), (GCP, "spot")]


@pytest.mark.parametrize(("restart_minutes", "limit_s"), [(1.0, 4), (6.0, 7)])
def test_a_hung_start_up_times_out_as_a_failure(tmp_path: Path, restart_minutes: float, limit_s: int) -> None:
    # The rendezvous timeout (1 s), then the longer of the 3 s grace and the quote's restart time, which
    # is simulated: 6 min at 60x is 6 s.
    from runtime.control.controller import Tuning

    run = start_run(tmp_path, script(hang=frozenset({"l-1"})), max_restarts=0, restart_minutes=restart_minutes,
                    tuning=Tuning(poll_s=0.1, rdzv_timeout_s=1, startup_grace_s=3))
    summary = run.run()
    assert summary["status"] == "failed" and f"did not start training within {limit_s}s" in summary["cause"]
    assert "raise [overheads] restart_minutes" in summary["cause"]
    up, down = run.events("node_up")[0], run.events("node_down")[0]
    assert (down["t"] - up["t"]) / SCALE == pytest.approx(limit_s, abs=0.2)


def test_the_budget_cap_stops_after_a_checkpoint_and_a_raised_budget_finishes(tmp_path: Path) -> None:
    # The workers are three times slower than the plan assumed: $0.035 runs out before the end.
    slow = script(steps_per_s=SPEED * SCALE / 3)
    run = start_run(tmp_path, slow, budget_usd=0.035)
    summary = run.run()
    assert summary["status"] == "budget_cap" and summary["cost_usd"] <= 0.035
    assert 0 < summary["steps"] < 300 and summary["final_checkpoint"] is not None
    assert run.events("launch_end")[0]["lost_steps"] == 0
    # The budget the email gives is taken: the run goes on from its checkpoint with the stop and release
    # this run measured (kept in its state), not the unmeasured bound, so the re-plan leaves the same
    # reserve the email counted. The pace is a third of the table's, which the forecast only partly
    # believes yet, so the cap may stop it again before the end -- a reserve it then sizes as measured.
    mail = email.message_from_bytes((run.run_dir / "outbox" / "run-ended.eml").read_bytes(), policy=policy.default)
    finish = re.search(r"--budget-usd ([0-9.]+)`", mail.get_body(("plain",)).get_content())
    assert finish is not None and float(finish[1]) > 0.035
    assert load_state(run.run_dir).stops.stop_hours is not None
    raise_budget(run.run_dir, float(finish[1]))
    resumed = open_run(run.run_dir, slow, at=run.clock.wall() + 1)
    again = resumed.run()
    assert resumed.events("launch")[-1]["start_step"] == summary["steps"] < again["steps"]
    assert again["status"] in ("completed", "budget_cap") and again["cost_usd"] <= float(finish[1])
    first_cap, *later_caps = resumed.events("budget_cap")
    assert not first_cap["measured"] and all(cap["measured"] for cap in later_caps)

    raise_budget(run.run_dir, 1.0)
    final = open_run(run.run_dir, slow, at=resumed.clock.wall() + 1).run()
    assert final["status"] == "completed" and final["steps"] == 300


def test_a_plan_the_budget_cap_would_stop_is_not_launched_and_a_re_plan_leaves_room_for_the_stop(
        tmp_path: Path) -> None:
    # The quote's plan, 300 steps on one $0.16/h spot T4 ($0.016), fits $0.02, but not with the stop the
    # cap keeps back (a heartbeat, then the 2 s shutdown timeout twice, unmeasured: 5 min at 60x, $0.013):
    # the cap would stop it at its first heartbeat. No launch: the run says why.
    run = start_run(tmp_path, script(), budget_usd=0.02)
    summary = run.run()
    assert summary["status"] == "infeasible" and not run.events("launch") and summary["cost_usd"] == 0
    assert "$0.02 of budget (the budget cap keeps 5.0 min of a launch's cost back for its stop)" in summary["cause"]
    assert "the quote's plan (1x g4dn.xlarge spot aws:us-east-1/use1-az1, $0.02)" in summary["cause"]
    # With room for the reserve the quote's plan runs; reclaimed before its first checkpoint, it leaves
    # $0.021 and all 300 steps. The next spot pool's plan ($0.018 at $0.18/h) fits that, but not with the
    # reserve (3.1 min of its burn: the release is measured now, the stop not), so nothing launches again.
    raise_budget(run.run_dir, 0.035)
    reclaimed = script(reclaims=(Reclaim("l-1", after_s=4.3, notice=False),), steps_per_s=SPEED * SCALE / 20)
    resumed = open_run(run.run_dir, reclaimed, at=run.clock.wall() + 1)
    final = resumed.run()
    assert [e["pool"] for e in resumed.events("launch")] == ["1x g4dn.xlarge spot aws:us-east-1/use1-az1"]
    assert final["status"] == "infeasible" and final["steps"] == 0 and final["cost_usd"] <= 0.035
    assert "the budget cap keeps 3.1 min of a launch's cost back for its stop" in final["cause"]


def test_the_budget_cap_leaves_time_for_a_save_the_workers_may_be_writing(tmp_path: Path) -> None:
    # With a stop and a release measured (1 s each), $0.035 runs out. Workers that report writes of their
    # checkpoints are stopped earlier: a stop asked mid-write waits for it before its own save.
    caps = {}
    for write_s in (None, 0.5, 3.0):
        (tmp_path / f"write-{write_s}").mkdir()
        run = start_run(tmp_path / f"write-{write_s}", script(steps_per_s=SPEED * SCALE / 3, save_write_s=write_s),
                        budget_usd=0.035)
        run.controller.stop_timings.saw_stop(1.0 * SCALE / 3600)
        run.controller.stop_timings.saw_release(1.0 * SCALE / 3600)
        summary = run.run()
        assert summary["status"] == "budget_cap" and summary["cost_usd"] <= 0.035
        (caps[write_s],) = run.events("budget_cap")
        assert caps[write_s]["measured"]
    assert "after a save in flight" in caps[0.5]["reason"] and "after a save" not in caps[None]["reason"]
    # The reserve grows by the write at the burn rate, $0.16/h at 60x (past the 2 s shutdown timeout too:
    # the controller waits for a stop's checkpoint as long as the budget lasts); the cap fires earlier.
    extra = {w: caps[w]["reserve_usd"] - caps[None]["reserve_usd"] for w in (0.5, 3.0)}
    assert extra[0.5] == pytest.approx(0.16 * 0.5 * SCALE / 3600, abs=2e-4)
    assert extra[3.0] == pytest.approx(0.16 * 3.0 * SCALE / 3600, abs=2e-4)
    assert caps[3.0]["spent_usd"] <= caps[0.5]["spent_usd"] <= caps[None]["spent_usd"]
    assert caps[3.0]["spent_usd"] < caps[None]["spent_usd"]


@pytest.mark.parametrize("write_s", [None, 3.0])
def test_a_first_budget_stop_has_time_for_a_checkpoint_as_slow_as_the_writes_seen(tmp_path: Path, write_s) -> None:
    # No stop measured yet, and a stop's save takes 3 s, longer than the 2 s shutdown timeout the cap
    # assumes for an unmeasured stop. Workers that have reported 3 s writes get a reserve of two writes
    # and their stop commits; without a write on record the cap gives up on the checkpoint at the last
    # moment rather than overspend.
    run = start_run(tmp_path, script(steps_per_s=SPEED * SCALE / 3, save_write_s=write_s, stop_s=3.0),
                    budget_usd=0.03)
    summary = run.run()
    assert summary["status"] == "budget_cap" and summary["cost_usd"] <= 0.03 and 0 < summary["steps"] < 300
    (cap,) = run.events("budget_cap")  # one event, although the stop spans several heartbeats
    assert not cap["measured"]
    if write_s is None:
        assert "did not commit in time" in summary["cause"] and run.events("budget_release")
        assert "the 2.0 min bound where not yet measured" in cap["reason"]
    else:
        assert summary["final_checkpoint"] is not None and run.events("launch_end")[0]["lost_steps"] == 0
        assert "two 3.0 min checkpoint writes" in cap["reason"]
        # a heartbeat gap (1 s or a little more), two writes and the release bound, at $0.16/h at 60x
        assert 0.16 * (1 + 6 + 2) * SCALE / 3600 <= cap["reserve_usd"] + 1e-4 < 0.16 * (2 + 6 + 2) * SCALE / 3600


def test_a_budget_stop_before_training_began_says_nothing_is_lost(tmp_path: Path) -> None:
    # Nodes that take 12 s to start burn the budget down to the reserve before the first step; the stop
    # cannot commit in time (30 s), so the nodes are released without a checkpoint -- but none was due.
    run = start_run(tmp_path, script(startup_s=12.0, stop_s=30.0), budget_usd=0.035)
    summary = run.run()
    assert summary["status"] == "budget_cap" and summary["cost_usd"] <= 0.035 and run.events("budget_release")
    assert run.events("launch_end")[0]["lost_steps"] == 0 and summary["steps"] == 0
    assert summary["cause"] == ("stopped before the budget was exceeded, before the launch trained past step 0: "
                                "nothing is lost")


def test_a_stop_is_timed_on_the_runs_clock_not_the_file_systems(tmp_path: Path) -> None:
    # The run's clock (here a manual one, a year past the file system's) times the stop that the
    # budget reserve is sized from; a control file's mtime would make that stop a year long.
    run_dir = new_run(tmp_path)
    run = open_run(run_dir, script(reclaims=(Reclaim("l-1", after_s=2.0, notice=True, lead_s=1.0),)),
                   at=load_state(run_dir).origin + 365 * 86400)
    assert run.run()["status"] == "completed"
    stop_hours = run.controller.stop_timings.stop_hours
    assert stop_hours is not None and 0 < stop_hours * 3600 / SCALE < 5  # a few real seconds at most


@pytest.mark.parametrize(
    ("purchase", "extra"),
    [("reserved_held", {"term_hours": 500.0}), ("reserved_1y", {"term_usd": 1200.0, "term_hours": 8760.0})],
)
def test_held_and_reserved_pools_run_to_completion_at_no_hourly_cost(tmp_path: Path, purchase: str, extra) -> None:
    # Held capacity is $0 with its hours recorded; a bought term is charged once, in full, and nothing by the hour.
    run = start_run(tmp_path, script(), plan=phase(purchase, hourly_usd=0.0, **extra), budget_usd=5000.0,
                    allow=("spot", "on_demand", "reserved_1y"))
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    assert [launch["purchase"] for launch in summary["launches"]] == [purchase]
    with Ledger(run.run_dir) as ledger:
        spend = ledger.by_pool()
    term = extra.get("term_usd", 0.0)
    assert [(s.pool, s.purchase, s.usd, s.charged_usd) for s in spend] == [
        ("aws:us-east-1:g4dn.xlarge", purchase, term, term)]
    assert summary["cost_usd"] == term
    assert spend[0].node_hours > 0.1
    state = run.state_json()
    assert state["launches"][0]["pool"]["purchase"] == purchase and state["launches"][0]["nodes"] == 1


def test_an_error_mid_run_ends_the_state_failed_not_running(tmp_path: Path, monkeypatch) -> None:
    # A ledger that refuses the pool (as it refused held capacity) must not leave a run "running".
    def refuse(self, key, **kwargs):
        raise LedgerError(f"interval {key}: purchase={kwargs['purchase']!r} is not one of spot, on_demand")

    monkeypatch.setattr(Ledger, "open_interval", refuse)
    run = start_run(tmp_path, script())
    with pytest.raises(LedgerError):
        run.run()
    state = run.state_json()
    assert state["status"] == "failed" and "LedgerError" in state["cause"] and "purchase=" in state["cause"]
    assert json.loads((run.run_dir / "summary.json").read_text())["status"] == "failed"
    assert run.provider._launches["l-1"].terminated  # the nodes were released all the same


def test_chaos_is_carried_out_by_the_provider_once_training_has_started(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(startup_s=5.0), chaos=("at=1s",))
    summary = run.run()
    assert summary["status"] == "completed" and summary["preemptions"] == 1
    chaos = run.events("chaos")
    assert len(chaos) == 1 and chaos[0]["node"] == "l-1-n0"
    assert chaos[0]["scheduled_s"] == 1.0 and chaos[0]["elapsed_s"] >= 5.0  # held back until the workers trained
    assert run.events("notice")[0]["node"] == "l-1-n0"
    assert load_state(run.run_dir).chaos_fired == 1


def test_a_resumed_run_does_not_replay_chaos_that_already_fired(tmp_path: Path) -> None:
    run_dir = new_run(tmp_path, chaos=("at=1s",))
    state = load_state(run_dir)
    state.chaos_fired = 1  # as a controller that fired it, then died, left it
    save_state(run_dir, state)
    resumed = open_run(run_dir, script())
    summary = resumed.run()
    assert summary["status"] == "completed" and summary["preemptions"] == 0
    assert resumed.events("chaos") == []


def test_the_controller_takes_a_built_provider_and_never_calls_outside_its_interface(tmp_path: Path) -> None:
    from runtime.control.clock import ManualClock
    from runtime.control.controller import Controller
    from runtime.providers.base import Provider, ProviderContext

    run_dir = new_run(tmp_path)
    state = load_state(run_dir)
    clock = ManualClock(state.origin, state.time_scale)
    fake = FakeProvider(ProviderContext(run_dir / "provider", clock), script())
    used: set[str] = set()

    class Watched(Provider):
        name = "watched"

        def __getattribute__(self, name: str):
            if not name.startswith("_"):
                used.add(name)
            return object.__getattribute__(self, name)

    interface = {n for n in vars(Provider) if not n.startswith("_")}
    for name in interface - {"name", "from_context"}:
        setattr(Watched, name, lambda self, *a, _n=name, **k: getattr(fake, _n)(*a, **k))
    Watched.__abstractmethods__ = frozenset()
    controller = Controller.open(run_dir, tuning=TUNING, provider=Watched(), clock=clock)
    assert controller.run()["status"] == "completed"
    assert used <= interface and {"provision", "run", "poll", "terminate", "close"} <= used


# Workers at a third of the table's speed, preempted 6 s into training: after the restart the
# 0.2 h deadline cannot be met any more, though the first plan met it.
LATE = dict(steps_per_s=SPEED * SCALE / 3, reclaims=(Reclaim("l-1", after_s=6.0, notice=True, lead_s=1.0),))


def test_a_deadline_miss_goes_on_with_the_late_plan_and_alerts(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(**LATE), deadline_hours=0.2, restart_minutes=5)
    summary = run.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    miss = run.events("deadline_miss")
    assert len(miss) == 1 and miss[0]["action"] == "continue" and "the deadline will be missed" in miss[0]["reason"]
    assert run.events("replan")[0]["pool"] == miss[0]["pool"]
    mail = (run.run_dir / "outbox" / "deadline-missed.eml").read_text()
    assert "deadline" in mail and "X-Danlu-Alert: deadline-missed" in mail


def test_a_deadline_miss_stops_the_run_when_the_job_says_so(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(**LATE), deadline_hours=0.2, restart_minutes=5,
                    extra='on_deadline_miss = "stop"')
    summary = run.run()
    assert summary["status"] == "infeasible" and 'on_deadline_miss = "stop"' in summary["cause"]
    assert [e["action"] for e in run.events("deadline_miss")] == ["stop"]
    assert len(summary["launches"]) == 1 and summary["launches"][0]["outcome"] == "preempted"
    assert summary["steps"] == summary["launches"][0]["end_step"] > 0  # the work up to the notice is kept
    assert not list((run.run_dir / "outbox").glob("deadline-missed*"))


def test_a_clock_that_is_not_the_runs_is_refused(tmp_path: Path) -> None:
    from runtime.control.clock import ManualClock
    from runtime.control.controller import Controller
    from runtime.control.run_state import RunStateError

    run_dir = new_run(tmp_path)
    state = load_state(run_dir)
    with pytest.raises(RunStateError, match="is not the run's"):
        Controller.open(run_dir, provider=FakeProvider.scripted(script()),
                        clock=ManualClock(state.origin, state.time_scale * 2))
    assert not (run_dir / "events.jsonl").exists()  # refused before anything was logged


def test_the_provider_tags_with_the_runs_id_a_queues_job_with_its_queue(tmp_path: Path) -> None:
    # Cloud providers tag (and, on a resume, release) every instance by the run id they are given: a job's
    # name repeats across a team's queues, so a queue's job carries its queue's directory too; a run started
    # before the id was kept in its state keeps its directory's name.
    from runtime.control.controller import Controller
    from runtime.control.queue_record import QUEUE_RUN_FILE

    queue = tmp_path / "nightly-1"
    queue.mkdir()
    (queue / QUEUE_RUN_FILE).write_text("{}")
    queued, plain = new_run(queue), new_run(tmp_path)
    assert load_state(queued).run_id == "nightly-1-run" and load_state(plain).run_id == "run"
    old = load_state(plain)
    old.run_id = None
    save_state(plain, old)
    seen = []
    for run_dir in (queued, plain):
        factory = FakeProvider.scripted(script())

        def capture(context, factory=factory):
            seen.append(context.run_id)
            return factory(context)

        Controller.open(run_dir, provider=capture).cancel("the test has seen the id")
    assert seen == ["nightly-1-run", "run"]


def test_state_that_cannot_be_saved_any_more_ends_the_run_with_the_error_and_no_traceback(tmp_path: Path,
                                                                                          caplog) -> None:
    # A full disk from the first step on: the end state cannot be written either, which is said in one
    # line (the next line the user sees names the file and the fix), the nodes are released all the same.
    from runtime.control.run_state import RunStateError

    run = start_run(tmp_path, script())
    real_save = run.controller.save

    def save() -> None:
        if run.controller.state.current is not None and run.controller.state.current.training_at is not None:
            raise RunStateError(f"{run.run_dir / 'state.json'}: cannot be written (OSError: [Errno 28] No space left "
                                "on device). To fix: give the run directory room, then `planner run --resume`.")
        real_save()

    run.controller.save = save
    with pytest.raises(RunStateError, match="No space left"):
        run.run()
    (record,) = [r for r in caplog.records if "could not be written" in r.getMessage()]
    assert "the end state (failed)" in record.getMessage() and "No space left" in record.getMessage()
    assert record.exc_info is None  # no traceback
    assert run.provider._launches["l-1"].terminated


def test_forecasts_go_by_the_pace_the_running_launch_reports(tmp_path: Path) -> None:
    # The workers run at a third of the job's table speed and report their step every 0.5 s: the forecast,
    # the ETA and the alerts follow the measured pace during the first launch, not only after it ends.
    run = start_run(tmp_path, script(steps_per_s=SPEED * SCALE / 3, heartbeat_s=0.5))
    seen: list = []
    lives: list = []

    def progress(p) -> None:
        seen.append(p)
        lives.append(run.controller.state.live)

    run.controller.on_progress = progress
    assert run.run()["status"] == "completed"
    table = seen[0].units_per_hour  # 0.85 steps/s at 60x: 3,060 steps an hour
    assert table == pytest.approx(SPEED * 3600)
    late = [p for p, live in zip(seen, lives, strict=True) if live is not None and live.steps >= 200]
    assert late, "the launch's pace was never measured while it ran"
    # Blended with the table (200 steps' worth): 0.4 table + 0.6 measured at the end, where the table
    # alone (before) stayed at 3,060 an hour until the launch ended.
    assert late[-1].units_per_hour < 0.65 * table
    assert late[-1].eta is not None and seen[0].eta is not None and late[-1].eta > seen[0].eta
    state = load_state(run.run_dir)
    assert state.live is None  # folded into what was measured when the launch ended
    assert state.measured is not None and state.measured.units_per_hour == pytest.approx(SPEED * 3600 / 3, rel=0.05)


def test_a_launch_reclaimed_without_a_word_keeps_the_pace_its_workers_last_reported(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(heartbeat_s=0.5, reclaims=(Reclaim("l-1", after_s=3.0, notice=False),)))
    assert run.run()["status"] == "completed"
    first, _ = run.events("throughput")  # one a launch
    # The first launch's last report (2.5-3 s in, at 51 steps/s) is measured, not lost with the node.
    assert first["units_per_hour"] == pytest.approx(SPEED * 3600, rel=0.05)
    state = load_state(run.run_dir)
    assert state.live is None and state.measured is not None and state.measured.steps > 250


class _CloudFake(FakeProvider):
    remote = True  # nodes that are real machines, with the GPUs their instance type has


@pytest.mark.parametrize(("nproc", "world_size", "said"), [(None, 4, False), (4, 4, False), (1, 1, True)])
def test_a_cloud_node_runs_one_process_per_gpu_of_the_planned_instance_unless_the_job_says(
    tmp_path: Path, nproc: int | None, world_size: int, said: bool,
) -> None:
    """One process a node on a g4dn.12xlarge leaves 3 of its 4 GPUs idle, paid for: the run says so."""
    from runtime.control.clock import ManualClock
    from runtime.control.controller import Controller

    run_dir = new_run(tmp_path, plan=phase("on_demand", hourly_usd=3.912, instance_type="g4dn.12xlarge",
                                           gpus_per_node=4), nproc=nproc)
    state = load_state(run_dir)
    controller = Controller.open(run_dir, tuning=TUNING, provider=_CloudFake.scripted(script()),
                                 clock=ManualClock(state.origin, state.time_scale))
    summary = controller.run()
    events = read_events(run_dir / "events.jsonl")
    [launch] = [e for e in events if e["event"] == "launch"]
    assert summary["status"] == "completed" and "g4dn.12xlarge" in launch["pool"]
    assert launch["world_size"] == world_size and summary["launches"][0]["world_size"] == world_size
    # What the run measured is per GPU at work, as the plan counts them: one process, one GPU's speed.
    measured = load_state(run_dir).measured
    assert measured is not None and measured.gpus == world_size
    unmatched = [e["message"] for e in events if e["event"] == "gpus_unmatched"]
    assert unmatched == (["[run].nproc_per_node = 1 on g4dn.12xlarge, which has 4 GPU(s) a node: 3 of them stay "
                          "idle, paid for (the plan counts only those at work); leave nproc_per_node out to run one "
                          "process per GPU"] if said else [])


def test_on_this_machine_a_node_runs_one_process_unless_the_job_says(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(), plan=phase("on_demand", hourly_usd=3.912, instance_type="g4dn.12xlarge",
                                                   gpus_per_node=4), nproc=None)
    summary = run.run()
    assert summary["status"] == "completed" and summary["launches"][0]["world_size"] == 1
    assert not run.events("gpus_unmatched")  # a simulated node has no GPUs to match
