"""A plan "the team's cluster, then the cloud" on the scripted fake provider and a manual clock.

The cluster (``[[purchase.cluster]]``, 1 T4 at $0.05/h) may be held 0.04 h, less than the
300-step job needs, so the plan is the cluster for 0.04 h, then spot on AWS. The controller
must end the cluster's launch at its phase's end with a checkpoint, leave the cluster for the
rest of the run and resume on the cloud; an eviction must not make it leave the cluster, and
a cluster without capacity must be left out of the re-plan while it cools down.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.cluster import cluster_pool
from planner.job import load_job
from pricing.pool import Pool
from runtime.control import phases
from planner.report import plan_json
from pricing.sources import resolve_catalog
from runtime.control.replan import first_plan
from runtime.control.run_start import new_state
from runtime.control.run_state import load_state
from runtime.providers.fake import Reclaim
from tests.run.fake_run import AWS_A, SCALE, billed, open_run, script, start_run
from tests.run.helpers import cluster_table, write_catalog, write_job

CLUSTER = "kubernetes:lab/ml:t4"
MAX_HOURS = 0.04


def start(tmp_path: Path, fake, **job):
    return start_run(tmp_path, fake, restart_minutes=0.1, extra=cluster_table(MAX_HOURS), **job)


def test_the_cluster_phase_ends_at_a_checkpoint_and_the_cloud_finishes_the_job(tmp_path: Path) -> None:
    run = start(tmp_path, script())
    summary = run.run()
    plan = run.events("plan")[0]
    assert plan["pool"].endswith("kubernetes:lab/ml")  # the quote's first phase: the cluster
    assert summary["status"] == "completed" and summary["steps"] == 300
    first, second = summary["launches"]
    assert first["pool_id"] == CLUSTER and first["outcome"] == "phase_end"
    assert second["pool_id"] == AWS_A and second["start_step"] == first["end_step"] > 0
    # Planned, not a preemption: nothing lost, no cool-down, no raised interruption rate.
    assert summary["preemptions"] == 0 and summary["lost_steps"] == 0 and summary["replans"] == 1
    state = load_state(run.run_dir)
    assert state.left_out == {CLUSTER: None} and CLUSTER not in state.cooling and CLUSTER not in state.rates
    stop = run.events("checkpoint_request")[0]
    assert stop["action"] == "stop" and "its phase of the plan ends" in stop["reason"]
    (end,) = run.events("phase_end")
    assert end["pool"] == CLUSTER and end["step"] == first["end_step"]
    # The stop came when the cluster's 0.04 h were up (a poll and a heartbeat later at most).
    up, down = (e for e in run.events() if e["event"] in ("node_up", "node_down") and e["launch"] == "l-1")
    assert MAX_HOURS * 3600 <= down["t"] - up["t"] <= MAX_HOURS * 3600 + 5 * SCALE
    # Each side billed at its own price: the pod at the internal $0.05/h, the instance at spot's.
    assert [e["hourly_usd"] for e in run.events("node_up")] == [0.05, 0.16]
    assert summary["cost_usd"] == pytest.approx(billed(run.events()), rel=1e-9)


def test_a_plan_that_leaves_the_cluster_after_its_planned_hours_ends_the_phase_there(tmp_path: Path) -> None:
    """No max_hours: one pod alone would miss the deadline, two cloud nodes would not; the plan
    gives the cluster what it can do in time, and the phase's planned hours end it."""
    path = write_job(tmp_path / "job.toml", entrypoint=["python", "train.py"], nproc=1, restart_minutes=0.1,
                     deadline_hours=0.08, extra=cluster_table(None))
    path.write_text(path.read_text().replace("max_nodes = 1", "max_nodes = 2"))  # the cloud may use two nodes
    catalog = write_catalog(tmp_path / "catalog.csv")
    job = load_job(path)
    planned = first_plan(job, resolve_catalog(str(catalog)))
    assert planned.pool is not None and planned.pool.id == CLUSTER and len(planned.plan.solution.phases) == 2
    hours = phases.phase_hours(plan_json(planned.plan), planned.pool, job)
    assert hours is not None and 0 < hours < 0.08
    run_dir = tmp_path / "run"
    new_state(job_path=path, job=job, run_dir=run_dir, catalog=str(catalog), provider="local", time_scale=SCALE,
              policy="danlu", chaos=[])
    run = open_run(run_dir, script())
    summary = run.run()
    first = load_state(run_dir).launches[0]
    assert first.pool.id == CLUSTER and first.outcome == "phase_end", summary
    assert summary["status"] == "completed" and summary["launches"][1]["nodes"] == 2
    assert hours * 3600 <= first.released_at - first.provisioned_at <= hours * 3600 + 5 * SCALE


