"""The decision rules, one state at a time (48 h job due at 52 h, d = 0.2 h, 3-minute ticks).

At t = 10 h the uniform-progress line is 48 * 10 / 52 = 9.23 h of work.
"""

from __future__ import annotations

import pytest

from planner.danlu_policy import DanluPolicy
from planner.policy import (
    ON_DEMAND,
    GreedyPolicy,
    OnDemandPolicy,
    PolicyMemory,
    PoolRecord,
    UniformProgressPolicy,
    make_policy,
)
from tests.simulate.helpers import state

SPOT = {"a": 0.97}


def test_ahead_of_the_line_without_spot_waits():
    decision = UniformProgressPolicy().decide(state(work_done_hours=10.0))
    assert decision.target is None and "wait" in decision.reason


def test_behind_the_line_without_spot_goes_on_demand():
    decision = UniformProgressPolicy().decide(state(work_done_hours=9.0))
    assert decision.target == ON_DEMAND and "behind the progress line" in decision.reason


@pytest.mark.parametrize("policy", [UniformProgressPolicy(), DanluPolicy(), GreedyPolicy()])
def test_spot_is_taken_when_available(policy):
    assert policy.decide(state(spot_prices=SPOT)).target == "a"


def test_uniform_progress_leaves_on_demand_only_two_launches_ahead():
    # line at t + 2d = 10.4 h is 9.6 h of work
    on_demand = {"current": ON_DEMAND, "spot_prices": SPOT}
    assert UniformProgressPolicy().decide(state(**on_demand, work_done_hours=9.61)).target == "a"
    stay = UniformProgressPolicy().decide(state(**on_demand, work_done_hours=9.5))
    assert stay.target == ON_DEMAND and "2d ahead" in stay.reason


@pytest.mark.parametrize("policy", [UniformProgressPolicy(), DanluPolicy(), GreedyPolicy()])
def test_last_safe_moment_forces_on_demand_unless_spot_is_running(policy):
    # 8 h of work left, 7 h of time: ceil(8 + d) >= 7
    late = {"elapsed_hours": 45.0, "work_done_hours": 40.0}
    assert policy.decide(state(**late)).target == ON_DEMAND
    assert policy.decide(state(**late, spot_prices=SPOT)).target == ON_DEMAND
    kept = policy.decide(state(**late, spot_prices=SPOT, current="a"))
    assert kept.target == "a" and "keep the running spot" in kept.reason
    in_overhead = policy.decide(state(**late, spot_prices=SPOT, current="a", overhead_left_hours=0.1))
    assert in_overhead.target == ON_DEMAND


@pytest.mark.parametrize("policy", [UniformProgressPolicy(), DanluPolicy()])
def test_two_launch_safety_net_applies_only_off_spot(policy):
    # 8 h of work left, 8.3 h of time: 8 + d fits, 8 + 2d does not
    tight = {"elapsed_hours": 43.7, "work_done_hours": 40.0, "spot_prices": SPOT}
    assert policy.decide(state(**tight)).target == ON_DEMAND
    assert policy.decide(state(**tight, current=ON_DEMAND)).target == ON_DEMAND
    assert policy.decide(state(**tight, current="a")).target == "a"


def test_greedy_waits_when_behind_and_stays_on_demand():
    assert GreedyPolicy().decide(state(work_done_hours=8.0)).target is None
    assert GreedyPolicy().decide(state(current=ON_DEMAND, spot_prices=SPOT)).target == ON_DEMAND


def test_free_launches_take_spot_even_at_the_deadline():
    decision = UniformProgressPolicy().decide(
        state(elapsed_hours=45.0, work_done_hours=40.0, restart_hours=0.0, spot_prices=SPOT)
    )
    assert decision.target == "a"


def test_pinned_policies_ignore_other_pools():
    decision = UniformProgressPolicy(home_pool="a").decide(state(work_done_hours=9.0, spot_prices={"b": 0.5}))
    assert decision.target == ON_DEMAND
    assert UniformProgressPolicy().decide(state(work_done_hours=9.0, spot_prices={"b": 0.5})).target == "b"


def test_danlu_moves_to_another_pool_after_a_preemption():
    decision = DanluPolicy().decide(state(preempted="a", spot_prices={"b": 0.97, "c": 0.9}))
    assert decision.target == "c"  # the cheapest


def test_danlu_stays_on_its_pool_rather_than_pay_a_launch():
    assert DanluPolicy().decide(state(current="a", spot_prices={"a": 0.97, "b": 0.5})).target == "a"


def test_decisions_are_pure_functions_of_the_state():
    memory = PolicyMemory({"b": PoolRecord(True, 2.0)}, PoolRecord(True, 2.0))
    s = state(spot_prices={"b": 0.97}, memory=memory)
    for policy in (DanluPolicy(), UniformProgressPolicy(), GreedyPolicy(), OnDemandPolicy()):
        assert policy.decide(s) == policy.decide(s)
    assert s.memory == memory


def test_finished_jobs_release_the_instance():
    for name in ("on_demand", "greedy", "uniform_progress", "danlu"):
        decision = make_policy(name).decide(state(work_done_hours=48.0, current=ON_DEMAND))
        assert decision.target is None and decision.reason == "job complete"


def test_unknown_policy_names_the_choices():
    with pytest.raises(ValueError, match="choose one of on_demand, greedy, uniform_progress, danlu"):
        make_policy("optimal")
