"""``planner simulate JOB --trace PATH`` from the job file alone: C, D, d and prices."""

from __future__ import annotations

import json

import pytest

from planner.cli import main
from pricing.sources import resolve_catalog
from tests.simulate.helpers import write_trace

JOB = """\
name = "sim-from-job"
[workload]
steps = 36000
[workload.throughput]
V100 = 2.5
A100 = 5.0
[constraints]
deadline_hours = 6
[overheads]
restart_minutes = 30
"""


@pytest.fixture
def job(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(JOB, encoding="utf-8")
    return path


def _run(capsys, *argv) -> dict:
    assert main(["simulate", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _catalog_prices(cloud: str, region: str, instance: str) -> tuple[float, float]:
    rows = [o for o in resolve_catalog(None, use_cache=False)
            if (o.cloud, o.region, o.instance_type) == (cloud, region, instance)]
    return rows[0].on_demand, min(o.spot for o in rows if o.spot)


def test_the_model_comes_from_the_job_and_the_traces_instance_type(job, tmp_path, capsys):
    # us-east-1a_v100_1 is a p3.2xlarge (1 V100) in us-east-1: 36000 steps at 2.5 steps/s = 4 h
    trace = write_trace(tmp_path / "us-east-1a_v100_1.json", [0] * 24, gap_seconds=1800)
    out = _run(capsys, job, "--trace", trace)
    model = out["model"]
    on_demand, spot = _catalog_prices("aws", "us-east-1", "p3.2xlarge")
    assert model["job_hours"] == pytest.approx(4.0)
    assert model["deadline_hours"] == 6 and model["restart_hours"] == 0.5
    assert model["on_demand_price"] == on_demand and model["spot_price"] == spot
    assert model["pool"] == "aws:us-east-1:p3.2xlarge" and model["nodes"] == 1
    assert model["from"]["job_hours"] == "job: workload on 1 x p3.2xlarge (the trace's instance type)"
    assert model["from"]["restart_hours"] == "job: overheads.restart_minutes"
    # always-available spot: spot price for C + d
    assert out["policies"]["greedy"]["cost_usd"] == pytest.approx(spot * 4.5)
    assert out["trace"]["formats"] == ["json 0/1 (1 = unavailable)"]


def test_flags_override_the_job_and_a_gang_trace_sizes_the_job(job, tmp_path, capsys):
    trace = write_trace(tmp_path / "16-node" / "us-east-2b_v100_1.json", [16] * 6 + [3] * 6, gap_seconds=3600)
    out = _run(capsys, job, "--trace", trace, "--deadline-hours", "8", "--restart-hours", "0.25",
               "--on-demand-price", "50")
    model = out["model"]
    # 16 nodes of 1 V100, linear scaling: 36000 / (16 * 2.5 * 3600) = 0.25 h
    assert model["nodes"] == 16 and model["job_hours"] == pytest.approx(0.25)
    assert model["deadline_hours"] == 8 and model["restart_hours"] == 0.25 and model["on_demand_price"] == 50
    assert model["from"]["deadline_hours"] == "flag" and model["from"]["on_demand_price"] == "flag"
    assert model["spot_price"] == pytest.approx(16 * _catalog_prices("aws", "us-east-2", "p3.2xlarge")[1])


def test_a_named_pool_and_the_trace_price_info(job, tmp_path, capsys):
    zone = tmp_path / "h100" / "us-central1-a"
    zone.mkdir(parents=True)
    (zone / "full.json").write_text(json.dumps({
        "metadata": {"gap_seconds": 1800, "price_info": {"price": 18.98, "on_demand_price": 82.53}},
        "data": [0] * 20}), encoding="utf-8")
    out = _run(capsys, job, "--trace", tmp_path / "h100", "--pool", "aws:us-east-1:p3.2xlarge")
    model = out["model"]
    assert model["on_demand_price"] == 82.53 and model["from"]["on_demand_price"].startswith("trace: metadata")
    assert model["from"]["spot_price"] == "trace: its own prices (mean shown)" and model["spot_price"] == pytest.approx(18.98)
    assert out["policies"]["greedy"]["cost_usd"] == pytest.approx(18.98 * 4.5)
    assert model["job_hours"] == pytest.approx(4.0)


def test_without_an_instance_type_the_quote_chooses(job, tmp_path, capsys):
    trace = write_trace(tmp_path / "somewhere.json", [0] * 30, gap_seconds=1800)
    out = _run(capsys, job, "--trace", trace)
    model = out["model"]
    assert model["from"]["job_hours"].endswith("(the quote's choice)")
    cloud, region, instance = model["pool"].split(":")
    assert _catalog_prices(cloud, region, instance)[0] * model["nodes"] == pytest.approx(model["on_demand_price"])


@pytest.mark.parametrize(
    ("body", "argv", "message"),
    [
        (JOB.replace("deadline_hours = 6", ""), [], "constraints.deadline_hours: not set"),
        (JOB.replace("V100 = 2.5\n", ""), [], 'add "V100" = <units per second per GPU>'),
        (JOB, ["--pool", "aws:us-east-1"], "expected cloud:region:instance_type"),
        (JOB, ["--pool", "aws:mars-1:p3.2xlarge"], "aws:mars-1:p3.2xlarge (from --pool) is not in the catalog"),
    ],
)
def test_what_the_job_lacks_is_named_with_the_fix(tmp_path, capsys, body, argv, message):
    path = tmp_path / "job.toml"
    path.write_text(body, encoding="utf-8")
    trace = write_trace(tmp_path / "us-east-1a_v100_1.json", [0] * 24, gap_seconds=1800)
    assert main(["simulate", str(path), "--trace", str(trace), *argv]) == 2
    assert message in capsys.readouterr().err


def test_zones_of_several_regions_are_priced_in_the_first(job, tmp_path, capsys):
    folder = tmp_path / "4-node"
    write_trace(folder / "us-east-1f_v100_1.json", [4, 4, 0, 4] * 4, gap_seconds=1800)
    write_trace(folder / "us-west-2c_v100_1.json", [4, 0, 4, 4] * 4, gap_seconds=1800)
    model = _run(capsys, job, "--trace", folder)["model"]
    assert model["pool"] == "aws:us-east-1:p3.2xlarge" and model["nodes"] == 4
    assert model["job_hours"] == pytest.approx(1.0)  # 36000 steps on 4 V100s at 2.5 steps/s each


@pytest.mark.parametrize(
    ("deadline", "argv", "hint"),
    [
        # 4 h of work on one V100 and a 0.5 h restart: 3 nodes (1.33 h) are the fewest within 2 h
        ("2", [], "; on 1 x aws:us-east-1:p3.2xlarge the job takes 4 h: --nodes 3 meets the deadline (1.333 h)"),
        ("2", ["--nodes", "2"], "; on 2 x aws:us-east-1:p3.2xlarge the job takes 2 h: --nodes 3 meets"),
        # not even max_nodes = 8 (0.5 h of work) and the restart fit 0.6 h
        ("0.6", [], "the job takes 4 h, more than the deadline on up to 8 nodes (the job's max_nodes)"),
        # C given by the flag: no pool's size to change
        ("2", ["--job-hours", "4"], None),
    ],
)
def test_a_job_too_long_for_its_deadline_is_told_the_nodes_that_fit_it(tmp_path, capsys, deadline, argv, hint):
    path = tmp_path / "job.toml"
    path.write_text(JOB.replace("deadline_hours = 6", f"deadline_hours = {deadline}"), encoding="utf-8")
    trace = write_trace(tmp_path / "us-east-1a_v100_1.json", [0] * 24, gap_seconds=1800)
    assert main(["simulate", str(path), "--trace", str(trace), *argv]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"deadline_hours {deadline} cannot be met" in err and "Traceback" not in err
    if hint is None:
        assert "--nodes" not in err
    else:
        assert hint in err
