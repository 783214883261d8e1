"""GCP fetcher: Cloud Billing and Compute REST transports served by `responses`, anonymous credentials."""

from __future__ import annotations

from typing import Any

import pytest
import responses
from google.auth.credentials import AnonymousCredentials
from google.cloud import billing_v1, compute_v1
from responses import matchers

from pricing.gcp import GcpPriceFetcher, machine_shapes, sku_part
from pricing.refresh import AccessDeniedError, InvalidRegionError
from tests.live_prices.conftest import NOW, fixture

PROJECT = "danlu-test"
SKUS_URL = "https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus"
MACHINES_URL = f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/aggregated/machineTypes"
ACCELERATORS_URL = f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/aggregated/acceleratorTypes"

A2_CORE, A2_RAM, A100 = 0.031611, 0.004237, 2.93391
N1_CORE, N1_RAM, T4 = 0.031611, 0.004237, 0.35
A3_CORE, A3_RAM, H100 = 0.02206, 0.002932, 9.79655


def fetcher(retry: Any) -> GcpPriceFetcher:
    credentials = AnonymousCredentials()
    return GcpPriceFetcher(
        catalog_client=billing_v1.CloudCatalogClient(credentials=credentials, transport="rest"),
        machine_types_client=compute_v1.MachineTypesClient(credentials=credentials),
        accelerator_types_client=compute_v1.AcceleratorTypesClient(credentials=credentials),
        project=PROJECT,
        retry=retry,
        clock=lambda: NOW,
    )


def page_matcher(token: str | None) -> Any:
    # strict_match=False: the client adds $alt=json;enum-encoding=int and page sizes.
    params = {"pageToken": token} if token else {"currencyCode": "USD"}
    return matchers.query_param_matcher(params, strict_match=False)


