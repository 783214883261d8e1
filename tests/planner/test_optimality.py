"""The MILP against an independent brute force, and the constraints of every quote."""

from __future__ import annotations

import dataclasses
import fnmatch
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.job import parse_job
from planner.plan import limits_for, plan
from planner.quote import make_quote
from pricing.catalog import Catalog, Offering
from pricing.embedded_catalog import load_embedded_catalog

from ..conftest import shared_path
from .bruteforce import brute_force_costs

MODELS = ["gpt-7b", "gpt-1b", "resnet50", "bert-large"]
UNITS = {"gpt-7b": "tokens", "gpt-1b": "tokens", "resnet50": "samples", "bert-large": "samples"}
# Work amounts that take from minutes to days on one A100.
AMOUNT = {"gpt-7b": (1e7, 5e9), "gpt-1b": (1e8, 2e10), "resnet50": (1e6, 5e8), "bert-large": (1e5, 5e7)}
GPUS = [("A100", 40), ("A100-80GB", 80), ("H100", 80), ("V100", 16), ("T4", 16), ("L4", 24), ("A10G", 24)]


@st.composite
def jobs(draw, purchases=("on_demand",)):
    model = draw(st.sampled_from(MODELS))
    lo, hi = AMOUNT[model]
    amount = draw(st.floats(min_value=math.log10(lo), max_value=math.log10(hi)))
    constraints = {"max_nodes": draw(st.integers(1, 6))}
    if draw(st.booleans()):
        constraints["deadline_hours"] = draw(st.floats(0.2, 200))
    if draw(st.booleans()):
        constraints["budget_usd"] = draw(st.floats(5, 20000))
    if draw(st.booleans()):
        constraints["max_gpus"] = draw(st.sampled_from([1, 4, 8, 16, 32]))
    if draw(st.booleans()):
        constraints["clouds"] = draw(st.lists(st.sampled_from(["aws", "gcp", "azure"]), min_size=1, unique=True))
    if draw(st.booleans()):
        constraints["regions"] = draw(st.lists(st.sampled_from(["us-*", "europe-*", "*east*", "asia-*"]),
                                               min_size=1, unique=True))
    workload = {"model": model, UNITS[model]: float(round(10**amount)), "checkpoint_gb": 0}  # counts are whole
    if draw(st.booleans()):
        workload["min_gpu_memory_gb"] = draw(st.sampled_from([16, 24, 40, 80]))
    if draw(st.booleans()):  # the memory rule (an explicit min_gpu_memory_gb above overrides it)
        workload["params_billions"] = draw(st.sampled_from([0.35, 1.3, 7.0, 13.0, 70.0]))
        workload["strategy"] = draw(st.sampled_from(["ddp", "zero2", "fsdp", "zero3"]))
        workload["precision"] = draw(st.sampled_from(["bf16", "fp32"]))
        workload["tensor_parallel"] = draw(st.sampled_from([1, 1, 2, 8]))
        if draw(st.booleans()):
            workload["activation_gb"] = draw(st.sampled_from([0.5, 4.0, 12.0]))
    return parse_job({
        "name": "generated",
        "workload": workload,
        "constraints": constraints,
        "purchase": {"allow": list(purchases)},
        "overheads": {"restart_minutes": draw(st.sampled_from([0, 5, 10, 30]))},
        "objective": {"tolerance": draw(st.sampled_from([0.0, 0.005, 0.005, 0.05]))},
    })


@st.composite
def small_catalogs(draw):
    rows = []
    for i in range(draw(st.integers(1, 6))):
        gpu, mem = draw(st.sampled_from(GPUS))
        gpn = draw(st.sampled_from([1, 2, 4, 8]))
        price = draw(st.floats(0.2, 8.0)) * gpn
        rows.append(Offering("aws", draw(st.sampled_from(["us-east-1", "eu-west-1"])), None, f"t{i}.x", gpu,
                             gpn, mem, 8.0 * gpn, 64.0 * gpn, round(price, 4),
                             spot=round(price * draw(st.floats(0.2, 1.2)), 4)))
    return Catalog.of(rows, origin="generated")


def check_against_brute_force(job, catalog):
    quote = make_quote(job, catalog, top=0, frontier_points=0)
    expected, single = brute_force_costs(job, catalog)
    if expected is None:
        assert quote.plan is None, f"brute force found no plan, MILP found {quote.plan.expected_cost_usd}"
        return
    assert quote.plan is not None, f"MILP infeasible, brute force found ${expected:.4f}"
    exact = quote.exact or quote.plan  # the optimum, whether or not a simpler plan was accepted
    assert exact.expected_cost_usd == pytest.approx(expected, rel=1e-6, abs=1e-6)
    # [objective] tolerance: never more than the tolerance above the optimum, and one phase
    # whenever a one-phase plan is within it.
    tol = job.objective.tolerance
    assert quote.plan.expected_cost_usd <= expected * (1 + tol) * (1 + 1e-6) + 1e-6
    if single is not None and single <= expected * (1 + tol) * (1 - 1e-6):
        assert len(quote.plan.solution.phases) == 1, (single, expected, tol)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs(), catalog=small_catalogs())
