"""[objective] tolerance: the simplest plan within a stated fraction of the optimum."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.job import parse_job
from planner.plan import simplicity
from planner.quote import make_quote
from planner.report import quote_json
from pricing.catalog import Catalog, Offering
from pricing.embedded_catalog import load_embedded_catalog

from .test_optimality import jobs

A100 = Offering("aws", "us-east-1", None, "p4d.24xlarge", "A100", 8, 40, 96, 1152, 21.96)


def held_out(tolerance: float | None) -> dict:
    """A deadline between 3 nodes' time and 2 nodes': the optimum splits the job between them."""
    raw = {"name": "held-out", "workload": {"model": "gpt-7b", "tokens": 3.0e9, "throughput": {"A100": 3679},
                                           "scaling": {"efficiency_per_doubling": 0.95}},
           "constraints": {"max_nodes": 3, "deadline_hours": 15}, "purchase": {"allow": ["on_demand"]}}
    if tolerance is not None:
        raw["objective"] = {"tolerance": tolerance}
    return raw


def quote(raw: dict, top: int = 2):
    return make_quote(parse_job(raw), Catalog.of([A100], origin="test"), top=top, frontier_points=0)


def test_exact_optimum_is_two_phases_and_a_tolerance_accepts_one():
    exact = quote(held_out(0.0))
    assert exact.exact is None and len(exact.plan.solution.phases) == 2
    optimum = exact.plan.expected_cost_usd
    one = quote(held_out(0.01))
    assert [p.config.nodes for p in one.plan.solution.phases] == [3]
    assert optimum < one.plan.expected_cost_usd <= optimum * 1.01
    # the exact optimum is shown as the first alternative, and in --json
    assert one.exact.expected_cost_usd == pytest.approx(optimum)
    assert one.alternatives[0] is one.exact and "exact optimum" in one.exact.note
    data = quote_json(one)
    assert data["exact_optimum"]["expected_cost_usd"] == round(optimum, 2)
    assert data["tolerance"] == 0.01
    assert one.runner_up is not one.exact


def test_default_tolerance_prefers_fewer_nodes_when_no_single_phase_is_close_enough():
    default = quote(held_out(None))  # 0.5%: one phase would cost 0.65% more than the optimum
    assert parse_job(held_out(None)).objective.tolerance == 0.005
    exact = quote(held_out(0.0)).plan
    plan = default.plan
    assert len(plan.solution.phases) == 2
    assert simplicity(plan.solution) < simplicity(exact.solution)  # fewer nodes in all
    assert plan.expected_cost_usd <= exact.expected_cost_usd * 1.005


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs(purchases=("spot", "on_demand")), objective=st.sampled_from(["cost", "time"]))
def test_tolerance_never_returns_a_plan_more_than_the_tolerance_above_the_optimum(job, objective):
    q = make_quote(job, load_embedded_catalog(), top=0, frontier_points=0, objective=objective)
    if q.plan is None:
        return
    tol = job.objective.tolerance
    if q.exact is None:  # the optimum itself was the simplest
        return
    assert tol > 0
    measure = (lambda v: v.expected_cost_usd) if objective == "cost" else (lambda v: v.expected_hours)
    assert measure(q.plan) <= measure(q.exact) * (1 + tol) * (1 + 1e-9)
    assert simplicity(q.plan.solution) < simplicity(q.exact.solution)
    c = job.constraints
    assert c.deadline_hours is None or q.plan.p90_hours <= c.deadline_hours * (1 + 1e-6)
    assert c.budget_usd is None or q.plan.expected_cost_usd <= c.budget_usd * (1 + 1e-6)


def test_tolerance_bound_on_a_grid_of_near_tied_plans():
    """Deadlines across the band where the optimum mixes node counts (and spot with on-demand):
    where a simpler plan is accepted it is never more than the tolerance above the optimum, and
    it is simpler; the grid must contain such cases (so the bound is really exercised)."""
    spot_a100 = Offering("aws", "us-east-1", "use1-az1", "p4d.24xlarge", "A100", 8, 40, 96, 1152, 21.96, spot=9.5)
    catalog = Catalog.of([A100, spot_a100], origin="test")
    simplified = 0
    for allow in (["on_demand"], ["spot", "on_demand"]):
        for deadline in (12.5, 13.5, 15.0, 17.0, 20.0, 24.0):
            for tol in (0.002, 0.005, 0.01, 0.03):
                raw = held_out(tol)
                raw["constraints"]["deadline_hours"] = deadline
                raw["purchase"]["allow"] = allow
                raw["workload"]["checkpoint_gb"] = 14
                q = make_quote(parse_job(raw), catalog, top=0, frontier_points=0)
                if q.plan is None or q.exact is None:
                    continue
                simplified += 1
                assert q.plan.expected_cost_usd <= q.exact.expected_cost_usd * (1 + tol) * (1 + 1e-9)
                assert simplicity(q.plan.solution) < simplicity(q.exact.solution)
                assert q.plan.p90_hours <= deadline * (1 + 1e-6)
    assert simplified >= 5
