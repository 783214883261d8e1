"""Azure GPU prices from the Retail Prices API and the ARM resource-SKU list.

* Prices: ``GET https://prices.azure.com/api/retail/prices`` (public, no
  credentials) with the OData filter ``serviceName eq 'Virtual Machines' and
  armRegionName eq '<region>'``, following ``NextPageLink`` until it is null or a
  page has no ``Items``.  Per ``armSkuName``:

  - ``type == "Consumption"``: pay-as-you-go, or spot when ``skuName`` contains
    " Spot".  "Low Priority" meters (the retired Batch/VMSS tier) are dropped, so
    they are never mistaken for pay-as-you-go;
  - ``type == "Reservation"``: ``unitPrice`` is the price of the **whole term**
    although ``unitOfMeasure`` says "1 Hour"; hourly = ``unitPrice / (8760 × years)``;
  - Windows and Cloud Services meters (``productName`` containing " Win" or
    " Cloud Services") and zero prices are dropped.

* Facts: ``ComputeManagementClient.resource_skus.list(filter="location eq '<region>'")``
  gives vCPUs, memory and the GPU count (capabilities are strings); the GPU model
  comes from the size's ``family``.  A ``Location`` restriction, or ``Zone``
  restrictions covering every zone, make the size unavailable to this
  subscription, so it is left out.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pricing.catalog import HOURS_PER_YEAR, Offering
from pricing.refresh import (
    AccessDeniedError,
    FetchError,
    FetchResult,
    InvalidRegionError,
    MalformedResponseError,
    MissingCredentialsError,
    NetworkError,
    ProgressCallback,
    RegionFetch,
    fetch_by_region,
    utc_now,
)
from pricing.retry import RetryPolicy
from pricing.skypilot import GPU_MEMORY_GB

CLOUD = "azure"
RETAIL_PRICES_URL = "https://prices.azure.com/api/retail/prices"
RETAIL_API_VERSION = "2023-01-01-preview"
SUBSCRIPTION_ENV = "AZURE_SUBSCRIPTION_ID"

GPU_FAMILIES: Mapping[str, str] = {
    "standardNCSv3Family": "V100",
    "standardNDSv2Family": "V100-32GB",
    "StandardNCASv3_T4Family": "T4",
    "StandardNDASv4_A100Family": "A100",
    "StandardNCADSA100v4Family": "A100-80GB",
    "standardNDAMSv4_A100Family": "A100-80GB",
    "StandardNCADSA10v4Family": "A10",
    "standardNDSH100v5Family": "H100",
    "StandardNCadsH100v5Family": "H100",
    "StandardNCCads2023Family": "H100",
    "standardNDISRH200V5Family": "H200",
}
"""ARM size family -> SkyPilot GPU name.  GB per GPU come from the marketed sizes in
:data:`pricing.skypilot.GPU_MEMORY_GB` (the 94 GB H100 NVL of NC H100 v5 counts as 80,
the conservative H100 figure the rest of the catalog uses)."""

_REGION = re.compile(r"^[a-z][a-z0-9]+$")
_EXCLUDED_PRODUCTS = (" Win", " Cloud Services", " CloudServices")
_RETRY_STATUS = (429, 500, 502, 503, 504)
_TERM_YEARS = {"1 Year": 1, "3 Years": 3}


@dataclass(frozen=True, slots=True)
class SizeFacts:
    """What the resource-SKU list says about one GPU VM size in one region."""

    name: str
    gpu: str
    gpus: int
    gpu_memory_gb: float
    vcpus: float
    memory_gb: float


def size_facts(sku: Any, region: str) -> SizeFacts | None:
    """Facts from one ``ResourceSku``; ``None`` unless it is an unrestricted GPU VM size in ``region``."""
    if sku.resource_type != "virtualMachines" or (sku.family or "").replace(" ", "") not in GPU_FAMILIES:
        return None
    if _restricted(sku, region):
        return None
    caps = {c.name: c.value for c in sku.capabilities or ()}
    if "GPUs" not in caps:
        return None
    gpu = GPU_FAMILIES[sku.family.replace(" ", "")]
    return SizeFacts(
        name=sku.name,
        gpu=gpu,
        gpus=int(caps["GPUs"]),
        gpu_memory_gb=GPU_MEMORY_GB[gpu],
        vcpus=float(caps["vCPUs"]),
        memory_gb=float(caps["MemoryGB"]),
    )


def _restricted(sku: Any, region: str) -> bool:
    zones = {z for info in sku.location_info or () if info.location.lower() == region for z in info.zones or ()}
    blocked: set[str] = set()
    for r in sku.restrictions or ():
        # v39 models are MutableMappings, where ``.values`` is the dict method, not the field.
        values = r.get("values") if isinstance(r, Mapping) else r.values
        if r.type == "Location" and region in {v.lower() for v in values or ()}:
            return True
        if r.type == "Zone" and r.restriction_info is not None:
            blocked.update(r.restriction_info.zones or ())
    return bool(zones) and zones <= blocked


@dataclass(slots=True)
class RetailPrices:
    """Linux prices per ARM size from Retail Prices API rows."""

    on_demand: dict[str, float]
    spot: dict[str, float]
    reserved: dict[tuple[str, int], float]

    @classmethod
    def from_items(cls, items: Iterable[Mapping[str, Any]]) -> RetailPrices:
        prices = cls({}, {}, {})
        for item in items:
            prices.add(item)
        return prices

    def add(self, item: Mapping[str, Any]) -> None:
        if any(marker in item["productName"] for marker in _EXCLUDED_PRODUCTS):
            return
        price = float(item["unitPrice"])
        if price <= 0:
            return
        size = item["armSkuName"].lower()
        sku_name = item["skuName"]
        if item["type"] == "Consumption":
            if sku_name.endswith(" Low Priority"):
                return
            target = self.spot if " Spot" in sku_name else self.on_demand
            target[size] = min(price, target.get(size, price))
        elif item["type"] == "Reservation":
            years = _TERM_YEARS.get(item.get("reservationTerm", ""))
            if years is not None:
                hourly = price / (HOURS_PER_YEAR * years)
                self.reserved[(size, years)] = min(hourly, self.reserved.get((size, years), hourly))


class AzurePriceFetcher:
    """Fetches Azure GPU offerings.

    ``compute_client`` is an ``azure.mgmt.compute.ComputeManagementClient`` (or
    anything with ``resource_skus.list(filter=...)``); ``http`` is a
    ``requests.Session`` for the Retail Prices API.
    """

    cloud = CLOUD

    def __init__(
        self,
        *,
        compute_client: Any,
        http: Any = None,
        retail_url: str = RETAIL_PRICES_URL,
        retry: RetryPolicy | None = None,
        clock: Callable[[], dt.datetime] = utc_now,
        timeout: float = 60.0,
    ):
        import requests

        self._compute = compute_client
        self._http = http or requests.Session()
        self._retail_url = retail_url
        self._retry = retry or RetryPolicy()
        self._clock = clock
        self._timeout = timeout

    def fetch(self, regions: Sequence[str] | None, progress: ProgressCallback | None = None) -> FetchResult:
        for region in regions or ():
            if not _REGION.match(region):
                raise InvalidRegionError(CLOUD, f"{region!r} is not an ARM region name (e.g. eastus, westeurope)")
        run = RegionFetch(CLOUD, self._clock())
        if regions:
            sizes_by_region = None
            wanted = list(regions)
        else:
            sizes_by_region = self._gpu_sizes(None)
            wanted = sorted(sizes_by_region)

        def one(region: str) -> list[Offering]:
            sizes = sizes_by_region[region] if sizes_by_region is not None else self._gpu_sizes(region).get(region, [])
            return self._offerings(region, sizes, run)

        return fetch_by_region(run, wanted, one, progress)

    def _gpu_sizes(self, region: str | None) -> dict[str, list[SizeFacts]]:
        """Unrestricted GPU sizes per region (every region the subscription sees when ``None``)."""
        what = f"resource_skus.list in {region}" if region else "resource_skus.list"
        query = {"filter": f"location eq '{region}'"} if region else {}
        skus = self._call(what, lambda: list(self._compute.resource_skus.list(**query)))
        found: dict[str, list[SizeFacts]] = {}
        for sku in skus:
            for location in sku.locations or ():
                where = location.lower()
                if region and where != region:
                    continue
                try:
                    facts = size_facts(sku, where)
                except (AttributeError, KeyError, TypeError, ValueError) as exc:
                    raise MalformedResponseError(
                        CLOUD,
                        f"malformed resource SKU {getattr(sku, 'name', '?')} in {where}: {exc!r}; please report it",
                    ) from exc
                if facts is not None:
                    found.setdefault(where, []).append(facts)
        return found

    def _offerings(self, region: str, sizes: list[SizeFacts], run: RegionFetch) -> list[Offering]:
        if not sizes:
            return []
        prices = self._retail_prices(region)
        source = f"azure retail prices+arm skus {run.fetched_at:%Y-%m-%dT%H:%MZ}"
        offerings = []
        for facts in sorted(sizes, key=lambda s: s.name):
            key = facts.name.lower()
            on_demand, spot = prices.on_demand.get(key), prices.spot.get(key)
            if on_demand is None and spot is None:
                continue
            if on_demand is not None and spot is not None and spot > on_demand:
                run.warnings.append(f"azure {region} {facts.name}: spot {spot:g} is above pay-as-you-go {on_demand:g}")
            offerings.append(
                Offering(
                    cloud=CLOUD,
                    region=region,
                    zone=None,
                    instance_type=facts.name,
                    gpu=facts.gpu,
                    gpus_per_node=facts.gpus,
                    gpu_memory_gb=facts.gpu_memory_gb,
                    vcpus=facts.vcpus,
                    memory_gb=facts.memory_gb,
                    on_demand=on_demand,
                    spot=spot,
                    reserved_1y=prices.reserved.get((key, 1)),
                    reserved_3y=prices.reserved.get((key, 3)),
                    as_of=run.fetched_at.date(),
                    source=source,
                )
            )
        return offerings

    def _retail_prices(self, region: str) -> RetailPrices:
        prices = RetailPrices({}, {}, {})
        url: str | None = self._retail_url
        params: dict[str, str] | None = {
            "api-version": RETAIL_API_VERSION,
            "$filter": f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}'",
        }
        page = 0
        while url:
            page += 1
            body = self._get_json(url, params, f"retail prices page {page} for {region}")
            params = None  # NextPageLink already carries the query
            try:
                items = body["Items"]
                for item in items:
                    prices.add(item)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise MalformedResponseError(
                    CLOUD, f"malformed retail prices page {page} for {region}: {exc!r}; please report it"
                ) from exc
            url = body.get("NextPageLink") if items else None
        return prices

    def _get_json(self, url: str, params: Mapping[str, str] | None, what: str) -> Any:
        import requests

        def get() -> Any:
            response = self._http.get(url, params=params, timeout=self._timeout)
            response.raise_for_status()
            return response.json()

        try:
            return self._retry.call(get, retry_after=_retry_after, cloud=CLOUD, what=what)
        except requests.ConnectionError as exc:
            raise NetworkError(
                CLOUD, f"cannot reach prices.azure.com for {what}; check the network or HTTPS_PROXY"
            ) from exc
        except ValueError as exc:  # requests' JSONDecodeError is a ValueError too
            raise MalformedResponseError(CLOUD, f"{what} was not JSON ({exc})") from exc
        except requests.RequestException as exc:
            raise FetchError(CLOUD, f"{what} failed ({exc}); rerun 'planner prices refresh --cloud azure'") from exc

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        from azure.core import exceptions as ax

        try:
            return self._retry.call(fn, retry_after=_retry_after, cloud=CLOUD, what=what)
        except ax.ClientAuthenticationError as exc:
            raise MissingCredentialsError(
                CLOUD,
                f"no usable credentials for {what} ({type(exc).__name__}); run 'az login', or set "
                "AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET",
            ) from exc
        except ax.ServiceRequestError as exc:
            raise NetworkError(CLOUD, f"cannot reach management.azure.com for {what}; check the network") from exc
        except ax.HttpResponseError as exc:
            if exc.status_code == 403:
                raise AccessDeniedError(
                    CLOUD, f"{what} was denied (403); give these credentials the Reader role on the subscription"
                ) from exc
            if exc.status_code in (401, 404) and "subscription" in str(exc).lower():
                raise MissingCredentialsError(
                    CLOUD,
                    f"the subscription was not found or not accessible; check --subscription or ${SUBSCRIPTION_ENV}",
                ) from exc
            raise FetchError(
                CLOUD, f"{what} failed (HTTP {exc.status_code}); rerun 'planner prices refresh --cloud azure'"
            ) from exc


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None) or getattr(exc, "status_code", None)
    if status not in _RETRY_STATUS:
        return None
    headers = getattr(response, "headers", None) or {}
    try:
        return float(headers.get("Retry-After", 0) or 0)
    except (TypeError, ValueError):
        return 0.0


def create_fetcher(*, subscription: str | None = None, retry: RetryPolicy | None = None) -> AzurePriceFetcher:
    """An :class:`AzurePriceFetcher` on ``DefaultAzureCredential`` for ``subscription``.

    The subscription defaults to ``$AZURE_SUBSCRIPTION_ID``.
    """
    subscription = subscription or os.environ.get(SUBSCRIPTION_ENV)
    if not subscription:
        raise MissingCredentialsError(CLOUD, f"no subscription id; pass --subscription or set {SUBSCRIPTION_ENV}")
    try:
        from azure.identity import DefaultAzureCredential
        from azure.mgmt.compute import ComputeManagementClient
    except ImportError as exc:
        raise FetchError(CLOUD, "the Azure SDK is not installed; run: pip install 'danlu[azure]'") from exc
    # retry_total=0: the RetryPolicy below is the only one, so waits do not multiply.
    client = ComputeManagementClient(DefaultAzureCredential(), subscription, retry_total=0)
    return AzurePriceFetcher(compute_client=client, retry=retry)
