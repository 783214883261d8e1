"""The plan model's own arithmetic: the bound that makes HiGHS fast holds, a badly scaled job is no
solver error, and the CBC fallback gives HiGHS's plans."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import milp
from planner.job import parse_job
from planner.milp import PlanModel
from planner.plan import limits_for, plan
from planner.quote import make_quote
from pricing.catalog import Catalog, Offering
from pricing.embedded_catalog import load_embedded_catalog

from .test_optimality import jobs, small_catalogs


def _best_of_two_phases_or_more(model: PlanModel, deadline: float) -> float | None:
    """The cost objective of the model's best solution that is not one configuration alone (an idle
    second phase included), found without the bound."""
    at = model._at
    model._at = dataclasses.replace(at, single=np.full_like(at.single, np.inf))  # no g_k = 1
    model._multi_bound = lambda allowed, deadline: (0.0, None)
    try:
        if model.solve("cost", deadline_hours=deadline) is None:
            return None
        return float(model._best @ model._costs["cost"])
    finally:
        model._at = at
        del model._multi_bound


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs(purchases=("spot", "on_demand")), catalog=small_catalogs(), tightness=st.floats(0.3, 3.0))
def test_the_bound_on_plans_of_several_phases_never_exceeds_one(job, catalog, tightness):
    planned = plan(job, catalog, limits=dataclasses.replace(limits_for(job), deadline_hours=None, budget_usd=None))
    model = planned.model
    if model is None:
        return
    fastest = model.solve("p90_time", deadline_hours=None)
    deadline = fastest.p90_hours * (1 + tightness)
    bound, _ = model._multi_bound(np.ones(len(model.configs), dtype=bool), deadline)
    best = _best_of_two_phases_or_more(model, deadline)
    if best is not None:
        assert best >= bound - 1e-9 * abs(bound)


def test_an_infeasible_job_of_ten_billion_tokens_has_no_plan_rather_than_a_solver_error():
    # Found by the cluster brute force: with the work row in tokens, HiGHS's final check failed on
    # rounding (an infeasibility of 2e-6 tokens in 7.5e9) and the quote raised "Solve error".
    job = parse_job({"name": "g", "workload": {"model": "gpt-7b", "tokens": 7498942093.0, "checkpoint_gb": 0},
                     "constraints": {"max_nodes": 1, "deadline_hours": 20.0},
                     "purchase": {"allow": ["on_demand"], "cluster": [{
                         "name": "lab-a100", "context": "lab", "namespace": "ml", "gpu": "A100", "gpus_per_node": 1,
                         "max_gpus": 1, "gpu_hour_usd": 0.0, "queue_wait_hours": 0.0}]},
                     "overheads": {"restart_minutes": 0}})
    catalog = Catalog.of([Offering("aws", "us-east-1", None, "t0.x", "A100", 1, 40, 8.0, 64.0, 1.0)],
                         origin="generated")
    quote = make_quote(job, catalog, top=0, frontier_points=0)
    assert quote.plan is None
    assert "constraints.deadline_hours" in quote.infeasible.binding


def _cbc_available() -> bool:
    import pulp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return any(getattr(pulp, name, None) and getattr(pulp, name)(msg=False).available()
                   for name in ("COIN_CMD", "PULP_CBC_CMD"))


@pytest.mark.skipif(not _cbc_available(), reason="PuLP finds no CBC here")
@pytest.mark.parametrize("example", ["gpt-7b-finetune.toml", "cluster-burst.toml"])
def test_without_highspy_cbc_gives_the_same_quote(example, monkeypatch):
    from pathlib import Path

    from planner.job import load_job

    job = load_job(Path(__file__).resolve().parents[2] / "examples" / example)
    catalog = load_embedded_catalog()
    with_highs = make_quote(job, catalog)
    monkeypatch.setattr(milp, "_highs_model", lambda model: None)
    with_cbc = make_quote(job, catalog)

    def figures(q):
        return [(v.expected_cost_usd, v.p90_hours) for v in [q.plan, *q.alternatives]], q.frontier

    (plans_h, frontier_h), (plans_c, frontier_c) = figures(with_highs), figures(with_cbc)
    assert np.allclose(plans_h, plans_c, rtol=1e-6) and len(frontier_h) == len(frontier_c)
    assert np.allclose(frontier_h, frontier_c, rtol=1e-6)
