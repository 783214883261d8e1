"""Throughput: the table with the job's figures in place per GPU, the DDP scaling rule,
the blend of a measurement with the prior, and GPU names checked against the catalog."""

from __future__ import annotations

import pytest

from planner.errors import JobSpecError
from planner.job import parse_job
from planner.quote import make_quote
from planner.workload import PRIOR_STEPS, blend_rate, ddp_rate, work_model
from pricing.embedded_catalog import load_embedded_catalog
from pricing.errors import UnknownModelError
from pricing.throughput import load_throughput_table


def _job(workload, **constraints):
    return parse_job({"name": "w", "workload": workload, "constraints": constraints})


def test_ddp_rate_is_the_spec_scaling_rule():
    assert ddp_rate(2.0, 1, 0.9) == 2.0
    assert ddp_rate(2.0, 4, 0.9) == pytest.approx(4 * 2.0 * 0.81)
    assert ddp_rate(1.0, 8, 0.95) == pytest.approx(8 * 0.95**3)
    with pytest.raises(ValueError):
        ddp_rate(1.0, 0, 0.9)


def test_blend_rate_weighs_the_measurement_by_the_steps_it_covers():
    assert blend_rate(1.0, 0.5, 0) == 1.0
    assert blend_rate(1.0, 0.5, PRIOR_STEPS) == pytest.approx(0.75)
    assert blend_rate(1.0, 0.5, 2) == pytest.approx(1.0 - 0.5 * 2 / (2 + PRIOR_STEPS))
    assert blend_rate(1.0, 0.5, 2000, prior_steps=0) == 0.5
    assert 0.5 < blend_rate(1.0, 0.5, 2000) < 0.55


def test_job_throughput_replaces_the_table_per_gpu_only():
    table = load_throughput_table()
    work = work_model(_job({"model": "gpt-7b", "tokens": 1e9, "throughput": {"A100": 1234.0}}))
    assert work.speed("A100") == 1234.0 and "job file" in work.speed_sources["a100"]
    h100 = table.per_gpu("gpt-7b", "H100").per_gpu_per_second
    assert work.speed("H100") == pytest.approx(h100)  # the table's other GPUs stay
    assert len(work.speeds) == len(table.gpus_for("gpt-7b"))


def test_an_unknown_model_quotes_on_the_gpus_the_job_gives():
    job = _job({"model": "vit-large", "samples": 1e7, "throughput": {"A100": 400.0, "H100": 900.0}})
    quote = make_quote(job, load_embedded_catalog(), top=1, frontier_points=0)
    assert quote.plan is not None
    assert {p.config.pool.gpu for p in quote.plan.solution.phases} <= {"A100", "H100"}
    assert any("'vit-large' is not in the benchmark table" in w for w in quote.candidates.warnings)
    with pytest.raises(UnknownModelError, match="unknown model 'vit-large'"):
        work_model(_job({"model": "vit-large", "samples": 1e7}))


def test_a_gpu_the_catalog_lacks_is_an_error_naming_the_key():
    job = _job({"model": "gpt-7b", "tokens": 1e9, "throughput": {"MI300X": 900.0}})
    with pytest.raises(JobSpecError) as info:
        make_quote(job, load_embedded_catalog(), top=0, frontier_points=0)
    (problem,) = info.value.problems
    assert problem.startswith("workload.throughput.MI300X: the catalog has no GPU 'MI300X'")
    assert "A100, A100-80GB" in problem and "H100" in problem


def test_constraints_gpus_restrict_the_pools():
    catalog = load_embedded_catalog()
    free = make_quote(_job({"model": "gpt-7b", "tokens": 2e9}), catalog, top=0, frontier_points=0)
    assert free.plan.solution.main_config.pool.gpu == "A100-80GB"
    job = _job({"model": "gpt-7b", "tokens": 2e9}, gpus=["H100", "b200"])  # names match case-insensitively
    quote = make_quote(job, catalog, top=3, frontier_points=0)
    used = {p.config.pool.gpu for v in [quote.plan, *quote.alternatives] for p in v.solution.phases}
    assert used and used <= {"H100", "B200"}
    assert {c.pool.gpu for c in quote.candidates.configs} == {"H100", "B200"}
    with pytest.raises(JobSpecError, match=r"constraints.gpus\[1\]: the catalog has no GPU 'H1000'"):
        make_quote(_job({"model": "gpt-7b", "tokens": 2e9}, gpus=["H100", "H1000"]), catalog, top=0)
