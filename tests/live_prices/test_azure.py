"""Azure fetcher against `responses`-served Retail Prices and ARM resource-SKU pages."""

from __future__ import annotations

from typing import Any

import pytest
import responses
from azure.mgmt.compute import ComputeManagementClient
from responses import matchers

from pricing.azure import RETAIL_PRICES_URL, AzurePriceFetcher, RetailPrices
from pricing.catalog import HOURS_PER_YEAR
from pricing.refresh import InvalidRegionError
from tests.live_prices.conftest import NOW, SUBSCRIPTION, FakeAzureCredential, fixture

SKUS_URL = f"https://management.azure.com/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Compute/skus"
RETAIL_FILTER = "serviceName eq 'Virtual Machines' and armRegionName eq 'eastus'"


def fetcher(retry: Any) -> AzurePriceFetcher:
    # retry_total=0: as in create_fetcher, our RetryPolicy is the only retry layer.
    compute = ComputeManagementClient(FakeAzureCredential(), SUBSCRIPTION, retry_total=0)
    return AzurePriceFetcher(compute_client=compute, retry=retry, clock=lambda: NOW)


def serve_skus(mock: responses.RequestsMock) -> None:
    mock.get(
        SKUS_URL,
        json=fixture("azure/resource_skus_eastus_page1.json"),
        match=[matchers.query_param_matcher({"$filter": "location eq 'eastus'"}, strict_match=False)],
    )
    mock.get(SKUS_URL, json=fixture("azure/resource_skus_eastus_page2.json"),
             match=[matchers.query_param_matcher({"$skiptoken": "page2"}, strict_match=False)])  # fmt: skip


def serve_retail(mock: responses.RequestsMock, first_status: int | None = None) -> None:
    first = [matchers.query_param_matcher({"api-version": "2023-01-01-preview", "$filter": RETAIL_FILTER})]
    if first_status:
        mock.get(RETAIL_PRICES_URL, status=first_status, headers={"Retry-After": "1"}, match=first)
    mock.get(RETAIL_PRICES_URL, json=fixture("azure/retail_eastus_page1.json"), match=first)
    mock.get(RETAIL_PRICES_URL, json=fixture("azure/retail_eastus_page2.json"),
             match=[matchers.query_param_matcher({"$skip": "1000"}, strict_match=False)])  # fmt: skip


def fetch(retry: Any, first_status: int | None = None) -> Any:
    with responses.RequestsMock() as mock:  # fails if a registered page is not requested
        serve_skus(mock)
        serve_retail(mock, first_status)
        return fetcher(retry).fetch(["eastus"])


def test_gpu_sizes_priced_from_both_retail_pages(retry: Any) -> None:
    result = fetch(retry)
    assert result.regions == ("eastus",) and result.errors == ()
    rows = {o.instance_type: o for o in result.offerings}
    assert sorted(rows) == ["Standard_NC24ads_A100_v4", "Standard_NC4as_T4_v3", "Standard_ND96asr_v4"]
    nd = rows["Standard_ND96asr_v4"]
    assert (nd.cloud, nd.region, nd.zone, nd.gpu, nd.gpus_per_node, nd.gpu_memory_gb) == (
        "azure",
        "eastus",
        None,
        "A100",
        8,
        40.0,
    )
    assert (nd.vcpus, nd.memory_gb, nd.as_of) == (96.0, 900.0, NOW.date())
    assert nd.on_demand == pytest.approx(27.197)
    assert nd.spot == pytest.approx(2.99167)
    nc = rows["Standard_NC24ads_A100_v4"]
    assert (nc.gpu, nc.gpu_memory_gb, nc.on_demand, nc.spot) == ("A100-80GB", 80.0, 3.673, 0.444433)


def test_reservation_rows_are_whole_term_prices_turned_hourly(retry: Any) -> None:
    nd = {o.instance_type: o for o in fetch(retry).offerings}["Standard_ND96asr_v4"]
    assert nd.reserved_1y == pytest.approx(142000.0 / HOURS_PER_YEAR)
    assert nd.reserved_3y == pytest.approx(250000.0 / (3 * HOURS_PER_YEAR))


