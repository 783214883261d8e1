"""Forecasts and the hard budget cap, from plain numbers."""

from __future__ import annotations

import pytest

from runtime.accounting.forecast import StopTimings, cap_decision, forecast

from .helpers import HOUR, T0


def test_forecast_adds_remaining_work_to_spend():
    fc = forecast(450.0, 5.0, 65.5, at=T0, overhead_usd=12.0, budget_usd=1000.0, deadline_at=T0 + 4 * HOUR)
    assert fc.remaining_usd == pytest.approx(5.0 * 65.5 + 12.0)
    assert fc.total_usd == pytest.approx(450.0 + 339.5)
    assert fc.budget_fraction == pytest.approx(0.7895)
    assert fc.over_budget_usd == 0.0
    assert fc.expected_end == T0 + 5 * HOUR
    assert fc.deadline_at_risk and fc.slack_hours == pytest.approx(-1.0)


def test_forecast_without_budget_or_deadline():
    fc = forecast(10.0, 0.0, 3.0, at=T0)
    assert fc.total_usd == 10.0 and fc.budget_fraction is None and fc.slack_hours is None
    assert not fc.deadline_at_risk and fc.over_budget_usd == 0.0


def test_forecast_over_budget():
    assert forecast(900.0, 2.0, 100.0, at=T0, budget_usd=1000.0).over_budget_usd == pytest.approx(100.0)


@pytest.mark.parametrize("bad", [{"spent_usd": -1.0}, {"remaining_work_hours": float("nan")},
                                 {"plan_hourly_usd": float("inf")}])
def test_forecast_rejects_bad_figures(bad):
    args = {"spent_usd": 1.0, "remaining_work_hours": 1.0, "plan_hourly_usd": 1.0} | bad
    (name,) = bad
    with pytest.raises(ValueError, match=f"{name}=.* must be a finite number >= 0"):
        forecast(**args)


# budget 5000, burn $60/h, heartbeats 1 min apart, a stop measured at 15 min and a release at 5 min:
# the reserve is 60 * (1/60 + 1/4 + 1/12) = $21, so the stop point is spend $4,979.
MEASURED = {"heartbeat_gap_hours": 1 / 60, "stop_hours": 0.25, "release_hours": 5 / 60, "bound_hours": 1.0}


@pytest.mark.parametrize(
    ("spent", "stop", "headroom", "until"),
    [
        (4900.0, False, 79.0, 79.0 / 60),
        (4978.99, False, 0.01, 0.01 / 60),
        (4979.0, True, 0.0, 0.0),
        (4990.0, True, -11.0, 0.0),
        (5000.0, True, -21.0, 0.0),
        (5100.0, True, -121.0, 0.0),
    ],
)
def test_cap_stops_before_the_budget_leaving_room_for_the_measured_stop(spent, stop, headroom, until):
    d = cap_decision(spent_usd=spent, burn_usd_per_hour=60.0, budget_usd=5000.0, **MEASURED)
    assert d.stop_now is stop and d.measured
    assert d.reserve_usd == pytest.approx(21.0)
    assert d.headroom_usd == pytest.approx(headroom, abs=1e-9)
    assert d.hours_until_stop == pytest.approx(until, abs=1e-9)
    # Not stopping is safe: a stop at the next heartbeat still fits the stop and the release in the budget.
    if not d.stop_now:
        assert spent + 60.0 * (1 / 60 + 0.25 + 5 / 60) <= 5000.0


def test_before_anything_is_measured_the_cap_reserves_the_enforced_bound():
    # Nothing measured: the stop and the release may each take the 10 min bound -> 60 * (1/60 + 2 * 1/6) = $21.
    d = cap_decision(spent_usd=4978.0, burn_usd_per_hour=60.0, budget_usd=5000.0, bound_hours=1 / 6,
                     heartbeat_gap_hours=1 / 60)
    assert not d.measured and (d.stop_hours, d.release_hours) == (1 / 6, 1 / 6)
    assert d.reserve_usd == pytest.approx(21.0) and not d.stop_now
    assert "bound where not yet measured" in cap_decision(
        spent_usd=4980.0, burn_usd_per_hour=60.0, budget_usd=5000.0, bound_hours=1 / 6,
        heartbeat_gap_hours=1 / 60).reason
    # A slow machine: heartbeats measured 6 min apart stop the run $5.00 of spend earlier.
    slow = cap_decision(spent_usd=4975.0, burn_usd_per_hour=60.0, budget_usd=5000.0, bound_hours=1 / 6,
                        heartbeat_gap_hours=0.1)
    assert slow.stop_now and slow.reserve_usd == pytest.approx(26.0)