def test_an_eviction_on_the_cluster_runs_the_cluster_again(tmp_path: Path) -> None:
    run = start(tmp_path, script(reclaims=(Reclaim("l-1", after_s=0.5, notice=True, lead_s=0.5),)))
    summary = run.run()
    assert summary["status"] == "completed" and summary["preemptions"] == 1
    pools = [launch["pool_id"] for launch in summary["launches"]]
    outcomes = [launch["outcome"] for launch in summary["launches"]]
    # The team's GPUs are still the team's: back to the cluster for what is left of its 0.04 h, then AWS.
    assert pools == [CLUSTER, CLUSTER, AWS_A] and outcomes == ["preempted", "phase_end", "completed"]
    first, second, _ = load_state(run.run_dir).launches
    held = (first.released_at - first.provisioned_at) + (second.released_at - second.provisioned_at)
    assert held == pytest.approx(MAX_HOURS * 3600, abs=5 * SCALE)


def test_a_cluster_without_capacity_is_left_out_of_the_re_plan_while_it_cools_down(tmp_path: Path) -> None:
    run = start(tmp_path, script(no_capacity=frozenset({CLUSTER})))
    summary = run.run()
    assert summary["status"] == "completed" and summary["failures"] == 1
    assert [launch["pool_id"] for launch in summary["launches"]] == [AWS_A]
    (failed,) = run.events("provision_failed")
    assert "kubernetes:lab/ml" in failed["pool"]
    state = load_state(run.run_dir)
    provisioned_at = run.events("launch")[0]["t"]  # the re-plan's launch: right after the refusal
    assert state.left_out[CLUSTER] == pytest.approx(provisioned_at + 30 * 60, abs=60)  # --cooldown 30
    assert CLUSTER not in state.cooling and state.refused == {}


def test_phase_hours_and_the_job_a_re_plan_solves(tmp_path: Path) -> None:
    job = load_job(write_job(tmp_path / "job.toml", entrypoint=["python", "t.py"], extra=cluster_table(6.0)))
    pool = cluster_pool(job.purchase.cluster[0])
    aws = {"cloud": "aws", "region": "us-east-1", "zone": "use1-az1", "instance_type": "g4dn.xlarge", "gpu": "T4",
           "gpus_per_node": 1, "purchase": "spot", "hourly_usd": 0.16, "nodes": 1, "hours": 3.0}
    first = {**pool.to_dict(), "nodes": 1, "hours": 5.5, "queue_wait_hours": 1.5}
    two = {"phases": [first, aws]}
    assert phases.phase_hours(two, pool, job) == 4.0  # the queue wait is not billed
    assert phases.phase_hours(two, pool, job, used_hours=3.0) == 3.0  # max_hours 6 less 3 held
    assert phases.phase_hours({"phases": [first]}, pool, job) == 6.0  # alone: only the team's cap
    assert phases.phase_hours({"phases": [first]}, pool, job, used_hours=7.0) == 0.0
    assert phases.phase_hours(two, Pool.from_dict(aws), job) is None

    assert phases.replan_job(job) is job
    assert phases.replan_job(job, left_out={pool.id}).purchase.cluster == ()
    assert phases.replan_job(job, used_hours={pool.id: 2.5}).purchase.cluster[0].max_hours == 3.5
    assert phases.replan_job(job, used_hours={pool.id: 6.0}).purchase.cluster == ()
    assert phases.replan_job(job, left_out={"aws:x"}) is job


def test_a_hand_written_plan_without_hours_leaves_only_the_teams_cap(tmp_path: Path) -> None:
    job = load_job(write_job(tmp_path / "job.toml", entrypoint=["python", "t.py"], extra=cluster_table(6.0)))
    pool = cluster_pool(job.purchase.cluster[0])
    bare = {"phases": [{**pool.to_dict(), "nodes": 1}, {"cloud": "aws"}]}  # `planner run --plan` by hand
    assert phases.phase_hours(bare, pool, job) == 6.0
    assert phases.phase_hours({"phases": ["nonsense", {}]}, pool, job) == 6.0
