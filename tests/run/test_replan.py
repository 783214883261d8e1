"""Re-planning and the switching policy on what is left of a job (no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.job import load_job
from planner.policy import ON_DEMAND, PolicyMemory, make_policy
from pricing.embedded_catalog import load_catalog_path
from runtime.control.replan import (
    Measured,
    ReplanRequest,
    config_rate,
    decide,
    measured_speeds,
    offering_pool_id,
    raised_rate,
    replan,
)
from tests.run.helpers import write_catalog, write_job

AWS_A = "aws:us-east-1/use1-az1:g4dn.xlarge"
GCP = "gcp:us-central1/us-central1-a:n1-standard-4-t4"
AZURE = "azure:eastus:Standard_NC4as_T4_v3"
AWS_B = "aws:us-east-1/use1-az2:g4dn.xlarge"


@pytest.fixture
def setup(tmp_path: Path):
    catalog = load_catalog_path(write_catalog(tmp_path / "catalog.csv"))
    job = load_job(write_job(tmp_path / "job.toml", entrypoint=["python", "train.py"], steps=3000,
                             deadline_hours=10))
    return job, catalog


def _request(job, catalog, **changes) -> ReplanRequest:
    base = dict(job=job, catalog=catalog, work_left=1500.0, budget_left_usd=4.0, hours_left=8.0, restart_hours=0.1)
    return ReplanRequest(**{**base, **changes})


def test_raised_rate_is_a_posterior_that_never_drops_below_the_prior() -> None:
    assert raised_rate(0.5, preemptions=1, exposed_hours=0.0) == pytest.approx(1.0)
    assert raised_rate(0.5, preemptions=1, exposed_hours=2.0) == pytest.approx(0.5)
    assert raised_rate(0.5, preemptions=0, exposed_hours=100.0) == 0.5
    assert raised_rate(0.5, preemptions=3, exposed_hours=1.0) == pytest.approx(4 / 3)


def test_the_cheapest_spot_pool_is_chosen_and_a_cooling_pool_is_skipped(setup) -> None:
    job, catalog = setup
    first = replan(_request(job, catalog))
    assert first.pool is not None and first.pool.pool_id == AWS_A and first.pool.purchase == "spot"
    cooled = replan(_request(job, catalog, cooling=frozenset({AWS_A})))
    assert cooled.pool.pool_id == GCP
    assert replan(_request(job, catalog, cooling=frozenset({AWS_A, GCP}))).pool.pool_id == AZURE
    assert replan(_request(job, catalog, cooling=frozenset({AWS_A, GCP, AZURE}))).pool.pool_id == AWS_B


def test_a_raised_interruption_rate_steers_away_from_a_pool(setup) -> None:
    job, catalog = setup
    result = replan(_request(job, catalog, rates={AWS_A: 40.0}))
    assert result.pool.pool_id != AWS_A


def test_the_remaining_work_budget_and_deadline_are_what_gets_solved(setup) -> None:
    job, catalog = setup
    result = replan(_request(job, catalog, work_left=1500.0, hours_left=8.0, budget_left_usd=4.0, restart_hours=0.5))
    assert result.job.workload.steps == 1500
    assert result.job.constraints.deadline_hours == pytest.approx(7.5)
    assert result.job.constraints.budget_usd == 4.0
    assert result.plan.solution.phases[0].config.raw_rate * result.plan.expected_hours >= 1500 * 0.999


def test_measured_throughput_replaces_the_table_and_scales_other_gpus(setup) -> None:
    job, catalog = setup
    speeds = measured_speeds(job, Measured("T4", gpus=1, units_per_hour=2 * 0.85 * 3600))
    assert speeds["t4"] == pytest.approx(1.7)
    table = replan(_request(job, catalog))
    faster = replan(_request(job, catalog, measured=Measured("T4", gpus=1, units_per_hour=2 * 0.85 * 3600)))
    assert faster.plan.expected_hours < table.plan.expected_hours * 0.6


def test_the_policy_can_restrict_the_plan_to_on_demand(setup) -> None:
    job, catalog = setup
    result = replan(_request(job, catalog, purchase=("on_demand",)))
    assert result.pool.purchase == "on_demand" and result.pool.zone is None


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"work_left": 0.0}, "no work left"),
        ({"hours_left": 0.05}, "less than one restart"),
        ({"budget_left_usd": 0.0}, "the budget is spent"),
        ({"budget_left_usd": 0.0001}, "no plan fits"),
    ],
)
def test_nothing_fits_says_why(setup, changes: dict, reason: str) -> None:
    job, catalog = setup
    result = replan(_request(job, catalog, **changes))
    assert result.plan is None and reason in result.reason


def test_pool_ids_match_zones_only_for_spot(setup) -> None:
    _, catalog = setup
    aws = next(o for o in catalog if o.zone == "use1-az1")
    assert offering_pool_id(aws, "spot") == AWS_A
    assert offering_pool_id(aws, "on_demand") == "aws:us-east-1:g4dn.xlarge"


def _decide(job, catalog, *, elapsed: float, done: float, cooling=frozenset(), policy: str = "uniform_progress"):
    pool = replan(_request(job, catalog)).pool
    return decide(make_policy(policy), job=job, catalog=catalog, elapsed_hours=elapsed, work_done=done,
                  work_total=job.workload.steps, rate_per_hour=config_rate(job, pool), cooling=cooling,
                  preempted=AWS_A, memory=PolicyMemory())


def test_policy_keeps_spot_while_the_deadline_is_far(setup) -> None:
    job, catalog = setup  # 3000 steps at 0.85/s: about 1 h of work, 10 h to the deadline
    decision = _decide(job, catalog, elapsed=1.0, done=600, cooling=frozenset({AWS_A}))
    assert decision.target == GCP and decision.reason


def test_policy_moves_to_on_demand_when_another_spot_loss_would_miss_the_deadline(setup) -> None:
    job, catalog = setup
    # 0.8 h of work left, 0.9 h to go, restarts of 5 min: no room for another lost spot launch.
    decision = _decide(job, catalog, elapsed=9.1, done=600)
    assert decision.target == ON_DEMAND and "deadline" in decision.reason


def test_policy_waits_when_no_spot_is_up_and_the_job_is_ahead(setup) -> None:
    job, catalog = setup
    everything = frozenset({AWS_A, GCP, AZURE, AWS_B})
    assert _decide(job, catalog, elapsed=1.0, done=1500, cooling=everything).target is None
    assert _decide(job, catalog, elapsed=5.0, done=600, cooling=everything).target == ON_DEMAND


def test_without_a_deadline_spot_is_used_whenever_available(tmp_path: Path) -> None:
    catalog = load_catalog_path(write_catalog(tmp_path / "catalog.csv"))
    job = load_job(write_job(tmp_path / "job.toml", entrypoint=["python", "t.py"]))
    job = job.with_changes(constraints={"deadline_hours": None})
    decision = decide(make_policy("danlu"), job=job, catalog=catalog, elapsed_hours=1, work_done=0, work_total=300,
                      rate_per_hour=3000, cooling=frozenset({AWS_A}), preempted=AWS_A, memory=PolicyMemory())
    assert decision.target == GCP
