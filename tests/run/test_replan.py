"""Re-planning and the switching policy on what is left of a job (no processes)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from planner.job import load_job
from planner.policy import ON_DEMAND, PolicyMemory, make_policy
from planner.workload import work_model
from pricing.embedded_catalog import load_catalog_path
from pricing.pool import Pool
from runtime.control.replan import (
    REPLAN_TARGET,
    Measured,
    ReplanRequest,
    config_rate,
    decide,
    measured_speeds,
    raised_rate,
    replan,
    replan_or_late,
    within_cap,
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
    assert first.pool is not None and first.pool.id == AWS_A and first.pool.purchase == "spot"
    assert first.nodes == 1 and not first.late
    cooled = replan(_request(job, catalog, cooling=frozenset({AWS_A})))
    assert cooled.pool.id == GCP
    assert replan(_request(job, catalog, cooling=frozenset({AWS_A, GCP}))).pool.id == AZURE
    assert replan(_request(job, catalog, cooling=frozenset({AWS_A, GCP, AZURE}))).pool.id == AWS_B


def test_a_refused_pool_is_left_out_by_its_purchase_option_only(setup) -> None:
    job, catalog = setup
    on_demand = ("on_demand",)
    assert replan(_request(job, catalog, purchase=on_demand)).pool.id == "aws:us-east-1:g4dn.xlarge"
    refused = frozenset({("aws:us-east-1:g4dn.xlarge", "on_demand")})
    gcp_od = "gcp:us-central1:n1-standard-4-t4"
    assert replan(_request(job, catalog, purchase=on_demand, refused=refused)).pool.id == gcp_od
    # Azure's spot pool has no zone: its id is its on-demand pool's, and refusing one leaves the other.
    cooling = frozenset({AWS_A, GCP})
    azure_od = frozenset({(AZURE, "on_demand")})
    spot = replan(_request(job, catalog, cooling=cooling, refused=azure_od)).pool
    assert (spot.id, spot.purchase) == (AZURE, "spot")
    nothing = replan(_request(job, catalog, purchase=on_demand, refused=refused | azure_od | {(gcp_od, "on_demand")}))
    assert nothing.pool is None and "3 pool(s) without capacity" in nothing.reason


def test_a_raised_interruption_rate_steers_away_from_a_pool(setup) -> None:
    job, catalog = setup
    result = replan(_request(job, catalog, rates={AWS_A: 40.0}))
    assert result.pool.id != AWS_A


def test_the_remaining_work_budget_and_deadline_are_what_gets_solved(setup) -> None:
    job, catalog = setup  # 1500 steps at 0.85 steps/s: 0.49 h on one T4
    result = replan(_request(job, catalog, work_left=1500.0, hours_left=8.0, budget_left_usd=4.0, restart_hours=0.5))
    (phase,) = result.plan.solution.phases
    assert phase.config.rate * phase.work_hours == pytest.approx(1500, rel=1e-6)
    assert result.plan.p90_hours <= 7.5 and result.plan.expected_cost_usd <= 4.0
    # The deadline left after the restart reaches the MILP: 0.55 h left less a 0.1 h restart
    # is 0.45 h, shorter than the 0.49 h of work, so nothing fits.
    short = replan(_request(job, catalog, hours_left=0.55, restart_hours=0.1))
    assert short.plan is None and "0.45 h to the deadline" in short.reason
    assert replan(_request(job, catalog, hours_left=0.7, restart_hours=0.1)).plan.p90_hours <= 0.6
    # ... and so does the budget: on-demand (0.526 $/h) for 0.49 h is out of reach at $0.20.
    assert replan(_request(job, catalog, budget_left_usd=0.2, purchase=("on_demand",))).plan is None


def test_a_missed_deadline_gives_the_fastest_plan_within_budget_marked_late(setup) -> None:
    job, catalog = setup
    request = _request(job, catalog, hours_left=0.4, restart_hours=0.1)  # 0.3 h for 0.49 h of work
    assert replan(request).plan is None
    late = replan_or_late(request)
    # Spot is cheaper, but preemptions make it slower: the fastest plan is on-demand.
    assert replan(_request(job, catalog, hours_left=None)).pool.purchase == "spot"
    assert late.late and late.pool.purchase == "on_demand" and late.nodes == 1
    end = 0.1 + late.plan.expected_hours
    assert "deadline will be missed" in late.note
    assert f"{end:.2f} h" in late.note and f"{end - 0.4:.2f} h after the deadline" in late.note
    # Within the budget: with $0.10 only the cheapest spot pool is affordable.
    cheap = replan_or_late(_request(job, catalog, hours_left=0.4, restart_hours=0.1, budget_left_usd=0.1))
    assert cheap.late and cheap.pool.id == AWS_A and cheap.plan.expected_cost_usd <= 0.1
    strict = replan_or_late(_request(job, catalog, hours_left=0.4, restart_hours=0.1, allow_late=False))
    assert strict.plan is None and not strict.late and "no plan fits" in strict.reason
    on_time = replan_or_late(_request(job, catalog))
    assert on_time.plan is not None and not on_time.late and on_time.note == ""


def test_the_plan_leaves_the_budget_caps_stop_reserve_of_its_dearest_phase(tmp_path: Path) -> None:
    """The budget cap stops a launch once spend plus its stop reserve would pass the budget: a re-plan
    that leaves no room for that reserve is stopped before it ends (or at once, at its first heartbeat)."""
    catalog = load_catalog_path(write_catalog(tmp_path / "catalog.csv"))
    job = load_job(write_job(tmp_path / "job.toml", entrypoint=["python", "train.py"], steps=3000,
                             deadline_hours=10, max_nodes=2))
    # 1500 steps due in 0.25 h after a 0.05 h restart: only two on-demand nodes ($1.05/h) are in time.
    request = _request(job, catalog, hours_left=0.3, restart_hours=0.05, budget_left_usd=0.4)
    free = replan_or_late(request)
    assert (free.pool.purchase, free.nodes, free.late) == ("on_demand", 2, False)
    assert free.plan.expected_cost_usd == pytest.approx(0.258, abs=1e-3)
    # A quarter hour of their burn held back ($0.26) leaves $0.14: they no longer fit, so the
    # fastest plan that does is taken, late.
    held = dataclasses.replace(request, stop_reserve_hours=0.25)
    assert not within_cap(free.plan.solution, held)
    late = replan_or_late(held)
    assert late.late and late.pool.purchase == "spot" and within_cap(late.plan.solution, held)
    dearest = max(p.config.burn for p in late.plan.solution.phases)
    assert late.plan.expected_cost_usd + 0.25 * dearest <= 0.4
    # With $0.60 left the on-demand plan and its reserve fit again.
    roomy = replan_or_late(dataclasses.replace(held, budget_left_usd=0.6))
    assert (roomy.pool.purchase, roomy.nodes, roomy.late) == ("on_demand", 2, False)
    # When nothing fits, the reason says what the budget has to keep back.
    none = replan(dataclasses.replace(held, hours_left=None, budget_left_usd=0.09))
    assert none.plan is None and "keeps 15.0 min of a launch's cost back for its stop" in none.reason
    assert replan(dataclasses.replace(held, hours_left=None, budget_left_usd=0.09, stop_reserve_hours=0)).plan


def test_measured_throughput_is_blended_with_the_table(setup) -> None:
    job, catalog = setup
    work = work_model(job)
    long_run = measured_speeds(work, Measured("T4", gpus=1, units_per_hour=2 * 0.85 * 3600, steps=10**7))
    assert long_run["t4"] == pytest.approx(1.7, rel=1e-4)
    table = replan(_request(job, catalog))
    faster = replan(_request(job, catalog, measured=Measured("T4", 1, 2 * 0.85 * 3600, steps=10**7)))
    assert faster.plan.expected_hours < table.plan.expected_hours * 0.6
    # Half the table's speed, seen for 2 steps, barely moves the plan; seen for 2000 steps, it does.
    half = 0.5 * 0.85 * 3600
    glance = replan(_request(job, catalog, measured=Measured("T4", 1, half, steps=2)))
    assert glance.plan.expected_hours == pytest.approx(table.plan.expected_hours, rel=0.015)
    assert glance.pool == table.pool
    settled = replan(_request(job, catalog, measured=Measured("T4", 1, half, steps=2000)))
    assert settled.plan.expected_hours > table.plan.expected_hours * 1.6


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
    assert Pool.of(aws, "spot").id == AWS_A
    assert Pool.of(aws, "on_demand").id == "aws:us-east-1:g4dn.xlarge"


def test_config_rate_is_the_planner_rate_of_the_same_pool(setup) -> None:
    job, catalog = setup
    result = replan(_request(job, catalog))
    assert config_rate(job, result.pool, result.nodes) == pytest.approx(result.plan.solution.phases[0].config.raw_rate)
    assert config_rate(job, result.pool, 2) == pytest.approx(2 * 0.85 * 3600)  # no efficiency given: 1.0


def _decide(job, catalog, *, elapsed: float, done: float, cooling=frozenset(), policy: str = "uniform_progress"):
    first = replan(_request(job, catalog))
    return decide(make_policy(policy), job=job, catalog=catalog, elapsed_hours=elapsed, work_done=done,
                  work_total=job.workload.steps, rate_per_hour=config_rate(job, first.pool, first.nodes),
                  cooling=cooling,
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


def test_a_job_with_nothing_to_wait_for_is_re_planned_at_once(setup) -> None:
    """Waiting for spot pays only for a job that buys spot and has no capacity of its own idle."""
    from planner.job import HeldReservation

    job, catalog = setup
    everything = frozenset({AWS_A, GCP, AZURE, AWS_B})
    purchase = job.purchase
    held = HeldReservation(cloud="aws", region="us-east-1", instance_type="g4dn.xlarge", count=1, until="2099-01-01")
    for changed, why in [(purchase.model_copy(update={"allow": ("on_demand",)}), "the job does not buy spot"),
                         (purchase.model_copy(update={"held": (held,)}), "its held nodes need no wait")]:
        decision = _decide(job.model_copy(update={"purchase": changed}), catalog, elapsed=1.0, done=1500,
                           cooling=everything)
        assert decision.target == REPLAN_TARGET and decision.reason.endswith(f"but {why}: re-plan now"), decision


def test_without_a_deadline_spot_is_used_whenever_available(tmp_path: Path) -> None:
    catalog = load_catalog_path(write_catalog(tmp_path / "catalog.csv"))
    job = load_job(write_job(tmp_path / "job.toml", entrypoint=["python", "t.py"]))
    job = job.model_copy(update={"constraints": job.constraints.model_copy(update={"deadline_hours": None})})
    decision = decide(make_policy("danlu"), job=job, catalog=catalog, elapsed_hours=1, work_done=0, work_total=300,
                      rate_per_hour=3000, cooling=frozenset({AWS_A}), preempted=AWS_A, memory=PolicyMemory())
    assert decision.target == GCP


def test_the_policy_is_told_the_spot_pools_interruption_rates(setup) -> None:
    from runtime.control.replan import relative_prices, spot_interruption_rates

    job, catalog = setup
    prices, _ = relative_prices(job, catalog, frozenset())
    rates = spot_interruption_rates(catalog, prices)
    assert set(rates) == set(prices) and all(r > 0 for r in rates.values())
