"""Which alerts fire, each once per threshold and kind, across a resumed controller."""

from __future__ import annotations

import logging

import pytest

from runtime.accounting.alert_email import body_lines
from runtime.accounting.alerts import (
    AlertConfigError,
    AlertKind,
    AlertPolicy,
    AlertsConfig,
    LatePlan,
    Replanned,
    RunEnded,
    RunOutcome,
    dispatch,
)
from runtime.accounting.forecast import forecast
from runtime.accounting.ledger import IntervalKey, Ledger

from .helpers import HOUR, SPOT, T0

BUDGET = 1000.0


class RecordingSink:
    """Stands in for the Mailer: keeps alerts; ``accept`` / ``explode`` inject failures."""

    def __init__(self, accept: bool = True, explode: bool = False):
        self.accept, self.explode = accept, explode
        self.alerts = []

    def send(self, alert) -> bool:
        if self.explode:
            raise OSError("disk full")
        if self.accept:
            self.alerts.append(alert)
        return self.accept


def policy(**config) -> AlertPolicy:
    return AlertPolicy(AlertsConfig(email=("ml-team@example.com",), **config), run_name="gpt-7b",
                       budget_usd=BUDGET)


def spend(ledger: Ledger, hours: float, hourly: float = 100.0) -> None:
    """One spot node at ``hourly`` since T0, billed until T0 + hours."""
    key = IntervalKey("launch-1", "i-1")
    ledger.open_interval(key, pool=SPOT, purchase="spot", hourly_usd=hourly, start=T0)
    ledger.extend(key, T0 + hours * HOUR)


def test_actual_thresholds_fire_once_each_as_spend_grows(tmp_path):
    ledger, sink, pol = Ledger(tmp_path), RecordingSink(), policy()
    fired = []
    for hours in [1, 4.9, 5.0, 6, 7, 8.5, 9.99, 10.0, 11, 12]:
        spend(ledger, hours)
        fired.append([a.key for a in dispatch(pol, ledger, sink, now=T0 + hours * HOUR)])
    assert fired == [[], [], ["actual-0.5"], [], [], ["actual-0.8"], [], ["actual-1"], [], []]
    first = sink.alerts[0]
    assert first.kind is AlertKind.ACTUAL and first.threshold == 0.5
    assert first.spent_usd == pytest.approx(500.0)
    assert first.headline == "spend $500.00 reached 50% of the $1,000.00 budget"


def test_thresholds_crossed_together_send_one_alert_that_covers_them(tmp_path):
    ledger, sink = Ledger(tmp_path), RecordingSink()
    spend(ledger, 9.0)
    (alert,) = dispatch(policy(), ledger, sink, now=T0 + 9 * HOUR)
    assert alert.key == "actual-0.8" and alert.covers == ("actual-0.5", "actual-0.8")
    assert ledger.sent_alerts() == {"actual-0.5", "actual-0.8"}


def test_forecast_thresholds_and_a_resumed_controller(tmp_path):
    ledger, sink = Ledger(tmp_path), RecordingSink()
    spend(ledger, 1.0)
    fc = forecast(100.0, 7.5, 100.0, at=T0 + HOUR, budget_usd=BUDGET)  # total $850
    assert [a.key for a in dispatch(policy(), ledger, sink, fc, now=T0 + HOUR)] == ["forecast-0.8"]
    assert sink.alerts[0].headline == "forecast spend $850.00 is 85% of the $1,000.00 budget (threshold 80%)"
    ledger.disconnect()

    # SIGKILL, resume: new objects over the same run directory send nothing old again.
    ledger, sink = Ledger(tmp_path), RecordingSink()
    assert dispatch(policy(), ledger, sink, fc, now=T0 + HOUR) == []
    spend(ledger, 5.0)
    fc = forecast(500.0, 6.0, 100.0, at=T0 + 5 * HOUR, budget_usd=BUDGET)  # total $1,100
    assert [a.key for a in dispatch(policy(), ledger, sink, fc, now=T0 + 5 * HOUR)] == ["actual-0.5",
                                                                                         "forecast-1"]


