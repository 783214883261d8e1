"""Data gravity: a dataset or a checkpoint in another region or cloud costs egress and time."""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.job import Data, parse_job
from planner.milp import Limits
from planner.plan import plan
from planner.quote import make_quote
from pricing.catalog import Catalog, Offering
from pricing.egress import (
    DEFAULT_TABLE,
    EGRESS_TABLES,
    Site,
    continent,
    parse_site,
    usd_per_gb,
)
from runtime.control.replan import ReplanRequest, replan

from .bruteforce import brute_force_cost
from .test_optimality import jobs

A100 = ("A100-80GB", 80.0)


def row(cloud: str, region: str, price: float, name: str = "gpu.x", spot: float | None = None) -> Offering:
    return Offering(cloud, region, None, name, A100[0], 1, A100[1], 8.0, 64.0, price, spot=spot)


def job(data: dict | None = None, run: dict | None = None, **constraints) -> dict:
    raw = {"name": "gravity", "workload": {"model": "gpt-7b", "tokens": 2e8, "checkpoint_gb": 14},
           "purchase": {"allow": ["on_demand"]}, "constraints": {"max_nodes": 1, **constraints}}
    if data:
        raw["data"] = data
    if run:
        raw["run"] = run
    return raw


# Two clouds selling the same GPU: AWS is cheaper by the hour, the data may sit in GCP.
CATALOG = Catalog.of([row("aws", "us-east-1", 3.0), row("gcp", "us-central1", 3.6)], origin="test")


def chosen_cloud(raw: dict, catalog: Catalog = CATALOG) -> tuple[str, float]:
    quote = make_quote(parse_job(raw), catalog, top=0, frontier_points=0)
    assert quote.plan is not None
    return quote.plan.solution.main_config.pool.cloud, quote.plan.expected_cost_usd


def test_data_in_another_cloud_moves_the_pool_only_when_egress_exceeds_the_price_gap():
    cloud_without, cost_aws = chosen_cloud(job())
    assert cloud_without == "aws"
    only_gcp = Catalog.of([o for o in CATALOG if o.cloud == "gcp"], origin="test")
    _, cost_gcp = chosen_cloud(job(), only_gcp)
    gap = cost_gcp - cost_aws
    assert gap > 0
    # What GCP bills for each GB the AWS pool would read (its internet egress).
    per_gb = usd_per_gb(Site("gcp", "us-central1"), Site("aws", "us-east-1"))
    for factor, expected in ((0.8, "aws"), (1.25, "gcp")):
        gb = factor * gap / per_gb
        cloud, cost = chosen_cloud(job(data={"location": "gcp:us-central1", "dataset_gb": gb}))
        assert cloud == expected, f"dataset of {gb:.0f} GB ({factor} x the gap)"
        assert cost == pytest.approx(min(cost_aws + gb * per_gb, cost_gcp), rel=1e-6)


def test_egress_is_a_cost_line_and_staging_time_is_in_the_hours():
    quote_dry = make_quote(parse_job(job(clouds=["aws"])), CATALOG, top=0, frontier_points=0)
    raw = job(data={"location": "gcp:us-central1", "dataset_gb": 100, "transfer_gbps": 2.0}, clouds=["aws"])
    quote = make_quote(parse_job(raw), CATALOG, top=0, frontier_points=0)
    lines = {line.label: line.usd for line in quote.plan.lines}
    egress = next(usd for label, usd in lines.items() if label.startswith("data egress"))
    assert egress == pytest.approx(100 * EGRESS_TABLES["gcp"].internet_usd_per_gb)
    assert sum(lines.values()) == pytest.approx(quote.plan.expected_cost_usd)
    # 100 GB at 2 Gbit/s is 400 s of copying before the nodes start: time, not node-hours.
    assert quote.plan.expected_hours - quote_dry.plan.expected_hours == pytest.approx(400 / 3600)
    assert lines["compute"] == pytest.approx(quote_dry.plan.expected_cost_usd)


def test_reading_every_epoch_pays_every_epoch():
    once = make_quote(parse_job(job(data={"location": "gcp:us-central1", "dataset_gb": 10})), CATALOG,
                      top=0, frontier_points=0)
    streamed = make_quote(parse_job(job(data={"location": "gcp:us-central1", "dataset_gb": 10,
                                              "read": "every_epoch", "epochs": 3})), CATALOG, top=0,
                          frontier_points=0)
    for q in (once, streamed):
        assert q.plan.solution.main_config.pool.cloud == "aws"
    egress = [sum(p.data_usd for p in q.plan.solution.phases) for q in (once, streamed)]
    assert egress[1] == pytest.approx(3 * egress[0])
    assert streamed.plan.expected_hours < once.plan.expected_hours  # streamed reads need no staging copy


def test_regions_stay_the_hard_rule_and_the_data_stays_a_cost():
    raw = job(data={"location": "gcp:us-central1", "dataset_gb": 10_000}, clouds=["aws"])
    cloud, cost = chosen_cloud(raw)
    assert cloud == "aws"  # residency wins over the (large) egress bill
    _, cost_dry = chosen_cloud(job(clouds=["aws"]))
    assert cost - cost_dry == pytest.approx(10_000 * usd_per_gb(Site("gcp", "us-central1"), Site("aws", "us-east-1")))


