"""The tick engine's accounting rules (hour-long ticks keep the arithmetic readable)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from planner.policy import (
    ON_DEMAND,
    Decision,
    GreedyPolicy,
    OnDemandPolicy,
    PolicyState,
)
from planner.simulate import (
    DEFAULT_SPOT_PRICE,
    JobModel,
    SimulationError,
    simulate,
    simulate_policies,
    tick_grid,
)
from tests.simulate.helpers import trace_of

SPOT, OD = DEFAULT_SPOT_PRICE, 3.06


@pytest.mark.parametrize(("job", "restart", "billed"), [(5.0, 1.0, 6.0), (4.5, 0.3, 5.5), (2.0, 0.0, 2.0)])
def test_closed_forms_on_always_and_never_available_pools(job, restart, billed):
    model = JobModel(job, 12.0, restart)
    spot = simulate(trace_of([1] * 12), model, GreedyPolicy())
    assert spot.cost_usd == pytest.approx(SPOT * billed)
    assert spot.finish_hours == pytest.approx(billed) and spot.deadline_met
    on_demand = simulate(trace_of([0] * 12), model, OnDemandPolicy())
    assert on_demand.cost_usd == pytest.approx(OD * billed)
    assert on_demand.spot_hours == 0 and on_demand.on_demand_hours == pytest.approx(billed)


def test_preemption_keeps_the_work_and_greedy_finishes_exactly_at_the_deadline():
    model = JobModel(3.0, 10.0, 0.0)
    result = simulate(trace_of([1, 1] + [0] * 10), model, GreedyPolicy())
    assert result.progress[:2] == (1.0, 2.0)
    assert result.preemptions == 1
    assert result.targets == ("p0", "p0") + (None,) * 7 + (ON_DEMAND,)
    assert result.finish_hours == pytest.approx(10.0) and result.deadline_met
    assert result.cost_usd == pytest.approx(2 * SPOT + OD)


def test_every_launch_pays_the_overhead_rounded_up_to_whole_ticks():
    model = JobModel(2.0, 10.0, 0.5)  # 0.5 h becomes one 1-hour tick
    result = simulate(trace_of([1, 0, 1, 1, 1, 1, 1]), model, GreedyPolicy())
    assert result.targets == ("p0", None, "p0", "p0", "p0")
    assert result.progress == (0.0, 0.0, 0.0, 1.0, 2.0)
    assert (result.launches, result.preemptions) == (2, 1)
    assert result.cost_usd == pytest.approx(4 * SPOT)
    assert result.finish_hours == 5.0


def test_per_tick_prices_and_a_partly_billed_last_tick():
    model = JobModel(1.5, 5.0, 0.0)
    result = simulate(trace_of([1, 1, 1], prices=[[2.0, 4.0, 8.0]]), model, GreedyPolicy())
    assert result.cost_usd == pytest.approx(2.0 + 0.5 * 4.0)
    assert result.finish_hours == pytest.approx(1.5)


def test_tick_grid_for_the_papers_tight_setting():
    grid = tick_grid(JobModel(48, 52, 0.2), 195 / 3600)
    assert (grid.overhead_ticks, grid.work_ticks, grid.last_tick, grid.slack_ticks) == (4, 887, 959, 73)
    assert grid.last_fraction == pytest.approx(48 * 3600 / 195 - 886)


def test_a_deadline_no_schedule_can_meet_is_refused():
    with pytest.raises(SimulationError, match="give a deadline of at least 6 h"):
        simulate(trace_of([1] * 8), JobModel(5.0, 5.5, 1.0), GreedyPolicy())


@pytest.mark.parametrize("field", ["job_hours", "deadline_hours", "on_demand_price", "spot_price"])
def test_model_values_must_be_positive(field):
    values = {"job_hours": 1.0, "deadline_hours": 2.0, "restart_hours": 0.1, "on_demand_price": 1.0, "spot_price": 0.5}
    with pytest.raises(SimulationError, match=f"{field} must be a finite number > 0"):
        JobModel(**(values | {field: 0.0}))


@dataclass(frozen=True)
class _Fixed:
    target: str | None
    name: str = "fixed"

    def decide(self, state: PolicyState) -> Decision:
        return Decision(self.target, "test", state.memory)


def test_a_policy_asking_for_an_unavailable_pool_is_a_bug():
    with pytest.raises(SimulationError, match="chose spot pool 'p0' at tick 1, but it is not available"):
        simulate(trace_of([1, 0, 1]), JobModel(2.0, 5.0, 0.0), _Fixed("p0"))


def test_a_job_that_never_runs_misses_its_deadline():
    result = simulate(trace_of([1] * 4), JobModel(2.0, 5.0, 0.0), _Fixed(None))
    assert result.finish_hours is None and not result.deadline_met and result.cost_usd == 0
    assert len(result.targets) == tick_grid(JobModel(2.0, 5.0, 0.0), 1.0).horizon_ticks(JobModel(2.0, 5.0, 0.0))


def test_paper_policies_are_pinned_to_the_home_pool_and_danlu_roams():
    trace = trace_of([0, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1])
    results = simulate_policies(trace, JobModel(3.0, 8.0, 0.0), ("uniform_progress", "danlu"))
    assert "p1" not in results["uniform_progress"].targets
    assert results["danlu"].targets == ("p1", "p1", "p1")
    pinned = simulate_policies(trace, JobModel(3.0, 8.0, 0.0), ("uniform_progress",), home_pool="p1")
    assert pinned["uniform_progress"].cost_usd == pytest.approx(3 * SPOT)
