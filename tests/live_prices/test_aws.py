"""AWS fetcher against botocore Stubber responses in the real API shapes (moto for GpuInfo facts)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import boto3
import pytest
import responses
from botocore.stub import ANY, Stubber
from moto import mock_aws

from pricing.aws import (
    PRICE_LIST_FILTERS,
    SPOT_ADVISOR_URL,
    AwsPriceFetcher,
    SpotAdvisor,
    instance_facts,
    load_spot_advisor,
    parse_price_list_item,
)
from pricing.catalog import HOURS_PER_YEAR
from pricing.refresh import InvalidRegionError, MalformedResponseError
from tests.live_prices.conftest import NOW, fixture

GPU_TYPES = ["g4dn.xlarge", "g5.xlarge", "p4d.24xlarge", "p5.48xlarge", "p5e.48xlarge"]


def client(service: str) -> Any:
    # Dummy keys: the Stubber answers every call, nothing is signed or sent.
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")


def price_page(name: str) -> dict[str, Any]:
    body = fixture(name)
    body["PriceList"] = [json.dumps(item) for item in body["PriceList"]]  # the real API returns JSON strings
    return body


def spot_page(name: str) -> dict[str, Any]:
    body = fixture(name)
    for row in body["SpotPriceHistory"]:
        row["Timestamp"] = dt.datetime.fromisoformat(row["Timestamp"].replace("Z", "+00:00"))
    return body


def product_filters(region: str) -> list[dict[str, str]]:
    return [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}] + [
        {"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in PRICE_LIST_FILTERS
    ]


class Aws:
    """Stubbed pricing and per-region EC2 clients, and a fetcher wired to them."""

    def __init__(self, retry: Any, regions: tuple[str, ...] = ("us-east-1",)):
        self.pricing = client("pricing")
        self.pricing_stub = Stubber(self.pricing)
        self.ec2 = {r: client("ec2") for r in regions}
        self.ec2_stub = {r: Stubber(c) for r, c in self.ec2.items()}
        advisor = SpotAdvisor.parse(fixture("aws/spot-advisor-data.json"), "fixture")
        self.fetcher = AwsPriceFetcher(
            pricing_client=self.pricing,
            ec2_client=self.ec2.__getitem__,
            advisor=lambda: advisor,
            retry=retry,
            clock=lambda: NOW,
        )

    def instance_types(self, region: str = "us-east-1") -> None:
        stub = self.ec2_stub[region]
        stub.add_response(
            "describe_instance_types", fixture("aws/describe_instance_types_page1.json"), {"MaxResults": 100}
        )
        stub.add_response(
            "describe_instance_types",
            fixture("aws/describe_instance_types_page2.json"),
            {"MaxResults": 100, "NextToken": "it-page2"},
        )

    def products(self, region: str = "us-east-1", pages: tuple[int, ...] = (1, 2)) -> None:
        params = {
            "ServiceCode": "AmazonEC2",
            "FormatVersion": "aws_v1",
            "Filters": product_filters(region),
            "MaxResults": 100,
        }
        for page in pages:
            expected = dict(params, NextToken="page2-token") if page == 2 else params
            self.pricing_stub.add_response(
                "get_products", price_page(f"aws/get_products_us-east-1_page{page}.json"), expected
            )

    def spot(self, region: str = "us-east-1") -> None:
        params = {
            "InstanceTypes": GPU_TYPES,
            "ProductDescriptions": ["Linux/UNIX"],
            "StartTime": NOW,
            "MaxResults": 1000,
        }
        stub = self.ec2_stub[region]
        stub.add_response(
            "describe_spot_price_history", spot_page("aws/describe_spot_price_history_us-east-1_page1.json"), params
        )
        stub.add_response(
            "describe_spot_price_history",
            spot_page("aws/describe_spot_price_history_us-east-1_page2.json"),
            dict(params, NextToken="spot-page2"),
        )

    def whole_region(self, region: str = "us-east-1") -> None:
        self.instance_types(region)
        self.products(region)
        self.spot(region)

    def fetch(self, regions: list[str] | None = None) -> Any:
        stubs = [self.pricing_stub, *self.ec2_stub.values()]
        for s in stubs:
            s.activate()
        try:
            result = self.fetcher.fetch(regions if regions is not None else ["us-east-1"])
            for s in stubs:
                s.assert_no_pending_responses()
            return result
        finally:
            for s in stubs:
                s.deactivate()


def by_key(result: Any) -> dict[tuple[str, str | None], Any]:
    return {(o.instance_type, o.zone): o for o in result.offerings}


def test_one_region_joins_list_prices_spot_per_zone_facts_and_buckets(retry: Any) -> None:
    aws = Aws(retry)
    aws.whole_region()
    result = aws.fetch()

    assert result.regions == ("us-east-1",) and result.errors == ()
    rows = by_key(result)
    assert sorted(rows) == [
        ("g4dn.xlarge", "us-east-1c"), ("g5.xlarge", "us-east-1a"), ("p4d.24xlarge", "us-east-1a"),
        ("p4d.24xlarge", "us-east-1b"), ("p5.48xlarge", "us-east-1d"),
    ]  # fmt: skip
    p4d = rows[("p4d.24xlarge", "us-east-1a")]
    assert (p4d.cloud, p4d.region, p4d.gpu, p4d.gpus_per_node, p4d.gpu_memory_gb) == (
        "aws",
        "us-east-1",
        "A100",
        8,
        40.0,
    )
    assert (p4d.vcpus, p4d.memory_gb) == (96.0, 1152.0)
    assert p4d.on_demand == pytest.approx(21.957642)
    assert p4d.spot == pytest.approx(5.0933)  # the latest of the two us-east-1a entries
    assert rows[("p4d.24xlarge", "us-east-1b")].spot == pytest.approx(6.1245)
    assert p4d.interruption_bucket == "10-15%"
    assert rows[("g4dn.xlarge", "us-east-1c")].interruption_bucket == "15-20%"
    assert rows[("p5.48xlarge", "us-east-1d")].interruption_bucket is None
    assert p4d.as_of == NOW.date() and "aws" in p4d.source
    assert any("p5e.48xlarge" in w for w in result.warnings)  # listed by EC2, priced nowhere


def test_capacity_block_zero_rows_never_become_prices(retry: Any) -> None:
    block = next(p for p in fixture("aws/get_products_us-east-1_page1.json")["PriceList"]
                 if p["product"]["attributes"]["marketoption"] == "CapacityBlock")  # fmt: skip
    assert parse_price_list_item(json.dumps(block)) is None

    aws = Aws(retry)
    aws.whole_region()
    result = aws.fetch()
    assert all(o.on_demand for o in result.offerings)
    assert not any("disagree" in w for w in result.warnings)


def test_reserved_is_standard_no_upfront_else_cheapest_effective_upfront_option(retry: Any) -> None:
    aws = Aws(retry)
    aws.whole_region()
    rows = by_key(aws.fetch())
    p4d = rows[("p4d.24xlarge", "us-east-1a")]
    assert p4d.reserved_1y == pytest.approx(13.921)  # No Upfront, though All Upfront is cheaper effective
    assert p4d.reserved_3y == pytest.approx(9.374)
    p5 = rows[("p5.48xlarge", "us-east-1d")]
    assert p5.reserved_1y is None
    # Partial: 11.0 + 300000 / 26280 = 22.4155...; All: 600000 / 26280 = 22.83...
    assert p5.reserved_3y == pytest.approx(11.0 + 300000 / (HOURS_PER_YEAR * 3))
    assert rows[("g5.xlarge", "us-east-1a")].reserved_1y is None


def test_spot_above_on_demand_is_kept_and_reported(retry: Any) -> None:
    aws = Aws(retry)
    aws.whole_region()
    result = aws.fetch()
    g5 = by_key(result)[("g5.xlarge", "us-east-1a")]
    assert g5.spot == pytest.approx(1.21) and g5.on_demand == pytest.approx(1.006)
    assert any("g5.xlarge" in w and "above on-demand" in w for w in result.warnings)


def test_throttled_page_backs_off_and_restarts_the_listing(retry: Any, sleeps: list[float]) -> None:
    aws = Aws(retry)
    aws.instance_types()
    aws.products(pages=(1,))
    aws.pricing_stub.add_client_error("get_products", service_error_code="ThrottlingException", http_status_code=400)
    aws.products(pages=(1, 2))
    aws.spot()
    result = aws.fetch()
    assert result.errors == () and len(result.offerings) == 5
    assert len(sleeps) == 1 and 0.5 <= sleeps[0] <= 2.0


def test_throttling_that_never_stops_fails_the_region_and_keeps_the_others(retry: Any, sleeps: list[float]) -> None:
    aws = Aws(retry, regions=("us-east-1", "us-west-2"))
    aws.instance_types("us-east-1")
    for _ in range(3):
        aws.pricing_stub.add_client_error(
            "get_products", service_error_code="ThrottlingException", http_status_code=400
        )
    aws.ec2_stub["us-west-2"].add_response(
        "describe_instance_types",
        {"InstanceTypes": fixture("aws/describe_instance_types_page1.json")["InstanceTypes"][2:]},
    )
    result = aws.fetch(["us-east-1", "us-west-2"])
    assert result.regions == ("us-west-2",)
    [error] = result.errors
    assert error.region == "us-east-1"
    assert (
        error.message.startswith("aws: get_products for us-east-1 was still throttled") and "--region" in error.message
    )
    assert len(sleeps) == 2


def test_access_denied_stops_at_the_first_region_with_the_permissions_to_grant(retry: Any) -> None:
    aws = Aws(retry, regions=("us-east-1", "eu-west-1"))
    aws.ec2_stub["us-east-1"].add_client_error(
        "describe_instance_types", service_error_code="UnauthorizedOperation", http_status_code=403
    )
    result = aws.fetch(["us-east-1", "eu-west-1"])
    assert result.regions == () and [e.region for e in result.errors] == ["us-east-1", "eu-west-1"]
    assert "ec2:DescribeInstanceTypes" in result.errors[0].message


def test_malformed_price_list_item_fails_its_region_with_a_clear_message(retry: Any) -> None:
    aws = Aws(retry)
    aws.instance_types()
    aws.pricing_stub.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": [json.dumps({"product": {"sku": "X"}})]},
        {"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "Filters": ANY, "MaxResults": 100},
    )
    result = aws.fetch()
    [error] = result.errors
    assert "malformed get_products response in us-east-1 at PriceList item 0" in error.message
    assert result.offerings == ()


def test_default_regions_are_the_enabled_ones(retry: Any) -> None:
    aws = Aws(retry, regions=("us-east-1",))
    aws.ec2_stub["us-east-1"].add_response(
        "describe_regions", {"Regions": [{"RegionName": "us-east-1", "Endpoint": "ec2.us-east-1.amazonaws.com"}]}, {}
    )
    aws.whole_region()
    result = aws.fetch([])
    assert result.regions == ("us-east-1",)


def test_region_names_are_checked_before_any_call(retry: Any) -> None:
    with pytest.raises(InvalidRegionError, match="'US East' is not an AWS region name"):
        Aws(retry).fetcher.fetch(["US East"])


def test_gpu_facts_from_moto_bundled_instance_data() -> None:
    with mock_aws():
        ec2 = client("ec2")
        items = [i for page in ec2.get_paginator("describe_instance_types").paginate() for i in page["InstanceTypes"]]
    facts = {f.instance_type: f for f in map(instance_facts, items) if f is not None}
    assert (facts["p4d.24xlarge"].gpu, facts["p4d.24xlarge"].gpus, facts["p4d.24xlarge"].gpu_memory_gb) == (
        "A100",
        8,
        40.0,
    )
    assert (facts["p4de.24xlarge"].gpu, facts["p4de.24xlarge"].gpu_memory_gb) == ("A100-80GB", 80.0)
    assert (facts["p5.48xlarge"].gpu, facts["p5.48xlarge"].vcpus) == ("H100", 192.0)
    # EC2 reports usable memory (22,888 MiB); within 10 % of the marketed 24 GB it reads as 24 GB.
    assert (facts["g5.xlarge"].gpu, facts["g5.xlarge"].gpu_memory_gb) == ("A10G", 24.0)
    assert (facts["g6e.xlarge"].gpu, facts["g6e.xlarge"].gpu_memory_gb) == ("L40S", 48.0)
    assert facts["g4dn.xlarge"].gpu == "T4"
    assert "g4ad.xlarge" not in facts and "dl1.24xlarge" not in facts  # AMD and Gaudi: not NVIDIA
    assert "m5.large" not in facts


def test_spot_advisor_buckets_from_the_feed_format() -> None:
    advisor = SpotAdvisor.parse(fixture("aws/spot-advisor-data.json"), "fixture")
    assert advisor.bucket("us-east-1", "p4d.24xlarge") == "10-15%"  # the Linux entry, not Windows' r=0
    assert advisor.bucket("us-east-1", "g5.xlarge") == ">20%"
    assert advisor.bucket("eu-west-1", "p4d.24xlarge") is None


def test_spot_advisor_download_retries_a_503(retry: Any, sleeps: list[float]) -> None:
    with responses.RequestsMock() as mock:
        mock.get(SPOT_ADVISOR_URL, status=503)
        mock.get(SPOT_ADVISOR_URL, json=fixture("aws/spot-advisor-data.json"))
        advisor = load_spot_advisor(retry=retry)
    assert advisor.bucket("us-east-1", "g4dn.xlarge") == "15-20%" and len(sleeps) == 1


def test_spot_advisor_in_an_unexpected_shape_is_refused() -> None:
    with pytest.raises(MalformedResponseError, match="spot advisor data from x lacks ranges"):
        SpotAdvisor.parse({"ranges": [{"index": 0}], "spot_advisor": {}}, "x")


def test_the_real_spot_advisor_snapshot_parses(shared: Any) -> None:
    path = shared("traces", "aws-spot-advisor", "spot-advisor-data.json")
    advisor = SpotAdvisor.parse(json.loads(path.read_text()), str(path))
    assert advisor.bucket("us-east-1", "p3.2xlarge") == ">20%"  # s=80, r=4 in SOURCE.md
    assert advisor.bucket("us-east-1", "p4d.24xlarge") == "10-15%"
    assert len(advisor.buckets) > 10_000


def test_price_list_rows_that_disagree_are_refused_not_guessed(retry: Any) -> None:
    aws = Aws(retry)
    aws.instance_types()
    page = price_page("aws/get_products_us-east-1_page2.json")
    twin = json.loads(page["PriceList"][0])  # g5.xlarge, again, at another price
    dims = next(iter(twin["terms"]["OnDemand"].values()))["priceDimensions"]
    next(iter(dims.values()))["pricePerUnit"]["USD"] = "1.2120000000"
    page["PriceList"].append(json.dumps(twin))
    aws.pricing_stub.add_response(
        "get_products", page, {"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "Filters": ANY, "MaxResults": 100}
    )
    aws.spot()
    result = aws.fetch()
    g5 = by_key(result)[("g5.xlarge", "us-east-1a")]
    assert g5.on_demand is None and g5.spot == pytest.approx(1.21)
    assert any("g5.xlarge: several price-list rows disagree" in w for w in result.warnings)