def test_staging_is_paid_once_per_region_however_many_phases_run_there():
    # A deadline only two pools together can meet; both in the data's region -> one copy, no egress.
    two = Catalog.of([row("aws", "us-east-1", 3.0, "a.x"), row("aws", "us-east-1", 9.0, "b.x"),
                      row("gcp", "us-central1", 3.6)], origin="test")
    raw = job(data={"location": "aws:us-east-1", "dataset_gb": 50}, clouds=["aws"])
    assert sum(p.egress_usd for p in make_quote(parse_job(raw), two, top=0, frontier_points=0)
               .plan.solution.phases) == 0
    raw = job(data={"location": "aws:eu-west-1", "dataset_gb": 50}, clouds=["aws"])
    quote = make_quote(parse_job(raw), two, top=0, frontier_points=0)
    staged = [p for p in quote.plan.solution.phases if p.stage_hours > 0]
    assert len(staged) == 1
    assert staged[0].data_usd == pytest.approx(50 * EGRESS_TABLES["aws"].inter_region_usd_per_gb)


def test_a_replan_pays_for_a_checkpoint_in_another_cloud():
    spec = parse_job(job())
    limits = Limits(switch_hours=10 / 60)
    store = Site("gcp", "us-central1")
    fresh = plan(spec, CATALOG, limits=limits, work=1e8)
    moved = plan(spec, CATALOG, limits=limits, work=1e8, checkpoint_location=store, resume=True)
    first = moved.solution.phases[0]
    assert first.config.pool.cloud == "aws"
    assert first.checkpoint_usd == pytest.approx(14 * usd_per_gb(store, Site("aws", "us-east-1")))
    assert first.load_hours == pytest.approx(14 * 8 / 1.0 / 3600)
    assert moved.solution.cost == pytest.approx(
        fresh.solution.cost + first.checkpoint_usd + first.config.burn * first.load_hours)
    # A checkpoint worth more than the price gap keeps the re-plan in its cloud.
    heavy = parse_job({**job(), "workload": {"model": "gpt-7b", "tokens": 2e8, "checkpoint_gb": 2000}})
    stay = plan(heavy, CATALOG, limits=limits, work=1e6, checkpoint_location=store, resume=True)
    assert stay.solution.phases[0].config.pool.cloud == "gcp"


def test_the_replan_request_carries_the_checkpoint_location():
    heavy = parse_job({**job(), "workload": {"model": "gpt-7b", "tokens": 2e8, "checkpoint_gb": 2000}})
    base = {"job": heavy, "catalog": CATALOG, "work_left": 1e6, "budget_left_usd": None, "hours_left": None}
    assert replan(ReplanRequest(**base)).pool.cloud == "aws"
    assert replan(ReplanRequest(**base, checkpoint_location=Site("gcp", "us-central1"))).pool.cloud == "gcp"


def test_the_job_names_its_checkpoint_store():
    spec = parse_job(job(run={"checkpoint_dir": "gs://bucket/ckpt", "checkpoint_region": "us-central1"}))
    assert spec.run.checkpoint_site == Site("gcp", "us-central1")
    assert parse_job(job(run={"checkpoint_dir": "runs/ckpt"})).run.checkpoint_site is None


def test_egress_tables_are_dated_and_sourced_and_priced_by_the_source():
    for table in (*EGRESS_TABLES.values(), DEFAULT_TABLE):
        assert table.source and isinstance(table.as_of, dt.date)
        assert 0 < table.inter_region_usd_per_gb <= table.inter_continent_usd_per_gb <= table.internet_usd_per_gb
    here = Site("aws", "us-east-1")
    assert usd_per_gb(here, here) == 0
    assert usd_per_gb(here, Site("gcp", "us-central1")) == EGRESS_TABLES["aws"].internet_usd_per_gb
    assert usd_per_gb(Site("gcp", "us-central1"), here) == EGRESS_TABLES["gcp"].internet_usd_per_gb
    assert usd_per_gb(Site("azure", "eastus"), Site("azure", "westeurope")) == \
        EGRESS_TABLES["azure"].inter_continent_usd_per_gb
    assert usd_per_gb(Site("azure", "eastus"), Site("azure", "westus2")) == \
        EGRESS_TABLES["azure"].inter_region_usd_per_gb
    assert usd_per_gb(Site("lambda", "us-east-1"), here) == DEFAULT_TABLE.internet_usd_per_gb
    assert continent(Site("gcp", "europe-west4")) == "eu"