def test_windows_low_priority_devtest_and_zero_rows_are_dropped() -> None:
    items = fixture("azure/retail_eastus_page1.json")["Items"] + fixture("azure/retail_eastus_page2.json")["Items"]
    prices = RetailPrices.from_items(items)
    assert prices.on_demand["standard_nd96asr_v4"] == 27.197  # not 31.5 (Windows) nor 5.4394 (Low Priority)
    assert prices.spot["standard_nd96asr_v4"] == 2.99167
    assert prices.on_demand["standard_nc24ads_a100_v4"] == 3.673  # " Srs Win" row dropped
    assert "standard_nc6s_v3" not in prices.on_demand  # $0 row
    assert prices.on_demand["standard_nc4as_t4_v3"] == 0.526  # DevTestConsumption ignored


def test_restrictions_make_a_size_unavailable(retry: Any) -> None:
    offered = {o.instance_type for o in fetch(retry).offerings}
    assert "Standard_ND96isr_H100_v5" not in offered  # Location restriction, though the retail API prices it
    assert "Standard_NC24ads_A100_v4" in offered  # only zone 1 of 1-3 restricted


def test_spot_above_pay_as_you_go_is_reported(retry: Any) -> None:
    result = fetch(retry)
    t4 = {o.instance_type: o for o in result.offerings}["Standard_NC4as_T4_v3"]
    assert t4.spot == 0.61 and t4.on_demand == 0.526
    assert any("Standard_NC4as_T4_v3" in w and "above" in w for w in result.warnings)


def test_throttled_retail_page_is_retried_after_retry_after(retry: Any, sleeps: list[float]) -> None:
    result = fetch(retry, first_status=429)
    assert len(result.offerings) == 3
    assert sleeps == [1.0]  # the server's Retry-After beats the 0.5 s backoff


def test_paging_stops_at_an_empty_page(retry: Any) -> None:
    page = fixture("azure/retail_eastus_page1.json")
    with responses.RequestsMock() as mock:
        serve_skus(mock)
        mock.get(
            RETAIL_PRICES_URL,
            json=page,
            match=[matchers.query_param_matcher({"$filter": RETAIL_FILTER}, strict_match=False)],
        )
        mock.get(RETAIL_PRICES_URL, json={"Items": [], "NextPageLink": page["NextPageLink"], "Count": 0},
                 match=[matchers.query_param_matcher({"$skip": "1000"}, strict_match=False)])  # fmt: skip
        result = fetcher(retry).fetch(["eastus"])
    assert [o.instance_type for o in result.offerings] == ["Standard_ND96asr_v4"]


def test_arm_throttling_goes_through_the_same_policy(retry: Any, sleeps: list[float]) -> None:
    with responses.RequestsMock() as mock:
        mock.get(SKUS_URL, status=429, json={"error": {"code": "TooManyRequests", "message": "slow down"}})
        serve_skus(mock)
        serve_retail(mock)
        result = fetcher(retry).fetch(["eastus"])
    assert len(result.offerings) == 3 and len(sleeps) == 1


def test_no_network_is_one_actionable_error(retry: Any) -> None:
    with responses.RequestsMock() as mock:
        serve_skus(mock)
        result = fetcher(retry).fetch(["eastus"])  # the retail host is not served: connection refused
    [error] = result.errors
    assert error.region == "eastus" and error.message.startswith("azure: cannot reach prices.azure.com")


def test_region_names_must_be_arm_names(retry: Any) -> None:
    with pytest.raises(InvalidRegionError, match="'East US' is not an ARM region name"):
        fetcher(retry).fetch(["East US"])


def test_all_regions_come_from_one_unfiltered_sku_listing(retry: Any) -> None:
    with responses.RequestsMock() as mock:
        mock.get(SKUS_URL, json={"value": fixture("azure/resource_skus_eastus_page1.json")["value"]},
                 match=[matchers.query_param_matcher({"api-version": "2021-07-01"})])  # fmt: skip
        serve_retail(mock)
        result = fetcher(retry).fetch(None)
    assert result.regions == ("eastus",)
    assert sorted(o.instance_type for o in result.offerings) == ["Standard_NC24ads_A100_v4", "Standard_ND96asr_v4"]
