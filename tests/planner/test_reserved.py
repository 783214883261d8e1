"""Reserved capacity: held reservations are used first at zero marginal cost, up to their
count and end date; a new term bought for one job is charged whole."""

from __future__ import annotations

import datetime as dt

import pytest

from planner.errors import PlannerError
from planner.job import parse_job
from pricing.pool import HELD
from planner.quote import make_quote
from pricing.catalog import Catalog, Offering

TODAY = dt.date(2026, 11, 30)
CATALOG = Catalog.of([
    Offering("aws", "us-east-1", None, "p4d.24xlarge", "A100", 8, 40, 96, 1152, 21.96, spot=9.0,
             reserved_1y=13.92),
    Offering("aws", "us-east-1", None, "p5.48xlarge", "H100", 8, 80, 192, 2048, 55.04),
])


def job(tokens, held=(), allow=("on_demand",), **constraints):
    return parse_job({
        "name": "r", "workload": {"model": "gpt-7b", "tokens": tokens},
        "constraints": {"max_nodes": 4, **constraints},
        "purchase": {"allow": list(allow), "held": list(held)},
    })


HELD_2 = {"cloud": "aws", "region": "us-east-1", "instance_type": "p4d.24xlarge", "count": 2, "until": "2027-03-01"}


def test_held_capacity_is_used_first_and_free():
    q = make_quote(job(5e9, [HELD_2]), CATALOG, top=0, frontier_points=0, today=TODAY)
    (phase,) = q.plan.solution.phases
    assert phase.config.purchase == HELD and phase.config.nodes == 2
    assert q.plan.expected_cost_usd == 0


def test_held_capacity_ends_then_on_demand_finishes():
    soon = {**HELD_2, "until": (TODAY + dt.timedelta(days=1)).isoformat()}
    q = make_quote(job(2e10, [soon]), CATALOG, top=0, frontier_points=0, today=TODAY)
    held = [p for p in q.plan.solution.phases if p.config.purchase == HELD]
    assert held and held[0].hours == pytest.approx(24.0)
    assert q.plan.solution.phases[0].config.purchase == HELD  # used first
    assert len(q.plan.solution.phases) == 2 and q.plan.expected_cost_usd > 0


def test_ended_reservation_is_ignored_with_a_warning():
    old = {**HELD_2, "until": "2026-01-01"}
    q = make_quote(job(1e9, [old]), CATALOG, top=0, frontier_points=0, today=TODAY)
    assert all(p.config.purchase != HELD for p in q.plan.solution.phases)
    assert any("ended" in w for w in q.candidates.warnings)


def test_unknown_held_instance_names_the_key():
    bad = {**HELD_2, "instance_type": "p4x.24xlarge"}
    with pytest.raises(PlannerError, match=r"purchase.held\[0\]"):
        make_quote(job(1e9, [bad]), CATALOG, top=0, frontier_points=0, today=TODAY)


def test_new_term_is_charged_whole():
    q = make_quote(job(1e9, allow=("reserved_1y",)), CATALOG, top=0, frontier_points=0, today=TODAY)
    (phase,) = q.plan.solution.phases
    assert phase.config.purchase == "reserved_1y"
    assert q.plan.expected_cost_usd == pytest.approx(13.92 * 8760 * phase.config.nodes)
    assert any(line.label.startswith("reserved terms") for line in q.plan.lines)
    # with on-demand allowed, a one-year term is never worth it for a short job
    q2 = make_quote(job(1e9, allow=("reserved_1y", "on_demand")), CATALOG, top=0, frontier_points=0, today=TODAY)
    assert all(p.config.purchase == "on_demand" for p in q2.plan.solution.phases)
