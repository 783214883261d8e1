"""The team's Kubernetes cluster as a pool: ``[[purchase.cluster]]`` in quotes.

A job that fits runs on the cluster at its internal price; one that does not fit in time is
planned as cluster then cloud, and the quote says why; the queue wait is time, not money;
an independent brute force agrees with the MILP on generated jobs with a cluster.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import JobSpecError
from planner.job import parse_job
from planner.quote import make_quote
from planner.report import quote_json
from pricing.catalog import Catalog, Offering
from pricing.pool import CLUSTER
from pricing.throughput import load_throughput_table

from .bruteforce import on_demand_configs

CATALOG = Catalog.of([
    Offering("aws", "us-east-1", "use1-az1", "p4d.24xlarge", "A100", 8, 40, 96, 1152, 21.96, spot=9.0),
    Offering("aws", "us-east-1", None, "p5.48xlarge", "H100", 8, 80, 192, 2048, 55.04),
])
A100_TOKENS_PER_S = 3679  # gpt-7b on one A100 (the throughput table)


def cluster(**over):
    return {"name": "lab-a100", "context": "lab", "namespace": "ml", "gpu": "A100", "gpus_per_node": 8,
            "max_gpus": 16, "gpu_hour_usd": 0.0, "queue_wait_hours": 2.0, **over}


def job(tokens, clusters=(), deadline=None, allow=("spot", "on_demand"), **extra):
    constraints = {"max_nodes": 4, **({"deadline_hours": deadline} if deadline else {})}
    return parse_job({"name": "c", "workload": {"model": "gpt-7b", "tokens": tokens, "scaling":
                                                {"efficiency_per_doubling": 1.0}},
                      "constraints": constraints, "purchase": {"allow": list(allow), "cluster": list(clusters)},
                      **extra})


def test_a_job_that_fits_runs_on_the_cluster_at_its_internal_price():
    q = make_quote(job(2e9, [cluster(gpu_hour_usd=0.5)], deadline=16), CATALOG, top=0, frontier_points=0)
    (phase,) = q.plan.solution.phases
    pool = phase.config.pool
    assert (pool.cloud, pool.id, pool.purchase, phase.config.nodes) == \
        ("kubernetes", "kubernetes:lab/ml:lab-a100", CLUSTER, 2)
    work_hours = 2e9 / (16 * A100_TOKENS_PER_S) / 3600
    assert phase.hours == pytest.approx(work_hours + 2.0)  # the queue wait is in the time...
    assert q.plan.expected_cost_usd == pytest.approx(work_hours * 0.5 * 16)  # ...but not in the cost
    (note,) = quote_json(q)["cluster"]
    assert note["used"] and note["work_share"] == pytest.approx(1.0) and note["reason"].startswith("fits:")
    assert "within the deadline of 16 h" in note["reason"]
    assert quote_json(q)["plan"]["phases"][0]["queue_wait_hours"] == 2.0


def test_a_job_that_does_not_fit_in_time_is_cluster_then_cloud_and_says_why():
    work_hours = 2e9 / (16 * A100_TOKENS_PER_S) / 3600  # ~9.4 h on the team's 16 GPUs
    q = make_quote(job(2e9, [cluster()], deadline=8), CATALOG, top=0, frontier_points=0)
    phases = q.plan.solution.phases
    assert phases[0].config.purchase == CLUSTER and len(phases) == 2
    assert phases[1].config.pool.cloud == "aws"
    assert q.plan.p90_hours <= 8 + 1e-6
    (note,) = quote_json(q)["cluster"]
    assert note["alone_hours"] == pytest.approx(work_hours + 2.0, abs=1e-4)  # rounded to 4 places
    assert note["reason"].startswith("does not fit in time:")
    assert "past the deadline of 8 h" in note["reason"] and phases[1].config.pool.label(phases[1].config.nodes) \
        in note["reason"]
    assert 0 < note["work_share"] < 1


def test_a_longer_queue_moves_more_work_to_the_cloud_and_a_short_deadline_skips_it():
    shares = []
    for wait in (0.0, 1.0, 2.0):
        q = make_quote(job(2e9, [cluster(queue_wait_hours=wait)], deadline=8), CATALOG, top=0, frontier_points=0)
        shares.append(quote_json(q)["cluster"][0].get("work_share", 0.0))
    assert shares[0] > shares[1] > shares[2] > 0
    q = make_quote(job(2e9, [cluster(queue_wait_hours=7.9)], deadline=8), CATALOG, top=0, frontier_points=0)
    assert all(p.config.purchase != CLUSTER for p in q.plan.solution.phases)
    assert quote_json(q)["cluster"][0]["reason"].startswith("not used:")


def test_max_hours_caps_the_cluster_like_a_reservation_end():
    q = make_quote(job(2e9, [cluster(queue_wait_hours=0, max_hours=3)], allow=("on_demand",)), CATALOG, top=0,
                   frontier_points=0)
    first = q.plan.solution.phases[0]
    assert first.config.purchase == CLUSTER and first.work_hours == pytest.approx(3.0)
    assert "the team may hold it 3 h" in quote_json(q)["cluster"][0]["reason"]


@pytest.mark.parametrize("bad, key", [
    ({"max_gpus": 4}, "max_gpus (4) is less than one pod's gpus_per_node (8)"),
    ({"queue_wait_hours": "soon"}, "queue_wait_hours"),
    ({"node_selector": {"bad key!": "x"}}, "is not a Kubernetes label key"),
    ({"namespace": "ML_Team"}, "purchase.cluster[0].namespace"),
    ({"tolerations": [{"operator": "Exists", "value": "x"}]}, "takes no value"),
])
def test_bad_cluster_entries_name_the_key(bad, key):
    with pytest.raises(JobSpecError) as info:
        job(1e9, [cluster(**bad)])
    assert key in str(info.value)
    with pytest.raises(JobSpecError, match="cluster names must differ"):
        job(1e9, [cluster(), cluster()])


def test_an_unknown_cluster_gpu_is_a_warning_not_a_plan():
    q = make_quote(job(1e9, [cluster(gpu="TPU-v9")]), CATALOG, top=0, frontier_points=0)
    assert all(p.config.purchase != CLUSTER for p in q.plan.solution.phases)
    assert any("purchase.cluster[0]" in w and "TPU-v9" in w for w in q.candidates.warnings)


# -- against an independent brute force ---------------------------------------------------------
GPUS = [("A100", 40), ("H100", 80), ("V100", 16), ("T4", 16)]


@st.composite
def cluster_jobs(draw):
    tokens = float(round(10 ** draw(st.floats(8.0, 10.0))))
    constraints = {"max_nodes": draw(st.integers(1, 4))}
    if draw(st.booleans()):
        constraints["deadline_hours"] = draw(st.floats(0.5, 100))
    if draw(st.booleans()):
        constraints["budget_usd"] = draw(st.floats(5, 5000))
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    entry = cluster(gpu=draw(st.sampled_from([g for g, _ in GPUS])), gpus_per_node=gpn,
                    max_gpus=gpn * draw(st.integers(1, 4)), gpu_hour_usd=round(draw(st.floats(0, 4)), 3),
                    queue_wait_hours=round(draw(st.floats(0, 10)), 3))
    return parse_job({"name": "g", "workload": {"model": "gpt-7b", "tokens": tokens, "checkpoint_gb": 0},
                      "constraints": constraints, "purchase": {"allow": ["on_demand"], "cluster": [entry]},
                      "overheads": {"restart_minutes": draw(st.sampled_from([0, 10, 30]))}})


@st.composite
def catalogs(draw):
    rows = []
    for i in range(draw(st.integers(1, 4))):
        gpu, mem = draw(st.sampled_from(GPUS))
        gpn = draw(st.sampled_from([1, 4, 8]))
        rows.append(Offering("aws", "us-east-1", None, f"t{i}.x", gpu, gpn, mem, 8.0 * gpn, 64.0 * gpn,
                             round(draw(st.floats(0.2, 8.0)) * gpn, 4)))
    return Catalog.of(rows, origin="generated")


def brute_force(job, catalog) -> float | None:
    """Cheapest plan of one or two phases over the cloud's on-demand configurations and the cluster's,
    the cluster's before the cloud's, each cluster phase waiting its queue (no node-hours)."""
    rates, burns = on_demand_configs(job, catalog)
    c = job.purchase.cluster[0]
    table = load_throughput_table()
    speed = table.per_gpu("gpt-7b", c.gpu).per_gpu_per_second
    eff = table.model("gpt-7b").efficiency_per_doubling
    configs = [(r, b, 0.0, 1) for r, b in zip(rates, burns)]
    # A GPU the catalog lists smaller than the model needs is not used on the cluster either.
    need = job.workload.min_gpu_memory_gb or table.model("gpt-7b").min_gpu_memory_gb
    sizes = [o.gpu_memory_gb for o in catalog if o.gpu == c.gpu]
    fits = not sizes or max(sizes) >= need - 1e-9
    for n in range(1, (min(c.max_nodes, job.constraints.max_nodes) if fits else 0) + 1):
        g = n * c.gpus_per_node
        configs.append((g * speed * eff ** math.log2(g) * 3600, c.hourly_usd * n, c.queue_wait_hours, 0))
    W, R = job.workload.amount, job.overheads.restart_minutes / 60
    D = job.constraints.deadline_hours or math.inf
    B = job.constraints.budget_usd or math.inf
    best = math.inf
    for r, b, w, _ in configs:
        if W / r + w <= D * (1 + 1e-9) and W / r * b <= B * (1 + 1e-9):
            best = min(best, W / r * b)
    for i, (ri, bi, wi, ci) in enumerate(configs):
        for j, (rj, bj, wj, cj) in enumerate(configs):
            if i == j or ci > cj:
                continue
            # x hours on i, then (W - ri x) / rj on j: time and cost are linear in x.
            lo, hi = 0.0, W / ri
            for a, c0, limit in ((1 - ri / rj, W / rj + R + wi + wj, D), (bi - bj * ri / rj, bj * W / rj + bj * R, B)):
                if math.isinf(limit):
                    continue
                if a > 0:
                    hi = min(hi, (limit - c0) / a)
                elif a < 0:
                    lo = max(lo, (limit - c0) / a)
                elif c0 > limit * (1 + 1e-9):
                    lo = math.inf
            for x in (lo, hi):
                if lo <= hi * (1 + 1e-12) + 1e-12 and 1e-9 < x < W / ri * (1 - 1e-9):
                    best = min(best, (bi - bj * ri / rj) * x + bj * W / rj + bj * R)
    return None if math.isinf(best) else best


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=cluster_jobs(), catalog=catalogs())
def test_cluster_plans_match_brute_force(job, catalog):
    quote = make_quote(job, catalog, top=0, frontier_points=0)
    expected = brute_force(job, catalog)
    if expected is None:
        assert quote.plan is None, f"brute force found no plan, MILP found {quote.plan.expected_cost_usd}"
    else:
        assert quote.plan is not None, f"MILP infeasible, brute force found ${expected:.4f}"
        exact = quote.exact or quote.plan  # a simpler plan within [objective] tolerance may be the plan
        assert exact.expected_cost_usd == pytest.approx(expected, rel=1e-6, abs=1e-6)
        assert quote.plan.expected_cost_usd <= expected * (1 + job.objective.tolerance) * (1 + 1e-6) + 1e-6
