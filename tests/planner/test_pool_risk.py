"""Per-pool interruption risk: Advisor buckets, traces, past runs; the quote says which rate is a default."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.job import parse_job
from planner.quote import make_quote
from planner.report import quote_json
from pricing import learned
from pricing.catalog import Catalog, Offering
from pricing.risk import BUCKET_RATES, CLOUD_DEFAULT_RATES, TRACE_POOLS, estimate
from pricing.traces import read_trace

from ..conftest import shared_path


def spot_row(region: str, name: str, bucket: str | None, cloud: str = "aws", spot: float = 1.0) -> Offering:
    return Offering(cloud, region, None, name, "V100", 1, 16.0, 8.0, 61.0, 3.06, spot=spot,
                    interruption_bucket=bucket)


def spot_job(**workload) -> object:
    return parse_job({"name": "risk", "workload": {"model": "resnet50", "samples": 5e7, "checkpoint_gb": 1,
                                                   **workload},
                      "purchase": {"allow": ["spot"]}, "constraints": {"max_nodes": 1}})


def quoted(catalog: Catalog, learned_counts=None):
    from planner.plan import limits_for
    from planner.pools import candidate_configs
    from planner.workload import work_model

    spec = spot_job()
    quote = make_quote(spec, catalog, top=0, frontier_points=0)
    cands = candidate_configs(spec, catalog, work_model(spec), learned=learned_counts or {}, prune=False)
    return quote, {c.pool.id: c for c in cands.configs}, limits_for(spec)


def test_pools_with_different_advisor_buckets_are_quoted_at_different_risks():
    catalog = Catalog.of([spot_row("eu-west-1", "g.a", ">20%"), spot_row("eu-west-1", "g.b", "<5%")])
    quote, configs, _ = quoted(catalog)
    safe, risky = configs["aws:eu-west-1:g.b"], configs["aws:eu-west-1:g.a"]
    assert safe.risk.rate == BUCKET_RATES["<5%"] and risky.risk.rate == BUCKET_RATES[">20%"]
    assert safe.rate > risky.rate  # fewer restarts, more work per hour at the same price
    assert quote.plan.solution.main_config.pool.instance_type == "g.b"
    risk = quote_json(quote)["plan"]["phases"][0]["risk"]
    assert "Advisor bucket <5%" in risk["rate_source"] and risk["rate_is_default"] is False


def test_a_pool_without_published_data_is_marked_as_a_default():
    quote, _, _ = quoted(Catalog.of([spot_row("us-central1", "n1-v100", None, cloud="gcp")]))
    phase = quote_json(quote)["plan"]["phases"][0]
    assert phase["risk"]["rate_is_default"] is True
    assert phase["risk"]["interruptions_per_hour"] == pytest.approx(CLOUD_DEFAULT_RATES["gcp"], rel=1e-5)


def test_a_trace_that_covers_a_pool_replaces_its_bucket():
    west, east = spot_row("us-west-2", "p3.2xlarge", ">20%"), spot_row("us-east-1", "p3.2xlarge", ">20%")
    assert estimate(west).rate == pytest.approx(TRACE_POOLS[("aws", "us-west-2", "p3.2xlarge")].rate)
    assert "trace" in estimate(west).source
    assert estimate(west).rate > estimate(east).rate  # the paper's low-availability region
    assert estimate(spot_row("eu-west-1", "p3.2xlarge", ">20%")).rate == BUCKET_RATES[">20%"]


def test_past_runs_move_the_rate_both_ways(tmp_path):
    store = tmp_path / "learned_rates.json"
    key = ("aws", "eu-west-1", "g.a")
    learned.record(*key, preemptions=0, node_hours=500.0, path=store)
    calm = learned.load(store)
    learned.record(*key, preemptions=80, node_hours=10.0, path=store)
    assert learned.load(store)[key] == (80, 510.0)
    row = spot_row("eu-west-1", "g.a", ">20%")
    prior = estimate(row).rate
    assert estimate(row, learned=calm).rate < prior / 10
    stormy = estimate(row, learned={key: (80, 10.0)})
    assert stormy.rate > prior and "past runs" in stormy.source


def test_the_quote_reads_past_runs_from_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DANLU_DATA_DIR", str(tmp_path))
    catalog = Catalog.of([spot_row("eu-west-1", "g.a", "<5%"), spot_row("eu-west-1", "g.b", "<5%", spot=1.05)])
    assert make_quote(spot_job(), catalog, top=0, frontier_points=0).plan.solution.main_config.pool \
        .instance_type == "g.a"
    learned.record("aws", "eu-west-1", "g.a", preemptions=200, node_hours=100.0)
    assert make_quote(spot_job(), catalog, top=0, frontier_points=0).plan.solution.main_config.pool \
        .instance_type == "g.b"
    (tmp_path / learned.FILE_NAME).write_text("{not json")
    quote = make_quote(spot_job(), catalog, top=0, frontier_points=0)
    assert quote.plan is not None and any("past runs" in w for w in quote.candidates.warnings)


@pytest.mark.shared
def test_the_trace_figures_are_what_the_trace_files_say():
    folder = shared_path("traces", "skypilot-spot-traces", "availability", "1-node", "aws-02-15-2023")
    by_region: dict[str, list] = {}
    for f in sorted(folder.glob("*.json")):
        t = read_trace(f)
        by_region.setdefault(t.pool[:-1], []).append(t)
    assert {("aws", r, "p3.2xlarge") for r in by_region} == set(TRACE_POOLS)
    for region, traces in by_region.items():
        pool = TRACE_POOLS[("aws", region, "p3.2xlarge")]
        g = traces[0].gap_seconds / 3600
        pre = sum(int(np.sum(t.available[:-1] & ~t.available[1:])) for t in traces)
        hours = sum(int(t.available.sum()) for t in traces) * g
        outages = []
        for t in traces:
            edges = np.flatnonzero(np.diff(np.concatenate([[0], (~t.available).astype(int), [0]])))
            outages += list((edges[1::2] - edges[::2]) * g)
        assert (pool.zones, pool.preemptions) == (len(traces), pre)
        assert pool.available_hours == pytest.approx(hours, abs=0.01)
        assert pool.mean_outage_hours == pytest.approx(np.mean(outages), abs=0.001)
        assert pool.p90_outage_hours == pytest.approx(np.quantile(outages, 0.9), abs=0.001)
        assert json.dumps(pool.rate)  # a finite number