def test_replan_alerts_only_when_the_expected_cost_rises(tmp_path):
    ledger, sink, pol = Ledger(tmp_path), RecordingSink(), policy()
    events = [Replanned("1", 800.0, 790.0), Replanned("2", 800.0, 805.0), Replanned("3", 800.0, 920.0, "spot lost")]
    (alert,) = dispatch(pol, ledger, sink, events=events, now=T0)
    assert alert.key == "replan-3" and alert.kind is AlertKind.REPLAN_COST_UP
    assert alert.headline == "a re-plan raised the expected cost by $120.00: $800.00 -> $920.00"
    assert dispatch(pol, ledger, sink, events=[Replanned("3", 800.0, 920.0)], now=T0) == []


def test_deadline_at_risk_fires_once(tmp_path):
    ledger, sink, pol = Ledger(tmp_path), RecordingSink(), policy()
    late = forecast(0.0, 10.0, 1.0, at=T0, budget_usd=BUDGET, deadline_at=T0 + 8 * HOUR)
    (alert,) = dispatch(pol, ledger, sink, late, now=T0)
    assert alert.key == "deadline-at-risk"
    assert alert.headline == "the deadline is at risk: the work is expected to finish 2.0 h late"
    assert dispatch(pol, ledger, sink, late, now=T0 + HOUR) == []


def test_run_end_alert_once_and_no_deadline_alert_with_it(tmp_path):
    ledger, sink, pol = Ledger(tmp_path), RecordingSink(), policy()
    late = forecast(0.0, 10.0, 1.0, at=T0, budget_usd=BUDGET, deadline_at=T0 + 8 * HOUR)
    ended = RunEnded(RunOutcome.BUDGET_CAP, "checkpoint step 1200")
    (alert,) = dispatch(pol, ledger, sink, late, [ended], now=T0)
    assert alert.key == "run-ended" and alert.ended == ended
    assert alert.headline == "the run was checkpointed and stopped before exceeding its budget"
    assert dispatch(pol, ledger, sink, late, [ended], now=T0) == []


def test_no_budget_means_no_threshold_alerts(tmp_path):
    ledger, sink = Ledger(tmp_path), RecordingSink()
    spend(ledger, 100.0)
    pol = AlertPolicy(AlertsConfig(), run_name="r", budget_usd=None)
    keys = [a.key for a in dispatch(pol, ledger, sink, events=[RunEnded("completed")], now=T0 + 100 * HOUR)]
    assert keys == ["run-ended"]


def test_an_alert_that_could_not_be_stored_is_tried_again(tmp_path):
    ledger = Ledger(tmp_path)
    spend(ledger, 6.0)
    assert dispatch(policy(), ledger, RecordingSink(accept=False), now=T0 + 6 * HOUR) == []
    assert ledger.sent_alerts() == frozenset()
    assert [a.key for a in dispatch(policy(), ledger, RecordingSink(), now=T0 + 6 * HOUR)] == ["actual-0.5"]


def test_dispatch_logs_and_swallows_failures(tmp_path, caplog):
    ledger = Ledger(tmp_path)
    spend(ledger, 6.0)
    with caplog.at_level(logging.ERROR, logger="runtime.accounting.alerts"):
        assert dispatch(policy(), ledger, RecordingSink(explode=True), now=T0 + 6 * HOUR) == []
    assert "could not send or record alert actual-0.5" in caplog.text
    ledger.disconnect()
    with caplog.at_level(logging.ERROR, logger="runtime.accounting.alerts"):
        assert dispatch(policy(), ledger, RecordingSink(), now=T0) == []  # closed ledger
    assert "could not evaluate the alert policy" in caplog.text


