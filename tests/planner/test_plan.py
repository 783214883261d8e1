"""planner.plan.plan: what a quote and a re-plan both call, with what is known as arguments."""

from __future__ import annotations

import pytest

from planner.job import parse_job
from planner.milp import Limits
from planner.plan import plan
from planner.quote import make_quote
from planner.workload import work_model
from pricing.embedded_catalog import load_embedded_catalog


def _job(workload, **sections):
    return parse_job({"name": "p", "workload": workload, **sections})


def test_plan_takes_blocked_pools_rates_and_speeds_as_arguments():
    catalog = load_embedded_catalog()
    job = _job({"model": "gpt-7b", "tokens": 2e9})
    limits = Limits(switch_hours=1 / 6)
    best = plan(job, catalog, limits=limits).solution.main_config
    assert best.pool.purchase == "spot"
    blocked = plan(job, catalog, limits=limits, blocked={best.pool.key}).solution.main_config
    assert blocked.pool.key != best.pool.key
    risky = plan(job, catalog, limits=limits, interruption_rates={best.pool.id: 50.0}).solution.main_config
    assert risky.pool.key != best.pool.key
    gpu = best.pool.gpu.lower()
    slow = plan(job, catalog, limits=limits, speeds={gpu: work_model(job).speeds[gpu] / 100})
    assert slow.solution.main_config.pool.gpu != best.pool.gpu and slow.work.speed(gpu) is not None
    half = plan(job, catalog, limits=limits, work=1e9)
    assert half.work.work == 1e9
    assert len(catalog) == len(load_embedded_catalog())  # nothing was rewritten


@pytest.mark.parametrize("workload", [{"model": "gpt-7b", "tokens": 2e9}, {"model": "resnet50", "samples": 1e8}])
def test_an_objective_given_as_argument_is_the_one_pruning_keeps_configurations_for(workload):
    """Pruning for cost drops configurations only carbon would choose: the objective must reach it."""
    catalog = load_embedded_catalog()
    asked = make_quote(_job(workload), catalog, top=0, frontier_points=0, objective="carbon")
    in_file = make_quote(_job(workload, objective={"minimize": "carbon"}), catalog, top=0, frontier_points=0)
    assert asked.objective == "carbon"
    assert asked.plan.solution.kg_co2e == pytest.approx(in_file.plan.solution.kg_co2e)
    cheapest = make_quote(_job(workload), catalog, top=0, frontier_points=0)
    assert asked.plan.solution.kg_co2e < cheapest.plan.solution.kg_co2e
