"""[run].nproc_per_node in the plan: a node's GPUs that no process uses do no work."""

from __future__ import annotations

import pytest

from planner.job import parse_job
from planner.quote import make_quote
from planner.workload import workers
from pricing.catalog import Catalog, Offering
from pricing.pool import Pool
from runtime.control.replan import config_rate

# Four T4s for $1.60/h ($0.40 a GPU) against one for $0.53/h: per GPU the big node is cheaper.
CATALOG = Catalog.of([
    Offering("aws", "us-east-1", None, "g4dn.xlarge", "T4", 1, 16, 4, 16, 0.526),
    Offering("aws", "us-east-1", None, "quad.t4", "T4", 4, 16, 16, 64, 1.60),
], origin="test")


def _job(nproc: int | None):
    return parse_job({
        "name": "workers",
        "workload": {"steps": 36000, "throughput": {"T4": 1.0}, "scaling": {"efficiency_per_doubling": 1.0}},
        "constraints": {"deadline_hours": 100, "max_nodes": 1},
        "purchase": {"allow": ["on_demand"]},
        "run": {"entrypoint": ["python", "train.py"], **({} if nproc is None else {"nproc_per_node": nproc})},
    })


@pytest.mark.parametrize(("nproc", "per_node"), [(None, 4), (1, 1), (2, 2), (4, 4), (8, 4)])
def test_the_gpus_at_work_are_the_nodes_or_its_processes_whichever_fewer(nproc, per_node) -> None:
    job = _job(nproc)
    assert workers(job, 4) == per_node and workers(job, 4, nodes=3) == 3 * per_node
    assert workers(job, 1, nodes=2) == 2  # a 1-GPU node: one at work, however many processes share it


def test_one_process_a_node_plans_the_one_gpu_instance_and_counts_one_gpu_of_four() -> None:
    every_gpu = make_quote(_job(None), CATALOG, top=0, frontier_points=0).plan
    assert every_gpu.solution.phases[0].config.pool.instance_type == "quad.t4"
    assert every_gpu.expected_hours == pytest.approx(36000 / 4 / 3600, rel=1e-6)  # 4 GPUs at 1 step/s

    one = make_quote(_job(1), CATALOG, top=0, frontier_points=0).plan
    (phase,) = one.solution.phases
    assert phase.config.pool.instance_type == "g4dn.xlarge" and phase.hours == pytest.approx(10.0, rel=1e-6)
    # The 4-GPU node with one process does one GPU's work at $1.60: a re-plan rates it so too.
    quad = Pool.of(next(o for o in CATALOG if o.instance_type == "quad.t4"), "on_demand")
    assert config_rate(_job(1), quad, 1) == pytest.approx(3600.0)
    assert config_rate(_job(1), quad, 2) == pytest.approx(2 * 3600.0)
    assert config_rate(_job(None), quad, 1) == pytest.approx(4 * 3600.0)
