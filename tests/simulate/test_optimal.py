"""The hindsight optimum: exact (= brute force), a lower bound, and replayable."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner.optimal import (
    SchedulePolicy,
    optimal_costs,
    optimal_policy,
    optimal_schedule,
)
from planner.policy import ON_DEMAND, POLICY_NAMES, make_policy
from planner.simulate import DEFAULT_SPOT_PRICE, JobModel, simulate, tick_grid
from pricing.traces import read_traces
from tests.simulate.helpers import trace_of

SPOT, OD = DEFAULT_SPOT_PRICE, 3.06
TRACES = ("traces", "skypilot-spot-traces", "availability", "1-node", "aws-02-15-2023")


@st.composite
def small_cases(draw, max_pools=2, max_ticks=40):
    """A random multi-pool trace (prices per tick for some pools) and a feasible model."""
    pools = draw(st.integers(1, max_pools))
    ticks = draw(st.integers(2, max_ticks))
    rows = [draw(st.lists(st.booleans(), min_size=ticks, max_size=ticks)) for _ in range(pools)]
    priced = draw(st.booleans())
    prices = None
    if priced:
        prices = [[draw(st.sampled_from([0.5, 0.9701, 1.4])) for _ in range(ticks)] for _ in range(pools)]
    gap = draw(st.sampled_from([1.0, 0.5, 0.25]))  # hours per tick
    job = draw(st.integers(1, 12)) * gap * draw(st.sampled_from([1.0, 0.6, 0.35]))
    restart = draw(st.sampled_from([0.0, 0.2, 0.5, 1.0, 1.7])) * gap
    slack = draw(st.floats(0.0, 6.0)) * gap
    model = JobModel(job, job + float(np.ceil(restart / gap - 1e-6)) * gap + slack, restart)
    return trace_of(*rows, gap_seconds=gap * 3600, prices=prices), model


def _brute_force(trace, model) -> float:
    """Cheapest schedule that meets the deadline, by trying every schedule in the engine."""
    grid = tick_grid(model, trace.tick_hours)
    trace = trace.window(0, grid.last_tick + 1)
    modes = (None, ON_DEMAND, *trace.pools)
    best = np.inf
    for combo in itertools.product(modes, repeat=grid.last_tick + 1):
        usable = all(
            m in (None, ON_DEMAND) or trace.available[trace.pools.index(m), t] for t, m in enumerate(combo)
        )
        if usable:
            result = simulate(trace, model, SchedulePolicy(combo))
            if result.deadline_met:
                best = min(best, result.cost_usd)
    return best


@settings(max_examples=40, deadline=None)
@given(small_cases(max_pools=2, max_ticks=8))
def test_the_optimum_equals_brute_force_on_tiny_traces(case):
    trace, model = case
    grid = tick_grid(model, trace.tick_hours)
    assume(grid.last_tick + 1 <= (6 if len(trace.pools) == 1 else 5))
    cost, _ = optimal_schedule(trace, model)
    assert cost == pytest.approx(_brute_force(trace, model), rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(small_cases())
def test_the_optimum_is_never_above_any_policy_that_meets_the_deadline(case):
    trace, model = case
    best = optimal_costs(trace, model, [0])[0]
    for name in POLICY_NAMES:
        for home in trace.pools:
            result = simulate(trace, model, make_policy(name, home_pool=home))
            if result.deadline_met:
                assert best <= result.cost_usd + 1e-9, name


@settings(max_examples=60, deadline=None)
@given(small_cases())
def test_the_optimal_schedule_replays_to_its_cost_and_meets_the_deadline(case):
    trace, model = case
    cost, schedule = optimal_schedule(trace, model)
    replay = simulate(trace, model, SchedulePolicy(schedule))
    assert replay.deadline_met
    assert replay.cost_usd == pytest.approx(cost, rel=1e-9)
    assert optimal_costs(trace, model, [0])[0] == pytest.approx(cost, rel=1e-12)


@pytest.mark.parametrize(("job", "restart"), [(5.0, 1.0), (4.3, 0.25), (3.0, 0.0)])
def test_closed_forms(job, restart):
    model = JobModel(job, 9.0, restart)
    billed = job + np.ceil(restart - 1e-9)
    assert optimal_costs(trace_of([1] * 9), model, [0])[0] == pytest.approx(SPOT * billed)
    assert optimal_costs(trace_of([0] * 9), model, [0])[0] == pytest.approx(OD * billed)
    assert optimal_costs(trace_of([0] * 9, [1] * 9), model, [0])[0] == pytest.approx(SPOT * billed)


def test_windows_are_solved_side_by_side():
    trace = trace_of([1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1], [0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0])
    model = JobModel(3.0, 5.0, 0.5)
    batch = optimal_costs(trace, model, [0, 2, 5, 9])
    one_by_one = [optimal_schedule(trace.window(s, 6), model)[0] for s in (0, 2, 5, 9)]
    assert batch == pytest.approx(one_by_one)


@pytest.mark.shared
@pytest.mark.parametrize("zones", [("us-east-1c",), ("us-east-2a", "us-east-2b"), None])
def test_the_optimum_bounds_every_policy_on_real_windows(shared, zones):
    trace = read_traces([shared(*TRACES)])
    if zones:
        trace = trace.select(zones)
    model = JobModel(24.0, 30.0, 0.2)
    grid = tick_grid(model, trace.tick_hours)
    starts = [0, 4321, 12345]
    best = optimal_costs(trace, model, starts)
    for start, optimum in zip(starts, best, strict=True):
        window = trace.window(start, grid.horizon_ticks(model))
        replay = simulate(window, model, optimal_policy(window, model))
        assert replay.cost_usd == pytest.approx(optimum) and replay.deadline_met
        for name in POLICY_NAMES:
            result = simulate(window, model, make_policy(name, home_pool=trace.pools[0]))
            assert result.deadline_met and optimum <= result.cost_usd + 1e-9
