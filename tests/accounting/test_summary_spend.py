"""summary.json shows held capacity at $0 with its hours, and a reserved term's one-time charge."""

from __future__ import annotations

import pytest

from pricing.pool import Pool
from runtime.accounting.ledger import IntervalKey
from runtime.control.run_summary import build_summary
from tests.report.builders import HOUR, T0, SyntheticRun

HELD = Pool(cloud="aws", region="us-east-1", zone=None, instance_type="p4d.24xlarge", gpu="A100",
            gpus_per_node=8, purchase="reserved_held", hourly_usd=0.0)
TERM = Pool(cloud="aws", region="us-west-2", zone=None, instance_type="p4d.24xlarge", gpu="A100",
            gpus_per_node=8, purchase="reserved_1y", hourly_usd=0.0, term_usd=25_000.0, term_hours=8760.0)


def test_summary_lists_held_hours_at_zero_and_the_term_charge(tmp_path):
    run = SyntheticRun(tmp_path)
    run._launch("l-1", HELD, 0.0, start_step=0, nodes=2)
    for node in ("l-1-n0", "l-1-n1"):
        run.ledger.close(IntervalKey("l-1", node), end=T0 + 3 * HOUR, reason="preempted")
    run.state.launches[-1].released_at = T0 + 3 * HOUR
    run.ledger.buy_term(TERM.id, TERM.purchase, term_usd=25_000.0, nodes=1, launch_id="l-2", at=T0 + 3 * HOUR)
    run._launch("l-2", TERM, 3.0, start_step=0, nodes=1)
    run.ledger.close(IntervalKey("l-2", "l-2-n0"), end=T0 + 5 * HOUR, reason="launch ended")
    run.state.launches[-1].released_at = T0 + 5 * HOUR

    summary = build_summary(run.state, run.job, run.ledger, run.store)
    pools = {(p["pool"], p["purchase"]): p for p in summary["pools"]}
    held = pools[(HELD.id, "reserved_held")]
    assert (held["hours"], held["node_hours"], held["cost_usd"], held["charged_usd"]) == (3.0, 6.0, 0.0, 0.0)
    term = pools[(TERM.id, "reserved_1y")]
    assert term["hours"] == pytest.approx(2.0) and term["node_hours"] == pytest.approx(2.0)
    assert (term["cost_usd"], term["charged_usd"]) == (25_000.0, 25_000.0)
    assert summary["cost_usd"] == 25_000.0
    run.close()
