"""End to end: a run's spend grows, it is re-planned, its controller is killed and resumed,
and it stops at the hard cap.  A real SMTP server receives each alert exactly once."""

from __future__ import annotations

import re
import time

import pytest

from runtime.accounting.alerts import (
    AlertPolicy,
    AlertsConfig,
    Replanned,
    RunEnded,
    RunOutcome,
    dispatch,
)
from runtime.accounting.forecast import cap_decision, forecast
from runtime.accounting.ledger import IntervalKey, Ledger
from runtime.accounting.mailer import Mailer

from .helpers import HOUR, ON_DEMAND, SPOT, T0

BUDGET = 1000.0
WORK_HOURS = 12.0  # the job needs 12 h at $100/h: it cannot finish inside $1,000
CHECKPOINT_H, SHUTDOWN_H, CHECK_H = 0.25, 5 / 60, 1 / 60


class Controller:
    """The calls a controller makes, against real library objects over one run directory."""

    def __init__(self, run_dir, port):
        config = AlertsConfig(email=("ml-team@example.com",), smtp_url=f"smtp://127.0.0.1:{port}")
        self.ledger = Ledger(run_dir)
        self.mailer = Mailer(config, run_dir / "outbox", env={}, retry_initial_s=0.1)
        self.policy = AlertPolicy(config, run_name="gpt-7b", budget_usd=BUDGET, run_dir=str(run_dir))

    def tick(self, hours, events=(), remaining_hours=None):
        now = T0 + hours * HOUR
        for iv in self.ledger.open_intervals():
            self.ledger.extend(iv.key, now)
        spent = self.ledger.total_usd()
        left = WORK_HOURS - hours if remaining_hours is None else remaining_hours
        fc = forecast(spent, left, 100.0, at=now, budget_usd=BUDGET, deadline_at=T0 + 20 * HOUR)
        return [a.key for a in dispatch(self.policy, self.ledger, self.mailer, fc, events, now=now)], fc

    def stop(self):
        self.mailer.close()
        self.ledger.disconnect()


def test_each_alert_arrives_exactly_once_with_its_figures(tmp_path, smtp_servers):
    server, inbox = smtp_servers.start()
    run = Controller(tmp_path, server.port)
    spot, od = IntervalKey("launch-1", "*"), IntervalKey("launch-2", "*")
    run.ledger.open_interval(spot, pool=SPOT, purchase="spot", hourly_usd=50.0, nodes=2, start=T0)
    sent = [run.tick(0.0, remaining_hours=8.5)[0]]  # plan: $850 forecast
    sent.append(run.tick(2.0, remaining_hours=6.5)[0])
    run.ledger.close(spot, end=T0 + 3 * HOUR, reason="preempted")
    run.ledger.open_interval(od, pool=ON_DEMAND, purchase="on_demand", hourly_usd=100.0, start=T0 + 3 * HOUR,
                             reason="replan")
    sent.append(run.tick(3.0, [Replanned("1", 850.0, 1200.0, "spot capacity lost")])[0])
    sent.append(run.tick(5.0)[0])
    run.stop()  # SIGKILL: nothing more is said to the library by this controller

    run = Controller(tmp_path, server.port)  # --resume
    run.ledger.open_interval(od, pool=ON_DEMAND, purchase="on_demand", hourly_usd=100.0, start=T0 + 3 * HOUR,
                             reason="replan")  # replayed
    sent.append(run.tick(5.0)[0])
    sent.append(run.tick(8.0)[0])
    hours = 9.5
    while True:  # the hard cap, checked every minute
        _, fc = run.tick(hours)
        decision = cap_decision(spent_usd=fc.spent_usd, burn_usd_per_hour=100.0, budget_usd=BUDGET,
                                bound_hours=SHUTDOWN_H, heartbeat_gap_hours=CHECK_H, stop_hours=CHECKPOINT_H,
                                release_hours=SHUTDOWN_H)
        if decision.stop_now:
            break
        hours += CHECK_H
    run.ledger.close(od, end=T0 + (hours + CHECKPOINT_H + SHUTDOWN_H) * HOUR, reason="budget_cap")
    final_spent = run.ledger.total_usd()
    assert final_spent <= BUDGET
    ended = RunEnded(RunOutcome.BUDGET_CAP, "checkpoint committed")
    sent.append(run.tick(hours + CHECKPOINT_H + SHUTDOWN_H, [ended], remaining_hours=WORK_HOURS - hours)[0])
    assert run.mailer.flush(timeout_s=10) == 0

    assert sent == [["forecast-0.8"], [], ["replan-1", "forecast-1"], ["actual-0.5"], [], ["actual-0.8"],
                    ["run-ended"]]
    received = inbox.wait_for(6)
    time.sleep(0.3)
    run.stop()
    assert sorted(inbox.keys()) == sorted(k for keys in sent for k in keys)
    by_key = {r.message["X-Danlu-Alert"]: r.message for r in received}

    for key, spent in [("forecast-0.8", 0.0), ("actual-0.5", 500.0), ("actual-0.8", 800.0)]:
        msg = by_key[key]
        assert float(msg["X-Danlu-Spent-USD"]) == pytest.approx(spent)
        text, html = msg.get_body(("plain",)).get_content(), msg.get_body(("html",)).get_content()
        assert f"${spent:,.2f} ({spent / BUDGET:.1%} of $1,000.00)" in text
        assert f"${spent:,.2f} ({spent / BUDGET:.1%} of $1,000.00)" in html
        assert [p.get_content_type() for p in msg.walk()][-1] == "image/png"
    assert "Forecast total: $850.00 (85.0% of budget)" in by_key["forecast-0.8"].get_body(("plain",)).get_content()
    replan = by_key["replan-1"].get_body(("plain",)).get_content()
    assert re.search(r"Re-plan: +\$850\.00 -> \$1,200\.00 \(spot capacity lost\)", replan)

    final = by_key["run-ended"].get_body(("plain",)).get_content()
    left = WORK_HOURS - hours
    assert float(by_key["run-ended"]["X-Danlu-Spent-USD"]) == pytest.approx(final_spent, abs=0.005)
    assert re.search(rf"Cost to finish: +\${100 * left:,.2f} more for the {left:,.1f} h of work left, "
                     rf"\${final_spent + 100 * left:,.2f} in total", final)
    # The command that finishes the run, for a reader who has only the email.
    total = final_spent + 100 * left
    finish = re.search(rf"To finish: +`planner run --resume {re.escape(str(tmp_path))} --budget-usd ([0-9.]+)`: "
                       rf"the run goes on from its last checkpoint \(the work left needs \${total:,.2f} in all, "
                       rf"\${total - BUDGET:,.2f} more than the budget\)", final)
    assert finish is not None, final
    # Room for the cap's reserve on top of the forecast, rounded up to two significant figures.
    assert 1.1 * total <= float(finish[1]) < 1.1 * total * 1.1
