"""Forecasts and the hard budget cap, from plain numbers."""

from __future__ import annotations

import pytest

from runtime.accounting.forecast import cap_decision, forecast

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


# budget 5000, burn $60/h, 15 min checkpoint, 5 min shutdown, checks every minute:
# the reserve is 60 * (1/60 + 1/4 + 1/12) = $21, so the stop point is spend $4,979.
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
def test_cap_stops_before_the_budget_leaving_room_for_a_checkpoint(spent, stop, headroom, until):
    d = cap_decision(spent_usd=spent, burn_usd_per_hour=60.0, checkpoint_hours=0.25, budget_usd=5000.0,
                     shutdown_hours=5 / 60, check_interval_hours=1 / 60)
    assert d.stop_now is stop
    assert d.reserve_usd == pytest.approx(21.0)
    assert d.headroom_usd == pytest.approx(headroom, abs=1e-9)
    assert d.hours_until_stop == pytest.approx(until, abs=1e-9)
    # Not stopping is safe: a stop at the next check still fits checkpoint and shutdown in the budget.
    if not d.stop_now:
        assert spent + 60.0 * (1 / 60 + 0.25 + 5 / 60) <= 5000.0


def test_cap_with_nothing_billed():
    d = cap_decision(spent_usd=100.0, burn_usd_per_hour=0.0, checkpoint_hours=0.5, budget_usd=200.0)
    assert not d.stop_now and d.hours_until_stop is None and d.reason == "nothing is being billed"
    assert cap_decision(spent_usd=200.0, burn_usd_per_hour=0.0, checkpoint_hours=0.5, budget_usd=200.0).stop_now


def test_cap_reasons_name_the_figures():
    d = cap_decision(spent_usd=4990.0, burn_usd_per_hour=60.0, checkpoint_hours=0.25, budget_usd=5000.0)
    assert "$4,990.00" in d.reason and "$5,000.00" in d.reason and "$60.00/h" in d.reason


def test_cap_rejects_a_zero_budget():
    with pytest.raises(ValueError, match="budget_usd=0.0 must be positive"):
        cap_decision(spent_usd=0.0, burn_usd_per_hour=1.0, checkpoint_hours=0.1, budget_usd=0.0)
