"""`planner prices refresh` end to end: fixtures -> refresh -> cache -> `planner quote`, and its failures."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import responses

import pricing.aws
import pricing.gcp
from planner.cli import main
from pricing.aws import SPOT_ADVISOR_URL
from pricing.cache import PriceCache, default_cache_path
from pricing.catalog import Offering
from pricing.refresh import FetchResult, refresh
from tests.live_prices.conftest import NOW, fixture
from tests.live_prices.test_aws import Aws
from tests.live_prices.test_gcp import fetcher as gcp_fetcher
from tests.live_prices.test_gcp import serve as serve_gcp

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)

ROUND_TRIP_JOB = """
name = "live-round-trip"

[workload]
model = "gpt-7b"
tokens = 1.0e8
min_gpu_memory_gb = 40
checkpoint_gb = 0

[workload.throughput]
"A100" = 3000

[constraints]
deadline_hours = 1000
budget_usd = 100000
clouds = ["gcp"]
regions = ["us-central1"]
max_nodes = 1

[purchase]
allow = ["on_demand"]
"""


def cheap_a100_skus() -> list[dict[str, Any]]:
    """The recorded SKUs with the on-demand A100 at $0.05/h: a2-highgpu-1g beats every embedded pool."""
    skus = fixture("gcp/list_skus_page1.json")["skus"] + fixture("gcp/list_skus_page2.json")["skus"]
    for sku in skus:
        if sku["skuId"] == "A100-0001-0001":
            sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"] = {
                "currencyCode": "USD", "units": "0", "nanos": 50_000_000,
            }  # fmt: skip
    return skus


def test_round_trip_refresh_then_quote_picks_the_fixture_cheapest_pool(
    tmp_path: Path, data_dir: Path, retry: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pricing.gcp, "create_fetcher", lambda **options: gcp_fetcher(retry))
    with responses.RequestsMock() as mock:
        serve_gcp(mock, skus=cheap_a100_skus())
        assert main(["prices", "refresh", "--cloud", "gcp", "--region", "us-central1"]) == 0
    refreshed = capsys.readouterr().out
    assert "gcp" in refreshed and str(default_cache_path()) in refreshed.replace("\n", "")

    cached = {o.instance_type: o for o in PriceCache(default_cache_path()).load()}
    expected_hourly = 12 * 0.031611 + 85 * 0.004237 + 0.05
    assert cached["a2-highgpu-1g"].on_demand == pytest.approx(expected_hourly)

    job = tmp_path / "job.toml"
    job.write_text(ROUND_TRIP_JOB)
    before = dt.date.today()
    assert main(["quote", str(job), "--json"]) == 0
    after = dt.date.today()
    out = json.loads(capsys.readouterr().out)
    phase = out["plan"]["phases"][0]
    assert (phase["cloud"], phase["region"], phase["instance_type"], phase["purchase"]) == (
        "gcp", "us-central1", "a2-highgpu-1g", "on_demand",
    )  # fmt: skip
    assert phase["zone"] is None  # the cached regional row, not the embedded per-zone rows
    assert phase["hourly_usd"] == pytest.approx(expected_hourly, rel=1e-3)
    prices = out["prices"]
    assert "cache" in prices["origin"]
    # The fetcher's clock is the fixture's NOW, so that is the prices' date; the quote ages them
    # against the real calendar, read around the call so that midnight cannot fall in between.
    assert prices["as_of"] == NOW.date().isoformat()
    assert prices["age_days"] in {(before - NOW.date()).days, (after - NOW.date()).days}


def test_partial_failure_keeps_what_was_fetched_and_reports_the_rest(
    data_dir: Path, retry: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = PriceCache(default_cache_path())
    old = Offering(cloud="aws", region="eu-west-1", zone=None, instance_type="p4d.24xlarge", gpu="A100",
                   gpus_per_node=8, gpu_memory_gb=40.0, vcpus=96.0, memory_gb=1152.0, on_demand=24.0)  # fmt: skip
    cache.store([old], cloud="aws", fetched_at=T0)

    aws = Aws(retry, regions=("us-east-1", "eu-west-1"))
    aws.whole_region("us-east-1")
    for _ in range(3):
        aws.ec2_stub["eu-west-1"].add_client_error("describe_instance_types", service_error_code="RequestLimitExceeded")
    monkeypatch.setattr(pricing.aws, "create_fetcher", lambda **options: aws.fetcher)
    with aws.pricing_stub, aws.ec2_stub["us-east-1"], aws.ec2_stub["eu-west-1"]:
        code = main(["prices", "refresh", "--cloud", "aws", "--region", "us-east-1", "--region", "eu-west-1", "--json"])
    assert code == 1
    report = json.loads(capsys.readouterr().out)
    assert report["complete"] is False and report["stored_rows"] == 5
    [aws_report] = report["clouds"]
    assert aws_report["regions"] == ["us-east-1"]
    assert aws_report["errors"][0]["region"] == "eu-west-1"
    assert "describe_instance_types in eu-west-1 was still throttled" in aws_report["errors"][0]["message"]

    by_region = {}
    for o in cache.load():
        by_region.setdefault(o.region, []).append(o)
    assert len(by_region["us-east-1"]) == 5 and by_region["us-east-1"][0].as_of == NOW.date()
    assert [(o.on_demand, o.as_of) for o in by_region["eu-west-1"]] == [(24.0, T0.date())]  # kept as it was


def test_missing_aws_credentials_is_one_line_exit_2_without_secrets(
    isolated_cloud_env: None, data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLESECRETKEY1")  # no secret key: a half-set chain
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        mock.get(SPOT_ADVISOR_URL, json=fixture("aws/spot-advisor-data.json"))
        assert main(["prices", "refresh", "--cloud", "aws", "--region", "us-east-1"]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert line.startswith("error: aws: no usable credentials") and "aws configure" in line
    assert "AKIAEXAMPLESECRETKEY1" not in captured.out + captured.err
    assert not default_cache_path().exists()


def test_missing_gcp_credentials_names_the_fix(
    isolated_cloud_env: None, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with responses.RequestsMock(assert_all_requests_are_fired=False):
        assert main(["prices", "refresh", "--cloud", "gcp"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert (
        line.startswith("error: gcp: no Application Default Credentials")
        and "gcloud auth application-default login" in line
    )


def test_every_cloud_failing_lists_one_line_per_cloud(
    isolated_cloud_env: None, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with responses.RequestsMock(assert_all_requests_are_fired=False):
        assert main(["prices", "refresh"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("error: aws: ") and lines[1].startswith("azure: ") and lines[2].startswith("gcp: ")
    assert "AZURE_SUBSCRIPTION_ID" in lines[1]


def test_region_needs_exactly_one_cloud(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prices", "refresh", "--cloud", "aws", "--cloud", "gcp", "--region", "us-east-1"]) == 2
    assert "exactly one --cloud" in capsys.readouterr().err


def test_progress_is_reported_per_region(retry: Any, tmp_path: Path) -> None:
    aws = Aws(retry)
    aws.whole_region()
    calls: list[tuple[str, str, int, int]] = []
    with aws.pricing_stub, aws.ec2_stub["us-east-1"]:
        report = refresh(
            ["aws"], PriceCache(tmp_path / "p.sqlite3"), regions=["us-east-1"],
            make_fetcher=lambda cloud: aws.fetcher,
            progress_for=lambda cloud: lambda message, done, total: calls.append((cloud, message, done, total)),
        )  # fmt: skip
    assert report.complete and report.stored_rows == 5
    assert calls == [("aws", "aws us-east-1", 0, 1), ("aws", "aws done", 1, 1)]


class _Interrupted:
    cloud = "gcp"

    def fetch(self, regions: Any, progress: Any = None) -> FetchResult:
        raise KeyboardInterrupt


class _Done:
    cloud = "aws"

    def fetch(self, regions: Any, progress: Any = None) -> FetchResult:
        o = Offering(cloud="aws", region="us-east-1", zone=None, instance_type="g5.xlarge", gpu="A10G",
                     gpus_per_node=1, gpu_memory_gb=22.35, vcpus=4, memory_gb=16, on_demand=1.006)  # fmt: skip
        return FetchResult(cloud="aws", fetched_at=NOW, offerings=(o,), regions=("us-east-1",))


def test_an_interrupted_refresh_writes_nothing(tmp_path: Path) -> None:
    cache = PriceCache(tmp_path / "p.sqlite3")
    fetchers = {"aws": _Done(), "gcp": _Interrupted()}
    with pytest.raises(KeyboardInterrupt):
        refresh(["aws", "gcp"], cache, make_fetcher=fetchers.__getitem__)
    assert not cache.exists


def test_missing_azure_credentials_names_az_login(
    isolated_cloud_env: None, data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", "00000000-0000-0000-0000-000000000000")
    monkeypatch.setenv("PATH", "/nonexistent")  # no az, azd or pwsh for DefaultAzureCredential to run
    with responses.RequestsMock(assert_all_requests_are_fired=False):
        assert main(["prices", "refresh", "--cloud", "azure", "--region", "eastus"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: azure: no usable credentials") and "az login" in line
