"""Spot capacity waits: per-pool outages from the traces enter the expected time and the P90."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.job import parse_job
from planner.quote import make_quote
from planner.report import quote_json
from planner.simulate import spot_models
from pricing.catalog import Catalog, Offering
from pricing.risk import rate_from_trace
from pricing.spot_model import POOLED_WAIT, TRACE_WAITS, CapacityWait, capacity_wait, waits_from_trace
from pricing.traces import read_trace, read_traces

from ..conftest import shared_path


def p3(region: str, bucket: str | None = None, cloud: str = "aws") -> Offering:
    return Offering(cloud, region, f"{region}a", "p3.2xlarge", "V100", 1, 16, 8, 61, 3.06, spot=0.97,
                    interruption_bucket=bucket)


def spot_job(**overheads) -> dict:
    return {"name": "waits", "workload": {"model": "resnet50", "samples": 2e7, "checkpoint_gb": 0.1},
            "constraints": {"max_nodes": 1}, "purchase": {"allow": ["spot"]}, "overheads": overheads,
            "objective": {"tolerance": 0}}


def quoted(raw: dict, offering: Offering):
    q = make_quote(parse_job(raw), Catalog.of([offering], origin="test"), top=0, frontier_points=0)
    assert q.plan is not None
    return q


def test_waits_from_a_small_trace():
    # 1 = available here; two outages after preemptions (2 and 3 ticks), one at the start (no preemption)
    up = np.array([0, 1, 1, 0, 0, 1, 0, 0, 0, 1], dtype=bool)
    w = waits_from_trace([up], 3600)
    assert w.unavailable_share == pytest.approx(0.6)
    assert w.outage_mean == pytest.approx(2.5)
    # residual waits of the unavailable ticks: 1, 2, 1, 3, 2, 1 hours
    assert w.residual_mean == pytest.approx(10 / 6)


def test_truncated_waits_match_a_simulation():
    rng = np.random.default_rng(7)
    cw = CapacityWait(0.4, 2.0, 5.0, "test")
    patience = 1.5
    launch = np.where(rng.random(400_000) < 0.4, np.minimum(rng.exponential(5.0, 400_000), patience), 0.0)
    assert cw.launch(patience)[0] == pytest.approx(launch.mean(), rel=0.01)
    losses = rng.poisson(3.0, 100_000)
    total = np.array([np.minimum(rng.exponential(2.0, k), patience).sum() for k in losses])
    mean, p90 = cw.after_losses(3.0, patience)
    assert mean == pytest.approx(total.mean(), rel=0.01)
    assert p90 == pytest.approx(np.quantile(total, 0.9), rel=0.05)  # normal approximation of the sum


def test_a_pool_with_long_outages_gets_a_longer_p90():
    east, west = TRACE_WAITS[("aws", "us-east-1", "p3.2xlarge")], TRACE_WAITS[("aws", "us-west-2", "p3.2xlarge")]
    assert west.outage_mean > 4 * east.outage_mean
    for overheads in ({}, {"capacity_wait_minutes": 600}):  # re-plan after one restart; or wait up to 10 h
        q_east, q_west = quoted(spot_job(**overheads), p3("us-east-1")), quoted(spot_job(**overheads), p3("us-west-2"))
        assert q_west.plan.p90_hours > q_east.plan.p90_hours
        assert q_west.plan.expected_hours > q_east.plan.expected_hours
    patient = quoted(spot_job(capacity_wait_minutes=600), p3("us-west-2"))
    hasty = quoted(spot_job(), p3("us-west-2"))
    assert patient.plan.p90_hours > hasty.plan.p90_hours + 1.0  # waiting out 7 h outages shows


def test_waits_are_unbilled_time_in_the_expected_hours_and_the_p90():
    q = quoted(spot_job(capacity_wait_minutes=120), p3("us-west-2"))
    phase = q.plan.solution.phases[0]
    assert phase.wait_hours > 0.1 and phase.wait_p90_hours > phase.wait_hours
    assert phase.hours == pytest.approx(phase.work_hours + phase.switch_hours + phase.wait_hours)
    assert phase.cost == pytest.approx(phase.config.burn * phase.work_hours)  # no node bills while it waits
    phase_json = quote_json(q)["plan"]["phases"][0]["capacity_wait"]
    assert phase_json["expected_hours"] == round(phase.wait_hours, 4)
    assert "availability trace" in phase_json["source"] and phase_json["is_default"] is False


def test_buckets_scale_the_chance_of_meeting_an_outage_and_a_default_says_so():
    low, high = capacity_wait(p3("eu-west-1", "<5%")), capacity_wait(p3("eu-west-1", ">20%"))
    assert low.unavailable_share == pytest.approx(POOLED_WAIT.unavailable_share * 0.1)
    assert high.unavailable_share == pytest.approx(POOLED_WAIT.unavailable_share)
    assert low.launch(1.0)[1] < high.launch(1.0)[1]
    gcp = capacity_wait(p3("us-central1", cloud="gcp"))
    assert gcp.default and "default for gcp" in gcp.source


@pytest.mark.shared
def test_trace_figures_and_simulate_agree_with_the_trace_files(tmp_path):
    folder = shared_path("traces", "skypilot-spot-traces", "availability", "1-node", "aws-02-15-2023")
    files = sorted(folder.glob("*.json"))
    traces = [read_trace(f) for f in files]
    by_region: dict[str, list] = {}
    for t in traces:
        by_region.setdefault(t.pool[:-1], []).append(t)
    for region, zones in by_region.items():
        got = waits_from_trace([t.available for t in zones], zones[0].gap_seconds)
        want = TRACE_WAITS[("aws", region, "p3.2xlarge")]
        for key in ("unavailable_share", "outage_mean", "residual_mean"):
            assert getattr(got, key) == pytest.approx(getattr(want, key), abs=1e-4), (region, key)
    pooled = waits_from_trace([t.available for t in traces], traces[0].gap_seconds)
    assert pooled.outage_mean == pytest.approx(POOLED_WAIT.outage_mean, abs=1e-4)
    assert pooled.unavailable_share == pytest.approx(POOLED_WAIT.unavailable_share, abs=1e-4)
    # planner simulate reads a zone the way the quote's figures were made
    west = [f for f in files if f.name.startswith("us-west-2a")]
    model = spot_models(read_traces(west))
    zone = next(iter(model.values()))
    one = read_trace(west[0])
    assert zone["outage_mean"] == pytest.approx(waits_from_trace([one.available], one.gap_seconds).outage_mean)
    assert zone["interruptions_per_hour"] == pytest.approx(rate_from_trace(one.available.tolist(), one.gap_seconds))
    assert json.dumps(model)
