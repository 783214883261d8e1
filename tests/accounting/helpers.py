"""Shared figures for the accounting tests: a fixed clock origin and two pools."""

from __future__ import annotations

from pathlib import Path

from runtime.accounting.alerts import Alert, AlertPolicy, AlertsConfig
from runtime.accounting.forecast import forecast
from runtime.accounting.ledger import IntervalKey, Ledger

T0 = 1_796_000_000.0  # 2026-11-30 00:53:20 UTC
HOUR = 3600.0
SPOT = "aws:us-east-1:p4d.24xlarge"
ON_DEMAND = "aws:us-west-2:p4d.24xlarge"


def two_launch_ledger(run_dir: Path) -> Ledger:
    """Launch 1: 2 spot nodes at $11.20 for 10 h (preempted) = $224.00.
    Launch 2: 2 on-demand nodes at $32.77 from 10.5 h, heartbeat at 14 h = $229.39."""
    ledger = Ledger(run_dir)
    ledger.record(IntervalKey("launch-1", "*"), pool=SPOT, purchase="spot", hourly_usd=11.2, nodes=2,
                  start=T0, end=T0 + 10 * HOUR, reason="preempted")
    key = IntervalKey("launch-2", "*")
    ledger.open_interval(key, pool=ON_DEMAND, purchase="on_demand", hourly_usd=32.77, nodes=2,
                         start=T0 + 10.5 * HOUR, reason="replan")
    ledger.extend(key, T0 + 14 * HOUR)
    return ledger


def budget_stop_alert(run_dir: Path) -> Alert:
    """The final alert of a run stopped at its budget cap, with 5 h of work left."""
    ledger = two_launch_ledger(run_dir)
    snapshot = ledger.snapshot(now=T0 + 14 * HOUR)
    ledger.disconnect()
    fc = forecast(snapshot.total_usd, 5.0, 65.54, at=T0 + 14 * HOUR, budget_usd=600.0,
                  deadline_at=T0 + 18 * HOUR)
    from runtime.accounting.alerts import RunEnded, RunOutcome

    policy = AlertPolicy(AlertsConfig(email=("ml-team@example.com",)), run_name="gpt-7b", budget_usd=600.0)
    (alert,) = [a for a in policy.evaluate(snapshot, fc, [RunEnded(RunOutcome.BUDGET_CAP, "checkpoint step 1200")])
                if a.key == "run-ended"]
    return alert
