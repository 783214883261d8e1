"""danlu's rules, one state at a time, and the memory it learns from (48 h job due at 52 h,
d = 0.2 h, 3-minute ticks; see tests/simulate/helpers.py)."""

from __future__ import annotations

import json

import pytest

from planner.danlu_policy import DanluPolicy
from planner.policy import ON_DEMAND, PolicyMemory, PoolRecord
from tests.simulate.helpers import state

# four 2-hour runs and outages of 0.5 h: spot 80 % of the time
PLENTY = PoolRecord(False, 9.9, up_hours=8.0, down_hours=2.0, runs_ended=4, outages_ended=4)
# four 0.3-hour runs and 3-hour outages: 9 %
SCARCE = PoolRecord(False, 9.9, up_hours=1.2, down_hours=12.0, runs_ended=4, outages_ended=4)


def _memory(record: PoolRecord, pool: str = "a") -> PolicyMemory:
    return PolicyMemory({pool: record}, record)


def test_need_is_the_switching_reserve_where_spot_is_plentiful_and_ups_line_where_it_is_scarce():
    policy = DanluPolicy(cycle_weight=1.0, reserve=10.0, line_share=0.0, scarce=0.2, plenty=0.5,
                         prior_up_hours=1.0, prior_down_hours=1.0)
    s = state(elapsed_hours=10.0, work_done_hours=5.0)
    up, down = PLENTY.mean_up_hours(10.0, 1.0), PLENTY.mean_down_hours(10.0, 1.0)
    assert (up, down) == (pytest.approx(1.8), pytest.approx(0.62))  # (8 + 1) / 5 and (2 + 0.1 + 1) / 5
    switching = 2 * 0.2 * 42.0 / (up + down) + 10.0 * 0.2
    assert policy._need(s, up, down) == pytest.approx(switching)
    up, down = SCARCE.mean_up_hours(10.0, 1.0), SCARCE.mean_down_hours(10.0, 1.0)
    line = 42.0 * 4.0 / 52.0  # Uniform Progress keeps (D - C) / D of the time left as slack
    assert policy._need(s, up, down) == pytest.approx(max(2 * 0.2 * 42.0 / (up + down) + 2.0, line))


def test_it_waits_for_spot_where_spot_has_been_plentiful_and_pays_on_demand_where_scarce():
    # 48 h due at 70 h, at 10 h with 8 h done: 20 h of slack
    loose = {"elapsed_hours": 10.0, "work_done_hours": 8.0, "deadline_hours": 70.0}
    waited = DanluPolicy().decide(state(**loose, memory=_memory(PLENTY)))
    assert waited.target is None and "wait" in waited.reason
    tight = {"elapsed_hours": 10.0, "work_done_hours": 9.0}  # 52 h deadline: 3 h of slack
    paid = DanluPolicy().decide(state(**tight, memory=_memory(SCARCE)))
    assert paid.target == ON_DEMAND and "on-demand" in paid.reason


def test_it_leaves_on_demand_when_spot_runs_pay_for_two_launches():
    on_demand = {"current": ON_DEMAND, "spot_prices": {"a": 0.97}, "work_done_hours": 9.5}
    long_runs = PoolRecord(False, 9.9, up_hours=8.0, down_hours=8.0, runs_ended=4, outages_ended=4)
    flickers = PoolRecord(False, 9.9, up_hours=0.4, down_hours=8.0, runs_ended=8, outages_ended=8)
    assert DanluPolicy(exit_run=2.0).decide(state(**on_demand, memory=_memory(long_runs))).target == "a"
    stay = DanluPolicy(exit_run=2.0).decide(state(**on_demand, memory=_memory(flickers)))
    assert stay.target == ON_DEMAND and "spot runs" in stay.reason


def test_it_stays_on_demand_while_no_spot_is_up():
    decision = DanluPolicy().decide(state(current=ON_DEMAND, work_done_hours=12.0))
    assert decision.target == ON_DEMAND


def test_pools_are_ranked_per_useful_hour_then_by_how_long_they_have_been_up():
    memory = PolicyMemory({
        "short": PoolRecord(True, 9.0, up_hours=0.9, runs_ended=3),   # runs of 0.5 h: pays 1.67x per useful hour
        "long": PoolRecord(True, 9.5, up_hours=20.0, runs_ended=3),   # runs of 5 h: 1.04x
    }, PoolRecord(True, 9.0))
    prices = {"short": 0.9, "long": 1.0}
    assert DanluPolicy().decide(state(spot_prices=prices, memory=memory)).target == "long"
    tied = PolicyMemory({"b": PoolRecord(True, 5.0), "c": PoolRecord(True, 9.0)}, PoolRecord(True, 5.0))
    # at one price, the pool up since 5.0 h (a 5-hour run so far) beats the one up since 9.0 h
    assert DanluPolicy().decide(state(spot_prices={"b": 0.97, "c": 0.97}, memory=tied)).target == "b"


def test_memory_counts_runs_and_outages_as_it_sees_them():
    memory = PolicyMemory()
    for hour, up in ((0.0, {"a": 1.0}), (2.0, {}), (3.0, {"a": 1.0, "b": 1.0}), (3.5, {"b": 1.0})):
        memory = memory.observe(hour, up)
    a, b, union = memory.pools["a"], memory.pools["b"], memory.union
    assert (a.up, a.since, a.up_hours, a.down_hours, a.runs_ended, a.outages_ended) == (False, 3.5, 2.5, 1.0, 2, 1)
    assert (b.up, b.since, b.runs_ended) == (True, 3.0, 0)
    assert (union.up, union.up_hours, union.down_hours, union.runs_ended) == (True, 2.0, 1.0, 1)
    assert memory.pool_up_since == {"b": 3.0}
    assert memory.observe(4.0, {}, preempted="z").pools["z"] == PoolRecord(False, 4.0)


def test_memory_round_trips_through_json_and_reads_the_old_format():
    memory = PolicyMemory().observe(0.0, {"us-east-1a": 1.0}).observe(1.5, {})
    assert PolicyMemory.from_dict(json.loads(json.dumps(memory.to_dict()))) == memory
    old = PolicyMemory.from_dict({"pool_up_since": {"us-east-1a": 1.5}})
    assert old.pools == {"us-east-1a": PoolRecord(True, 1.5)}
    with pytest.raises(TypeError, match="'pool_up_since' must be a mapping"):
        PolicyMemory.from_dict({"pool_up_since": 3})
    with pytest.raises(TypeError, match="a pool record is a list of 6 values"):
        PolicyMemory.from_dict({"pools": {"a": [True]}})


def test_the_planners_interruption_rates_are_the_prior_of_pools_not_seen_yet():
    # two pools at one price: the one the planner expects to run 10 h between interruptions
    # wins over the one expected to run 0.25 h, before either has been seen to end a run
    s = state(spot_prices={"risky": 0.97, "steady": 0.97}, interruption_rates={"risky": 4.0, "steady": 0.1})
    assert DanluPolicy().decide(s).target == "steady"
    assert DanluPolicy()._prior_up(s, "risky") == pytest.approx(0.25)
    assert DanluPolicy()._prior_up(s, "unknown") == DanluPolicy().prior_up_hours