def test_a_stop_may_first_wait_for_a_save_in_flight():
    # The stop measured 15 min, but a 6 min write may be in flight when the cap asks: $6 more reserve.
    d = cap_decision(spent_usd=4972.0, burn_usd_per_hour=60.0, budget_usd=5000.0, save_write_hours=0.1, **MEASURED)
    assert d.stop_hours == pytest.approx(0.35) and d.reserve_usd == pytest.approx(27.0)
    assert not d.stop_now and cap_decision(spent_usd=4973.0, burn_usd_per_hour=60.0, budget_usd=5000.0,
                                           **MEASURED).stop_now is False  # without the write: $21
    stop = cap_decision(spent_usd=4973.5, burn_usd_per_hour=60.0, budget_usd=5000.0, save_write_hours=0.1,
                        **MEASURED)
    assert stop.stop_now and "the stop (after a save in flight)" in stop.reason
    # Past the shutdown timeout too: the controller waits for a stop's checkpoint while the budget lasts.
    long = cap_decision(spent_usd=0.0, burn_usd_per_hour=60.0, budget_usd=5000.0, save_write_hours=5.0, **MEASURED)
    assert long.stop_hours == pytest.approx(5.25)


def test_an_unmeasured_stop_is_at_least_two_of_the_writes_seen():
    # Nothing measured: a 6 min write in flight and the stop's own 6 min save outlast the 10 min bound.
    args = {"burn_usd_per_hour": 60.0, "budget_usd": 5000.0, "bound_hours": 1 / 6, "heartbeat_gap_hours": 1 / 60}
    d = cap_decision(spent_usd=4978.0, save_write_hours=0.1, **args)
    assert not d.measured and d.stop_hours == pytest.approx(0.2) and d.reserve_usd == pytest.approx(23.0)
    assert d.stop_now and "two 6.0 min checkpoint writes where not yet measured" in d.reason
    # Writes shorter than half the bound leave the bound as it was.
    short = cap_decision(spent_usd=4978.0, save_write_hours=0.05, **args)
    assert short.stop_hours == pytest.approx(1 / 6) and not short.stop_now
    assert "the 10.0 min bound where not yet measured" in cap_decision(spent_usd=4980.0, save_write_hours=0.05,
                                                                       **args).reason


def test_a_stop_that_has_not_checkpointed_in_time_must_release_now():
    # Once one more gap and the release would pass the budget, waiting for the checkpoint breaks the cap.
    args = {"burn_usd_per_hour": 60.0, "budget_usd": 5000.0, **MEASURED}
    assert not cap_decision(spent_usd=4993.99, **args).release_now  # 4993.99 + 6 < 5000
    assert cap_decision(spent_usd=4994.0, **args).release_now
    assert not cap_decision(spent_usd=4979.0, **args).release_now  # the stop just began: there is time


def test_cap_with_nothing_billed():
    d = cap_decision(spent_usd=100.0, burn_usd_per_hour=0.0, budget_usd=200.0, bound_hours=0.5,
                     heartbeat_gap_hours=0.01)
    assert not d.stop_now and d.hours_until_stop is None and d.reason == "nothing is being billed"
    assert cap_decision(spent_usd=200.0, burn_usd_per_hour=0.0, budget_usd=200.0, bound_hours=0.5,
                        heartbeat_gap_hours=0.01).stop_now


def test_cap_reasons_name_the_figures():
    d = cap_decision(spent_usd=4990.0, burn_usd_per_hour=60.0, budget_usd=5000.0, **MEASURED)
    assert "$4,990.00" in d.reason and "$5,000.00" in d.reason and "$60.00/h" in d.reason
    assert "measured" in d.reason


@pytest.mark.parametrize("bad", [{"budget_usd": 0.0}, {"stop_hours": -1.0}, {"heartbeat_gap_hours": float("nan")},
                                 {"save_write_hours": -0.1}])
def test_cap_rejects_bad_figures(bad):
    args = {"spent_usd": 0.0, "burn_usd_per_hour": 1.0, "budget_usd": 1.0, "bound_hours": 0.1,
            "heartbeat_gap_hours": 0.01} | bad
    (name,) = bad
    with pytest.raises(ValueError, match=f"{name}=.* must be"):
        cap_decision(**args)


def test_stop_timings_keep_the_longest_of_each_and_start_unmeasured():
    timings = StopTimings()
    assert (timings.heartbeat_gap_hours, timings.stop_hours, timings.release_hours) == (0.0, None, None)
    for gap, stop, release in ((0.01, 0.2, 0.05), (0.03, 0.1, 0.02), (0.02, 0.15, 0.08)):
        timings.saw_gap(gap)
        timings.saw_stop(stop)
        timings.saw_release(release)
    assert (timings.heartbeat_gap_hours, timings.stop_hours, timings.release_hours) == (0.03, 0.2, 0.08)
