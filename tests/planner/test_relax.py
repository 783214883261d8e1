"""Relaxation hints are exact: the suggestion is feasible and 1% less is not."""

from __future__ import annotations

import pytest

from planner.job import parse_job
from planner.quote import make_quote
from planner.relax import round_up
from pricing.embedded_catalog import load_embedded_catalog


def job(**constraints):
    return parse_job({
        "name": "tight",
        "workload": {"model": "gpt-7b", "tokens": 5e9, "checkpoint_gb": 14},
        "constraints": {"max_nodes": 4, **constraints},
        "purchase": {"allow": ["spot", "on_demand"]},
    })


def quote(j):
    return make_quote(j, load_embedded_catalog(), top=0, frontier_points=0)


def relaxation(q, key):
    return next(r for r in q.infeasible.relaxations if r.key == key)


@pytest.mark.parametrize("budget", [5.0, 40.0, 120.0])
def test_budget_hint_is_exact(budget):
    q = quote(job(deadline_hours=30, budget_usd=budget))
    assert q.status == "infeasible"
    assert "constraints.budget_usd" in q.infeasible.binding
    hint = relaxation(q, "constraints.budget_usd")
    assert hint.message == f"raise budget_usd to {hint.value:g}"
    assert quote(job(deadline_hours=30, budget_usd=hint.value)).status == "optimal"
    assert quote(job(deadline_hours=30, budget_usd=hint.value * 0.99)).status == "infeasible"


@pytest.mark.parametrize("deadline", [0.3, 0.5, 2.0])
def test_deadline_hint_is_exact(deadline):
    q = quote(job(deadline_hours=deadline, budget_usd=400))
    assert q.status == "infeasible"
    hint = relaxation(q, "constraints.deadline_hours")
    assert hint.message == f"extend deadline_hours to {hint.value:g}"
    assert quote(job(deadline_hours=hint.value, budget_usd=400)).status == "optimal"
    assert quote(job(deadline_hours=hint.value * 0.99, budget_usd=400)).status == "infeasible"


def test_node_limit_hint_is_exact():
    q = quote(job(deadline_hours=1.0, max_nodes=1))
    hint = relaxation(q, "constraints.max_nodes")
    n = int(hint.value)
    assert quote(job(deadline_hours=1.0, max_nodes=n)).status == "optimal"
    assert quote(job(deadline_hours=1.0, max_nodes=n - 1)).status == "infeasible"


def test_memory_filter_is_named():
    q = make_quote(parse_job({"name": "x", "workload": {"model": "gpt-7b", "tokens": 1e9,
                                                        "min_gpu_memory_gb": 1000}}),
                   load_embedded_catalog(), top=0, frontier_points=0)
    assert q.infeasible.binding == ["workload.min_gpu_memory_gb"]
    assert "largest" in q.infeasible.reasons[0]


@pytest.mark.parametrize("x", [0.0123456, 1.0, 99.991, 1234.5, 98765432.1])
def test_round_up_is_never_below_and_close(x):
    r = round_up(x)
    assert x <= r <= x * 1.001