def test_config_defaults_and_normalisation():
    config = AlertsConfig.from_mapping({"email": "a@example.com", "thresholds": [1.0, 0.5, 0.5, 1.2]})
    assert config.email == ("a@example.com",)
    assert config.thresholds == (0.5, 1.0, 1.2)
    assert AlertsConfig().thresholds == (0.5, 0.8, 1.0) and AlertsConfig().smtp_url is None


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"email": ["ops"]}, r"\[alerts\]\.email: .* must be a list of addresses"),
        ({"email": ["a@b.c"], "thresholds": [0.5, -1]}, r"\[alerts\]\.thresholds: .*in \(0, 10\]"),
        ({"email": ["a@b.c"], "thresholds": []}, r"\[alerts\]\.thresholds"),
        ({"email": ["a@b.c"], "smtp_url": "http://mail"}, r"scheme 'http' is not supported; use smtp://"),
        ({"email": ["a@b.c"], "smtp_url": "smtp://"}, r"has no host"),
        ({"smtp_url": "smtp://mail:25"}, r"no recipient; add at least one address"),
        ({"email": ["a@b.c"], "smtpurl": "smtp://x"}, r"\[alerts\]\.smtpurl: unknown key"),
    ],
)
def test_config_errors_name_the_file_and_key(table, message):
    with pytest.raises(AlertConfigError, match=r"(?s)^jobs/a\.toml: invalid \[alerts\] table.*" + message):
        AlertsConfig.from_mapping(table, source="jobs/a.toml")


def test_credentials_in_the_url_are_refused_without_echoing_them():
    with pytest.raises(AlertConfigError) as info:
        AlertsConfig(email=("a@b.c",), smtp_url="smtp://bob:hunter2@mail:25")
    assert "DANLU_SMTP_USER and DANLU_SMTP_PASSWORD" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_policy_needs_a_positive_budget():
    with pytest.raises(AlertConfigError, match=r"budget_usd=0 must be positive.*\[constraints\]\.budget_usd"):
        AlertPolicy(AlertsConfig(), run_name="r", budget_usd=0)


def test_a_term_bought_at_provisioning_counts_towards_the_thresholds(tmp_path):
    ledger, sink = Ledger(tmp_path), RecordingSink()
    ledger.buy_term(SPOT, "reserved_1y", term_usd=450.0, nodes=2, launch_id="launch-1", at=T0)
    assert [a.key for a in dispatch(policy(), ledger, sink, now=T0)] == ["actual-0.8"]
    assert sink.alerts[0].spent_usd == pytest.approx(900.0)


def test_going_on_with_a_late_plan_alerts_once_with_the_expected_end_and_the_deadline(tmp_path):
    ledger, sink, pol = Ledger(tmp_path), RecordingSink(), policy()
    fc = forecast(0.0, 10.0, 1.0, at=T0, budget_usd=BUDGET, deadline_at=T0 + 8 * HOUR)
    late = LatePlan(expected_end=T0 + 10 * HOUR, deadline_at=T0 + 8 * HOUR, reason="no pool meets the deadline")
    (alert,) = dispatch(pol, ledger, sink, fc, [late], now=T0)  # settles deadline-at-risk too: one email
    assert alert.key == "deadline-missed" and alert.kind is AlertKind.DEADLINE_MISSED and alert.late == late
    assert alert.headline == ("the deadline will be missed: the plan ends 2026-11-30 10:53 UTC, "
                              "2.0 h after the deadline 2026-11-30 08:53 UTC")
    row = ("Plan ends", ("2026-11-30 10:53 UTC (2.0 h after the deadline 2026-11-30 08:53 UTC): "
                         "no pool meets the deadline"))
    assert row in body_lines(alert)
    # A later late re-plan, or the same one after a resume, sends nothing more.
    later = LatePlan(expected_end=T0 + 12 * HOUR, deadline_at=T0 + 8 * HOUR)
    assert dispatch(pol, ledger, sink, fc, [later], now=T0 + HOUR) == []
    assert dispatch(pol, Ledger(tmp_path), sink, fc, [late], now=T0 + HOUR) == []