def test_on_demand_matches_brute_force_on_generated_catalogs(job, catalog):
    check_against_brute_force(job, catalog)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs(), catalog=small_catalogs(), slack=st.floats(0.0, 1.0), share=st.floats(0.01, 0.3))
def test_a_runs_budget_leaves_the_cap_reserve_of_the_dearest_phase_as_brute_force_does(job, catalog, slack, share):
    """A run's re-plan (Limits.stop_reserve_hours): the plan's cost plus that many hours of its
    dearest phase's burn fits the budget, and no cheaper plan does.  The budget is ``slack`` above
    the plan without a reserve, the reserve ``share`` of that plan's hours: often the reserve binds."""
    free = plan(job, catalog, limits=limits_for(job), tolerance=0.0).solution
    if free is None:
        return
    budget = free.cost * (1 + slack) + 1e-9
    job = job.model_copy(update={"constraints": job.constraints.model_copy(update={"budget_usd": budget})})
    reserve = share * free.hours
    found = plan(job, catalog, limits=dataclasses.replace(limits_for(job), stop_reserve_hours=reserve),
                 tolerance=0.0).solution
    expected, _ = brute_force_costs(job, catalog, stop_reserve_hours=reserve)
    if expected is None:
        assert found is None, f"brute force found no plan, MILP found {found.cost}"
        return
    assert found is not None, f"MILP infeasible, brute force found ${expected:.4f}"
    assert found.cost == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert found.cost + reserve * max(p.config.burn for p in found.phases) <= budget * (1 + 1e-6)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs())
def test_on_demand_matches_brute_force_on_embedded_catalog(job):
    check_against_brute_force(job, load_embedded_catalog())


@pytest.fixture(scope="module")
def skypilot_catalog():
    from pricing.skypilot import read_skypilot_catalog

    return read_skypilot_catalog(shared_path("catalog", "skypilot"))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(job=jobs())
def test_on_demand_matches_brute_force_on_skypilot_catalog(job, skypilot_catalog):
    check_against_brute_force(job, skypilot_catalog)


def test_single_on_demand_plan_is_exactly_work_over_throughput():
    """SPEC: on-demand only and checkpoint_gb = 0 -> hours = work / aggregate, cost = hours x price x nodes."""
    catalog = Catalog.of([Offering("aws", "us-east-1", None, "p4d.24xlarge", "A100", 8, 40, 96, 1152, 21.96)])
    job = parse_job({"name": "x", "workload": {"model": "gpt-7b", "tokens": 1e9, "scaling":
                     {"efficiency_per_doubling": 0.9}}, "constraints": {"max_nodes": 1},
                     "purchase": {"allow": ["on_demand"]}})
    quote = make_quote(job, catalog, top=0, frontier_points=0)
    hours = 1e9 / (8 * 3679 * 0.9**3) / 3600
    assert quote.plan.expected_hours == pytest.approx(hours, rel=1e-9)
    assert quote.plan.expected_cost_usd == pytest.approx(hours * 21.96, rel=1e-9)
    assert [line.label for line in quote.plan.lines] == ["compute"]


def assert_respects(job, quote, catalog):
    plan = quote.plan
    c = job.constraints
    if c.deadline_hours is not None:
        assert plan.p90_hours <= c.deadline_hours * (1 + 1e-6)
        assert plan.expected_hours <= c.deadline_hours * (1 + 1e-6)
    if c.budget_usd is not None:
        assert plan.expected_cost_usd <= c.budget_usd * (1 + 1e-6)
    done = 0.0
    min_mem = quote.work.min_gpu_memory_gb
    for phase in plan.solution.phases:
        cfg, pool = phase.config, phase.config.pool
        # The catalog row the pool was built from: zones count for spot only.
        o = next(o for o in catalog if (o.cloud, o.region, o.instance_type) == (pool.cloud, pool.region,
                 pool.instance_type) and pool.zone in (None, o.zone) and o.price(cfg.purchase) == pool.hourly_usd)
        assert cfg.nodes <= c.max_nodes
        assert c.max_gpus is None or cfg.gpus <= c.max_gpus
        assert o.gpu_memory_gb >= min_mem - 1e-9
        assert not c.clouds or o.cloud in c.clouds
        assert not c.regions or any(fnmatch.fnmatchcase(o.region, g) for g in c.regions)
        assert cfg.purchase in job.purchase.allow
        assert o.price(cfg.purchase) is not None and o.gpu == pool.gpu
        done += phase.work_hours * cfg.rate
    assert done >= quote.work.work * (1 - 1e-6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs(purchases=("spot", "on_demand")))
def test_no_quote_breaks_a_constraint(job):
    catalog = load_embedded_catalog()
    quote = make_quote(job, catalog, top=2, frontier_points=0)
    if quote.plan is None:
        assert quote.infeasible is not None
        return
    for view in [quote.plan, *quote.alternatives]:
        assert_respects(job, type("Q", (), {"plan": view, "work": quote.work})(), catalog)
