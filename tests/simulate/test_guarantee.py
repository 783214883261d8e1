"""The deadline guarantee of Uniform Progress, kept by every policy: whenever on-demand
from the start could meet the deadline, the policy meets it, whatever spot does.

Hypothesis draws the traces an adversary would: flickers of one tick, long outages,
spot that vanishes right after each launch or returns only at the end, several pools
taking turns, and a ``danlu`` with any parameters and any prior (the guarantee must
not rest on what it has learned).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.danlu_policy import DanluPolicy
from planner.policy import POLICY_NAMES, make_policy
from planner.simulate import JobModel, simulate, tick_grid
from tests.simulate.helpers import trace_of


@st.composite
def adversarial_rows(draw, ticks: int) -> list[bool]:
    """A row of availability built from runs: flickers, long outages, or a burst near the end."""
    kind = draw(st.sampled_from(["runs", "flicker", "late", "early"]))
    if kind == "flicker":
        period = draw(st.integers(2, 6))
        return [i % period == 0 for i in range(ticks)]
    if kind == "late":
        cut = draw(st.integers(0, ticks))
        return [i >= cut for i in range(ticks)]
    if kind == "early":
        cut = draw(st.integers(0, ticks))
        return [i < cut for i in range(ticks)]
    row: list[bool] = []
    up = draw(st.booleans())
    while len(row) < ticks:
        row += [up] * draw(st.integers(1, max(ticks // 3, 1)))
        up = not up
    return row[:ticks]


@st.composite
def cases(draw):
    gap = draw(st.sampled_from([1.0, 0.5, 0.2]))  # hours per tick
    job = draw(st.floats(0.5, 8.0))
    restart = draw(st.sampled_from([0.0, 0.1, 0.3, 0.5, 1.0]))
    slack = draw(st.floats(0.0, 1.5)) * job
    model = JobModel(job, job + float(np.ceil(restart / gap - 1e-6)) * gap + slack, restart)
    ticks = tick_grid(model, gap).horizon_ticks(model)
    pools = draw(st.integers(1, 3))
    rows = [draw(adversarial_rows(ticks)) for _ in range(pools)]
    prices = None
    if draw(st.booleans()):
        prices = [[draw(st.sampled_from([0.3, 0.97, 2.5])) for _ in range(ticks)] for _ in range(pools)]
    danlu = DanluPolicy(
        cycle_weight=draw(st.floats(0.0, 4.0)), reserve=draw(st.floats(0.0, 20.0)),
        exit_run=draw(st.floats(0.0, 10.0)), line_share=draw(st.floats(0.0, 1.0)),
        prior_up_hours=draw(st.floats(0.01, 1000.0)), prior_down_hours=draw(st.floats(0.01, 1000.0)),
    )
    return trace_of(*rows, gap_seconds=gap * 3600, prices=prices), model, danlu


@settings(max_examples=300, deadline=None)
@given(cases())
def test_no_policy_misses_a_deadline_that_on_demand_could_meet(case):
    trace, model, danlu = case
    policies = [make_policy(name, home_pool=trace.pools[0]) for name in POLICY_NAMES]
    policies += [make_policy("uniform_progress"), make_policy("greedy"), danlu]
    for policy in policies:
        result = simulate(trace, model, policy)
        assert result.deadline_met, (policy, result.finish_hours, model)
        assert result.finish_hours is not None and result.finish_hours <= model.deadline_hours + 1e-9


def test_spot_that_vanishes_after_every_launch_still_finishes_in_time():
    """The adversary of the safety net: each spot run lasts exactly the launch overhead,
    so no spot attempt ever does any work."""
    model = JobModel(6.0, 9.0, 1.0)  # one-hour ticks, one-tick launches
    row = [i % 2 == 0 for i in range(tick_grid(model, 1.0).horizon_ticks(model))]
    for policy in (*(make_policy(n) for n in POLICY_NAMES), DanluPolicy(exit_run=0.0, reserve=0.0)):
        result = simulate(trace_of(row), model, policy)
        assert result.deadline_met, policy