@pytest.mark.parametrize("data, needle", [
    ({"location": "s3://bucket/data", "dataset_gb": 5}, "region"),
    ({"location": "ftp://host/data", "dataset_gb": 5}, "scheme"),
    ({"location": "gcp:us-central1"}, "data.dataset_gb"),
    ({"location": "gcp:us-central1", "dataset_gb": 5, "read": "always"}, "data.read"),
    ({"location": "gcp:us-central1", "dataset_gb": -1}, "data.dataset_gb"),
])
def test_a_bad_data_section_is_exit_2_naming_the_key(tmp_path, data, needle):
    path = tmp_path / "job.toml"
    fields = "\n".join(f"{k} = {json.dumps(v)}" for k, v in data.items())
    path.write_text(f'name = "bad"\n[workload]\nmodel = "gpt-7b"\ntokens = 1e9\n[data]\n{fields}\n')
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "quote", str(path), "--no-cache"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(path) in proc.stderr and needle in proc.stderr


def test_parse_site_reads_both_forms():
    assert parse_site("gcp:us-central1") == Site("gcp", "us-central1")
    assert parse_site("s3://b/p", "eu-west-1") == Site("aws", "eu-west-1")
    assert parse_site("az://c/p", "westeurope") == Site("azure", "westeurope")


SITES = [("aws", "us-east-1"), ("aws", "eu-west-1"), ("gcp", "us-central1"), ("azure", "eastus")]


@st.composite
def gravity_catalogs(draw):
    # Few GPU types at close prices in several sites, so egress often decides between them.
    rows = []
    for i in range(draw(st.integers(2, 6))):
        cloud, region = draw(st.sampled_from(SITES))
        gpu, mem = draw(st.sampled_from([("A100-80GB", 80), ("H100", 80)]))
        gpn = draw(st.sampled_from([1, 2, 8]))
        price = round(draw(st.floats(2.0, 5.0)) * gpn, 4)
        rows.append(Offering(cloud, region, None, f"t{i}.x", gpu, gpn, mem, 8.0 * gpn, 64.0 * gpn, price))
    return Catalog.of(rows, origin="generated")


@st.composite
def gravity_jobs(draw):
    spec = draw(jobs())
    cloud, region = draw(st.sampled_from(SITES))
    data = Data(location=f"{cloud}:{region}", dataset_gb=draw(st.sampled_from([0.0, 10.0, 500.0, 5000.0])),
                read=draw(st.sampled_from(["once", "every_epoch"])), epochs=draw(st.integers(1, 5)),
                transfer_gbps=draw(st.sampled_from([0.5, 1.0, 10.0])))
    update = {"data": data}
    if draw(st.booleans()):
        store_cloud, store_region = draw(st.sampled_from(SITES))
        scheme = {"aws": "s3", "gcp": "gs", "azure": "az"}[store_cloud]
        update["run"] = spec.run.model_copy(update={"checkpoint_dir": f"{scheme}://b/ckpt",
                                                    "checkpoint_region": store_region})
        update["workload"] = spec.workload.model_copy(
            update={"checkpoint_gb": draw(st.sampled_from([1.0, 14.0, 400.0]))})
    return spec.model_copy(update=update)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=gravity_jobs(), catalog=gravity_catalogs())
def test_the_brute_force_agrees_with_the_milp_on_jobs_with_data_gravity(spec, catalog):
    quote = make_quote(spec, catalog, top=0, frontier_points=0)
    expected = brute_force_cost(spec, catalog)
    if expected is None:
        assert quote.plan is None, f"brute force found no plan, MILP found {quote.plan.expected_cost_usd}"
    else:
        assert quote.plan is not None, f"MILP infeasible, brute force found ${expected:.4f}"
        exact = quote.exact or quote.plan  # a simpler plan within [objective] tolerance may be the plan
        assert exact.expected_cost_usd == pytest.approx(expected, rel=1e-6, abs=1e-6)
        assert quote.plan.expected_cost_usd <= expected * (1 + spec.objective.tolerance) * (1 + 1e-6)
        assert math.isfinite(quote.plan.expected_hours)


def test_a_second_phase_loads_the_checkpoint_from_its_store():
    # Only a mix of the slow cheap pool (AWS) and the fast dear one (GCP) meets the deadline.
    catalog = Catalog.of([row("aws", "us-east-1", 3.0),
                          Offering("gcp", "us-central1", None, "h.x", "H100", 8, 80.0, 8.0, 64.0, 90.0)],
                         origin="test")
    raw = job(run={"checkpoint_dir": "az://c/ckpt", "checkpoint_region": "eastus"}, max_nodes=1)
    aws_hours = make_quote(parse_job({**raw, "constraints": {"max_nodes": 1, "clouds": ["aws"]}}), catalog,
                           top=0, frontier_points=0).plan.expected_hours
    spec = parse_job({**raw, "constraints": {"max_nodes": 1, "deadline_hours": aws_hours * 0.6}})
    quote = make_quote(spec, catalog, top=0, frontier_points=0)
    phases = quote.plan.solution.phases
    assert len(phases) == 2
    store = Site("azure", "eastus")
    assert phases[0].checkpoint_usd == 0 and phases[0].load_hours == 0
    assert phases[1].checkpoint_usd == pytest.approx(14 * usd_per_gb(store, phases[1].config.site))
    assert phases[1].load_hours == pytest.approx(14 * 8 / 3600)
    assert (quote.exact or quote.plan).expected_cost_usd == pytest.approx(brute_force_cost(spec, catalog), rel=1e-6)