def serve(mock: responses.RequestsMock, skus: list[dict[str, Any]] | None = None, throttle_page2: bool = False) -> None:
    page1, page2 = fixture("gcp/list_skus_page1.json"), fixture("gcp/list_skus_page2.json")
    if skus is not None:
        page1, page2 = {"skus": skus, "nextPageToken": "skus-page2"}, {"skus": [], "nextPageToken": ""}
    mock.get(SKUS_URL, json=page1, match=[page_matcher(None)])
    if throttle_page2:
        quota = {"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}}
        mock.get(SKUS_URL, status=429, json=quota, match=[page_matcher("skus-page2")])
    mock.get(SKUS_URL, json=page2, match=[page_matcher("skus-page2")])
    mock.get(
        MACHINES_URL,
        json=fixture("gcp/machine_types_page1.json"),
        match=[matchers.query_param_matcher({"maxResults": "500"}, strict_match=False)],
    )
    mock.get(
        MACHINES_URL,
        json=fixture("gcp/machine_types_page2.json"),
        match=[matchers.query_param_matcher({"pageToken": "mt-page2"}, strict_match=False)],
    )
    mock.get(ACCELERATORS_URL, json=fixture("gcp/accelerator_types.json"))


def fetch(retry: Any, regions: list[str] | None = None, **kwargs: Any) -> Any:
    with responses.RequestsMock() as mock:
        serve(mock, **kwargs)
        return fetcher(retry).fetch(regions)


def rows(result: Any) -> dict[tuple[str, str], Any]:
    return {(o.region, o.instance_type): o for o in result.offerings}


def test_bundled_machine_is_host_parts_plus_its_gpus(retry: Any) -> None:
    result = fetch(retry, ["us-central1"])
    a2 = rows(result)[("us-central1", "a2-highgpu-1g")]
    assert (a2.cloud, a2.zone, a2.gpu, a2.gpus_per_node, a2.gpu_memory_gb) == ("gcp", None, "A100", 1, 40.0)
    assert (a2.vcpus, a2.memory_gb, a2.as_of) == (12.0, 85.0, NOW.date())
    assert a2.on_demand == pytest.approx(12 * A2_CORE + 85 * A2_RAM + A100)  # 3.673387, as GCP bills it
    assert a2.spot == pytest.approx(12 * 0.01264 + 85 * 0.001695 + 1.1472)
    assert a2.reserved_1y == pytest.approx(12 * 0.019915 + 85 * 0.002669 + 1.84836204)
    assert a2.reserved_3y == pytest.approx(12 * 0.011063888 + 85 * 0.001483222 + 1.0268678)


def test_attached_gpus_are_offered_on_n1_hosts_up_to_the_card_limit(retry: Any) -> None:
    found = rows(fetch(retry, ["us-central1"]))
    one = found[("us-central1", "n1-standard-8+T4:1")]  # SkyPilot's rule: >= 4 vCPUs, >= 4 GiB each
    assert (one.gpu, one.gpus_per_node, one.vcpus, one.memory_gb) == ("T4", 1, 8.0, 30.0)
    assert one.on_demand == pytest.approx(8 * N1_CORE + 30 * N1_RAM + T4)
    assert one.spot == pytest.approx(8 * 0.00698 + 30 * 0.000936 + 0.14)
    assert one.reserved_1y is None  # no N1 or T4 commitment SKU in the fixtures
    assert ("us-central1", "n1-standard-16+T4:1") not in found  # fits too, but costs more
    two = found[("us-central1", "n1-standard-16+T4:2")]  # >= 8 vCPUs and 32 GiB: n1-standard-8 has 30
    assert two.on_demand == pytest.approx(16 * N1_CORE + 60 * N1_RAM + 2 * T4)
    # 4 T4s need a 48-vCPU host, which the zone does not list; A100 is bundled, never attached.
    assert not any("T4:4" in name or "A100:" in name for _, name in found)


def test_ambiguous_sku_is_refused_and_reported_never_guessed(retry: Any) -> None:
    result = fetch(retry)
    found = rows(result)
    central, east = found[("us-central1", "a3-highgpu-8g")], found[("us-east4", "a3-highgpu-8g")]
    assert central.on_demand is None  # two "Nvidia H100 80GB GPU" SKUs: $9.79655 and $4.20076
    assert central.spot == pytest.approx(208 * 0.0102 + 1872 * 0.000888 + 8 * 2.253)  # the spot SKU is unique
    assert east.on_demand == pytest.approx(208 * A3_CORE + 1872 * A3_RAM + 8 * H100)
    [refusal] = [w for w in result.warnings if "refused" in w]
    assert "us-central1" in refusal and "H100-0001-0001" in refusal and "H100-0001-0002" in refusal
    assert "4.20076" in refusal and "9.79655" in refusal
    assert (central.gpu, central.gpus_per_node, central.gpu_memory_gb) == ("H100", 8, 80.0)


def test_dws_flex_and_custom_skus_are_not_matched() -> None:
    assert sku_part("Nvidia H100 80GB GPU running in Americas (DWS Defined Duration)") is None
    assert sku_part("Nvidia H100 80GB GPU Flex Start running in Americas") is None
    assert sku_part("Custom Instance Core running in Americas") is None
    assert sku_part("Nvidia H100 80GB Mega GPU running in Americas") == ("gpu", "nvidia-h100-mega-80gb")
    assert sku_part("Commitment v1: Nvidia Tesla A100 GPU in Americas for 1 Year") == ("gpu", "nvidia-tesla-a100")
    assert sku_part("Spot Preemptible N1 Predefined Instance Ram running in Americas") == ("ram", "n1")
    assert sku_part("Nvidia Tesla T4 Virtual Workstation GPU running in Americas") is None  # not the plain GPU


def test_all_regions_with_gpu_machines_by_default(retry: Any) -> None:
    result = fetch(retry)
    assert result.regions == ("us-central1", "us-east4") and result.errors == ()
    assert ("us-east4", "n1-standard-8+T4:1") in rows(result)


def test_throttled_sku_page_is_retried_alone(retry: Any, sleeps: list[float]) -> None:
    result = fetch(retry, ["us-central1"], throttle_page2=True)
    assert len(sleeps) == 1 and ("us-central1", "a2-highgpu-1g") in rows(result)


def test_spot_above_on_demand_is_reported(retry: Any) -> None:
    skus = fixture("gcp/list_skus_page1.json")["skus"]
    for sku in skus:  # make the A100 spot SKU dearer than on-demand
        if sku["skuId"] == "A100-0002-0001":
            sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"] = {
                "currencyCode": "USD",
                "units": "4",
                "nanos": 0,
            }
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        serve(mock, skus=skus)
        result = fetcher(retry).fetch(["us-central1"])
    assert any("a2-highgpu-1g" in w and "above on-demand" in w for w in result.warnings)


def test_permission_denied_names_the_apis_to_enable(retry: Any) -> None:
    with responses.RequestsMock() as mock:
        mock.get(
            SKUS_URL, status=403, json={"error": {"code": 403, "message": "denied", "status": "PERMISSION_DENIED"}}
        )
        with pytest.raises(
            AccessDeniedError, match="enable the Cloud Billing and Compute Engine APIs in project danlu-test"
        ):
            fetcher(retry).fetch(["us-central1"])


def test_region_names_are_checked(retry: Any) -> None:
    with pytest.raises(InvalidRegionError, match="'us-central1-a' is not a GCP region name"):
        fetcher(retry).fetch(["us-central1-a"])


def test_bundled_accelerators_are_never_attachable() -> None:
    a100 = compute_v1.Accelerators(guest_accelerator_type="nvidia-tesla-a100", guest_accelerator_count=1)
    a2 = compute_v1.MachineType(name="a2-highgpu-1g", guest_cpus=12, memory_mb=87040, accelerators=[a100])
    machines = {"z1-a-a": [a2,
                           compute_v1.MachineType(name="n1-standard-8", guest_cpus=8, memory_mb=30720)]}  # fmt: skip
    accelerators = {"z1-a-a": [compute_v1.AcceleratorType(name="nvidia-tesla-a100", maximum_cards_per_instance=16)]}
    assert list(machine_shapes(machines, accelerators)["z1-a"]) == ["a2-highgpu-1g"]
