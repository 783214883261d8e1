"""GCP GPU prices from the Cloud Billing catalog and the Compute Engine APIs.

GCP does not price a VM: it prices its parts.  A machine's hourly price is built
the way GCP bills it::

    vCPUs × "<series> Instance Core" + GiB × "<series> Instance Ram" + GPUs × "<GPU> GPU"

for A2/A3/A4/G2 machine types (which bundle their GPUs, listed in the machine
type's ``accelerators``) and for N1 hosts with attached GPUs (T4, V100, P100, P4),
offered as ``<host>+<GPU>:<count>`` (``n1-standard-8+T4:1``, the SkyPilot import's
naming) on the cheapest host SkyPilot's rule allows.  Each part is looked
up per region and usage type (``OnDemand``, ``Preemptible`` = spot, ``Commit1Yr``,
``Commit3Yr``) among the Compute Engine SKUs of
``CloudCatalogClient.list_skus("services/6F81-5844-456A")``.

SKU descriptions are matched strictly: the text left after removing the usage
prefix ("Spot Preemptible ", "Commitment v1: ") and the location suffix
("running in Americas", "in Americas for 1 Year") must equal a known name, and
descriptions mentioning custom, premium, reserved, sole-tenancy, DWS or Flex
capacity are skipped.  When two SKUs with different prices match the same part,
the price is **refused** (left empty) and reported, never guessed.  Bundled local
SSDs are not priced.

Machine shapes come from ``MachineTypesClient.aggregated_list`` and attachable
GPUs (with ``maximumCardsPerInstance``) from ``AcceleratorTypesClient.aggregated_list``.
Prices are regional, so offerings have no zone.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pricing.catalog import Offering
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
from pricing.skypilot import GCP_N1_HOST_LIMITS, GCP_N1_HOST_VCPUS, GPU_ALIASES

CLOUD = "gcp"
COMPUTE_SERVICE = "services/6F81-5844-456A"
PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"

USAGE_TYPES: Mapping[str, str] = {
    "OnDemand": "on_demand",
    "Preemptible": "spot",
    "Commit1Yr": "reserved_1y",
    "Commit3Yr": "reserved_3y",
}
"""Billing ``category.usageType`` -> the :class:`~pricing.catalog.Offering` price field."""

HOST_SERIES: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "a2": (("A2 Instance Core", "A2 Cpu"), ("A2 Instance Ram", "A2 Ram")),
    "a3": (("A3 Instance Core", "A3 Cpu"), ("A3 Instance Ram", "A3 Ram")),
    "a4": (("A4 Instance Core", "A4 Cpu"), ("A4 Instance Ram", "A4 Ram")),
    "g2": (("G2 Instance Core", "G2 Cpu"), ("G2 Instance Ram", "G2 Ram")),
    "n1": (("N1 Predefined Instance Core", "Cpu"), ("N1 Predefined Instance Ram", "Ram")),
}
"""Machine series -> (vCPU SKU names, RAM SKU names).  N1 commitments are plain "Cpu"/"Ram"."""

ACCELERATORS: Mapping[str, tuple[str, float, tuple[str, ...]]] = {
    "nvidia-tesla-t4": ("T4", 16.0, ("Tesla T4 GPU",)),
    "nvidia-tesla-v100": ("V100", 16.0, ("Tesla V100 GPU",)),
    "nvidia-tesla-p100": ("P100", 16.0, ("Tesla P100 GPU",)),
    "nvidia-tesla-p4": ("P4", 8.0, ("Tesla P4 GPU",)),
    "nvidia-tesla-a100": ("A100", 40.0, ("Tesla A100 GPU",)),
    "nvidia-a100-80gb": ("A100-80GB", 80.0, ("A100 80GB GPU",)),
    "nvidia-l4": ("L4", 24.0, ("L4 GPU",)),
    "nvidia-h100-80gb": ("H100", 80.0, ("H100 80GB GPU",)),
    "nvidia-h100-mega-80gb": ("H100-MEGA", 80.0, ("H100 80GB Mega GPU", "H100 Mega 80GB GPU", "H100 80GB Plus GPU")),
    "nvidia-h200-141gb": ("H200", 141.0, ("H200 141GB GPU",)),
    "nvidia-b200": ("B200", 180.0, ("B200 (1 gpu slice)", "A4 Nvidia B200 (1 gpu slice)")),
}
"""Compute accelerator type -> (SkyPilot GPU name, GB per GPU, SKU names with or without "Nvidia ").

Offerings name the chip (:data:`pricing.skypilot.GPU_ALIASES`: H100-MEGA is an H100),
as the rest of the catalog does, so throughput lookups agree."""

N1_HOST_FAMILIES = ("n1-standard-", "n1-highmem-", "n1-highcpu-")
N1_HOST_GiB_PER_VCPU = 4
"""Hosts for attached GPUs follow SkyPilot's rule, as the SkyPilot import does: the cheapest
N1 machine with at least :data:`pricing.skypilot.GCP_N1_HOST_VCPUS` vCPUs, at least 4 GiB
per vCPU, and within GCP's limits per GPU count (:data:`pricing.skypilot.GCP_N1_HOST_LIMITS`)."""

_EXCLUDED = ("custom", "premium", "reserved", "sole tenancy", "dws", "flex", "defined duration", "extended")
_PREFIXES = ("commitment v1: ", "commitment v2: ", "spot preemptible ", "preemptible ")
_DESCRIPTION = re.compile(
    r"^(?P<core>.+?)(?: attached to (?:spot )?preemptible vms)? (?:running )?in (?P<geo>[^()]+?)"
    r"(?: for (?P<years>[13]) years?)?$"
)
_UNITS = {"core": "h", "ram": "GiBy.h", "gpu": "h"}
_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")


def _aliases() -> dict[str, tuple[str, str]]:
    names: dict[str, tuple[str, str]] = {}
    for series, (cores, rams) in HOST_SERIES.items():
        names.update({n.lower(): ("core", series) for n in cores})
        names.update({n.lower(): ("ram", series) for n in rams})
    for accelerator, (_, _, skus) in ACCELERATORS.items():
        for n in skus:
            names[n.lower()] = ("gpu", accelerator)
            names[f"nvidia {n}".lower()] = ("gpu", accelerator)
    return names


_PARTS = _aliases()


def sku_part(description: str) -> tuple[str, str] | None:
    """``(component, key)`` a SKU description prices, e.g. ``("gpu", "nvidia-tesla-t4")``.

    ``None`` for anything that is not exactly a known vCPU, RAM or GPU part.
    """
    text = " ".join(description.split()).lower()
    if any(marker in text for marker in _EXCLUDED):
        return None
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :]
    match = _DESCRIPTION.match(text)
    return _PARTS.get(match["core"]) if match else None


@dataclass(frozen=True, slots=True)
class SkuPrice:
    price: float
    sku_id: str
    description: str


class AmbiguousSkuError(Exception):
    """Several SKUs with different prices match one part: the price is refused."""

    def __init__(self, part: str, region: str, usage: str, matches: Sequence[SkuPrice]):
        self.key = (part, region, usage)
        listed = "; ".join(f"{m.sku_id} {m.description!r} ${m.price:g}" for m in matches)
        super().__init__(f"gcp {region}: {usage} price of {part} refused, {len(matches)} SKUs match: {listed}")


@dataclass(slots=True)
class SkuIndex:
    """Unit prices of machine parts per (component, key, usage type, region)."""

    prices: dict[tuple[str, str, str, str], dict[float, SkuPrice]] = field(default_factory=dict)

    def add(self, sku: Any, warnings: list[str]) -> None:
        usage = sku.category.usage_type
        if usage not in USAGE_TYPES or sku.category.resource_family != "Compute":
            return
        part = sku_part(sku.description)
        if part is None:
            return
        if not sku.pricing_info:
            raise MalformedResponseError(
                CLOUD, f"SKU {sku.sku_id} {sku.description!r} has no pricingInfo; please report it"
            )
        expression = sku.pricing_info[0].pricing_expression
        if expression.usage_unit != _UNITS[part[0]]:
            warnings.append(
                f"gcp SKU {sku.sku_id} {sku.description!r}: unit {expression.usage_unit!r} unexpected, skipped"
            )
            return
        tiers = [t for t in expression.tiered_rates if not t.start_usage_amount]
        if not tiers:
            raise MalformedResponseError(
                CLOUD, f"SKU {sku.sku_id} {sku.description!r} has no base tier; please report it"
            )
        money = tiers[0].unit_price
        entry = SkuPrice(money.units + money.nanos / 1e9, sku.sku_id, sku.description)
        for region in sku.service_regions:
            self.prices.setdefault((*part, usage, region), {}).setdefault(entry.price, entry)

    def price(self, component: str, key: str, usage: str, region: str) -> float | None:
        """The unit price, ``None`` when no SKU matches; raises :class:`AmbiguousSkuError`."""
        found = self.prices.get((component, key, usage, region))
        if not found:
            return None
        if len(found) > 1:
            raise AmbiguousSkuError(f"{key} {component}", region, usage, sorted(found.values(), key=lambda m: m.price))
        return next(iter(found.values())).price


@dataclass(frozen=True, slots=True)
class MachineShape:
    """A priceable machine: host series and size plus its GPUs."""

    instance_type: str
    series: str
    vcpus: float
    memory_gb: float
    accelerator: str
    gpus: int

    def price(self, index: SkuIndex, usage: str, region: str) -> float | None:
        parts = (
            ("core", self.series, self.vcpus),
            ("ram", self.series, self.memory_gb),
            ("gpu", self.accelerator, self.gpus),
        )
        total = 0.0
        for component, key, quantity in parts:
            unit = index.price(component, key, usage, region)
            if unit is None:
                return None
            total += unit * quantity
        return total


def machine_shapes(
    machine_types: Mapping[str, Sequence[Any]], accelerator_types: Mapping[str, Sequence[Any]]
) -> dict[str, dict[str, tuple[MachineShape, ...]]]:
    """Priceable shapes per region, each offering with its alternative hosts.

    A bundled machine type (a2, a3, a4, g2) is its own single alternative.  An attached
    GPU count (``n1-...+T4:2``) lists every N1 host that fits it; the fetcher keeps the
    cheapest.  An accelerator type that some machine type bundles (A100 in a2, L4 in
    g2) is never offered as attachable.
    """
    bundled = {a.guest_accelerator_type for types in machine_types.values() for m in types for a in m.accelerators}
    shapes: dict[str, dict[str, dict[str, MachineShape]]] = {}
    for zone, types in machine_types.items():
        found = shapes.setdefault(zone.rpartition("-")[0], {})
        for m in types:
            series = m.name.split("-")[0]
            if len(m.accelerators) != 1 or series not in HOST_SERIES:
                continue
            accelerator = m.accelerators[0]
            if accelerator.guest_accelerator_type in ACCELERATORS:
                found.setdefault(m.name, {})[m.name] = MachineShape(
                    m.name, series, float(m.guest_cpus), m.memory_mb / 1024.0,
                    accelerator.guest_accelerator_type, int(accelerator.guest_accelerator_count),
                )  # fmt: skip
        for accelerator in accelerator_types.get(zone, ()):
            if accelerator.name in bundled or accelerator.name not in ACCELERATORS:
                continue
            gpu = ACCELERATORS[accelerator.name][0]
            count = 1
            while count <= accelerator.maximum_cards_per_instance:
                for host in _n1_hosts(gpu, count, types):
                    shape = MachineShape(
                        f"{host.name}+{gpu}:{count}", "n1", float(host.guest_cpus), host.memory_mb / 1024.0,
                        accelerator.name, count,
                    )  # fmt: skip
                    found.setdefault(f"{gpu}:{count}", {})[shape.instance_type] = shape
                count *= 2
    return {
        region: {key: tuple(alternatives.values()) for key, alternatives in found.items()}
        for region, found in shapes.items()
    }


def _n1_hosts(gpu: str, count: int, types: Sequence[Any]) -> list[Any]:
    min_vcpus = GCP_N1_HOST_VCPUS.get(gpu, GCP_N1_HOST_VCPUS["DEFAULT"]).get(count)
    if min_vcpus is None:
        return []
    max_vcpus, max_gib = GCP_N1_HOST_LIMITS.get(gpu, {}).get(count, (float("inf"), float("inf")))
    return [
        m
        for m in types
        if m.name.startswith(N1_HOST_FAMILIES)
        and min_vcpus <= m.guest_cpus <= max_vcpus
        and min_vcpus * N1_HOST_GiB_PER_VCPU <= m.memory_mb / 1024.0 <= max_gib
    ]


class GcpPriceFetcher:
    """Fetches GCP GPU offerings with injected clients.

    ``catalog_client`` is a ``billing_v1.CloudCatalogClient``; ``machine_types_client``
    and ``accelerator_types_client`` are ``compute_v1`` clients; ``project`` is the
    project whose zones are listed.
    """

    cloud = CLOUD

    def __init__(
        self,
        *,
        catalog_client: Any,
        machine_types_client: Any,
        accelerator_types_client: Any,
        project: str,
        retry: RetryPolicy | None = None,
        clock: Callable[[], dt.datetime] = utc_now,
        timeout: float = 120.0,
    ):
        self._catalog = catalog_client
        self._machines = machine_types_client
        self._accelerators = accelerator_types_client
        self._project = project
        self._retry = retry or RetryPolicy()
        self._clock = clock
        self._timeout = timeout

    def fetch(self, regions: Sequence[str] | None, progress: ProgressCallback | None = None) -> FetchResult:
        for region in regions or ():
            if not _REGION.match(region):
                raise InvalidRegionError(CLOUD, f"{region!r} is not a GCP region name (e.g. us-central1)")
        run = RegionFetch(CLOUD, self._clock())
        if progress:
            progress("gcp billing catalog", 0, 3)
        index = self._sku_index(run.warnings)
        if progress:
            progress("gcp machine types", 1, 3)
        machines = self._by_zone(self._machines, "machineTypes.aggregatedList", "machine_types")
        if progress:
            progress("gcp accelerator types", 2, 3)
        accelerators = self._by_zone(self._accelerators, "acceleratorTypes.aggregatedList", "accelerator_types")
        shapes = machine_shapes(machines, accelerators)
        wanted = list(regions) if regions else sorted(r for r, found in shapes.items() if found)
        return fetch_by_region(run, wanted, lambda r: self._offerings(r, shapes.get(r, {}), index, run), progress)

    def _offerings(
        self, region: str, shapes: Mapping[str, tuple[MachineShape, ...]], index: SkuIndex, run: RegionFetch
    ) -> list[Offering]:
        source = f"gcp billing catalog+compute api {run.fetched_at:%Y-%m-%dT%H:%MZ}"
        refused: set[tuple[str, str, str]] = set()
        offerings = []
        for _, alternatives in sorted(shapes.items()):
            priced = [(_prices(shape, index, region, refused, run.warnings), shape) for shape in alternatives]
            priced = [(prices, shape) for prices, shape in priced if any(p is not None for p in prices.values())]
            if not priced:
                continue
            prices, shape = min(priced, key=lambda pair: (*_rank(pair[0]), pair[1].instance_type))
            on_demand, spot = prices["on_demand"], prices["spot"]
            if on_demand is not None and spot is not None and spot > on_demand:
                run.warnings.append(
                    f"gcp {region} {shape.instance_type}: spot {spot:g} is above on-demand {on_demand:g}; "
                    "check the SKUs"
                )
            gpu, memory, _ = ACCELERATORS[shape.accelerator]
            offerings.append(
                Offering(
                    cloud=CLOUD,
                    region=region,
                    zone=None,
                    instance_type=shape.instance_type,
                    gpu=GPU_ALIASES.get(gpu, gpu),
                    gpus_per_node=shape.gpus,
                    gpu_memory_gb=memory,
                    vcpus=shape.vcpus,
                    memory_gb=shape.memory_gb,
                    as_of=run.fetched_at.date(),
                    source=source,
                    **prices,
                )
            )
        return offerings

    def _sku_index(self, warnings: list[str]) -> SkuIndex:
        index = SkuIndex()

        def page(token: str) -> Any:
            request = {"parent": COMPUTE_SERVICE, "currency_code": "USD", "page_size": 5000, "page_token": token}
            return self._catalog.list_skus(request=request, retry=None, timeout=self._timeout)

        for response in self._pages("list_skus", page):
            for sku in response.skus:
                index.add(sku, warnings)
        return index

    def _by_zone(self, client: Any, what: str, attribute: str) -> dict[str, list[Any]]:
        """Items of a compute ``aggregated_list`` per zone (other scopes are ignored)."""

        def page(token: str) -> Any:
            request = {"project": self._project, "page_token": token, "max_results": 500}
            return client.aggregated_list(request=request, retry=None, timeout=self._timeout)

        zones: dict[str, list[Any]] = {}
        for response in self._pages(what, page):
            for scope, scoped in response.items.items():
                if scope.startswith("zones/"):
                    zones.setdefault(scope.removeprefix("zones/"), []).extend(getattr(scoped, attribute))
        return zones

    def _pages(self, what: str, page: Callable[[str], Any]) -> Iterator[Any]:
        """Each response page of a listing; a throttled page is retried alone."""
        token, number = "", 0
        while True:
            number += 1
            response = self._call(f"{what} page {number}", lambda token=token: next(iter(page(token).pages)))
            yield response
            token = response.next_page_token
            if not token:
                return

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        import requests
        from google.api_core import exceptions as gx
        from google.auth import exceptions as ga

        try:
            return self._retry.call(fn, retry_after=_retry_after, cloud=CLOUD, what=what)
        except (gx.Unauthenticated, gx.Unauthorized, ga.DefaultCredentialsError, ga.RefreshError) as exc:
            raise MissingCredentialsError(
                CLOUD,
                f"no usable credentials for {what} ({type(exc).__name__}); run "
                "'gcloud auth application-default login' or set GOOGLE_APPLICATION_CREDENTIALS",
            ) from exc
        except (gx.PermissionDenied, gx.Forbidden) as exc:  # gRPC status / REST HTTP 403
            raise AccessDeniedError(
                CLOUD,
                f"{what} was denied; enable the Cloud Billing and Compute Engine APIs in project "
                f"{self._project} and grant compute.machineTypes.list / compute.acceleratorTypes.list",
            ) from exc
        except (ga.TransportError, requests.ConnectionError) as exc:
            raise NetworkError(
                CLOUD, f"cannot reach googleapis.com for {what}; check the network or HTTPS_PROXY"
            ) from exc
        except gx.GoogleAPICallError as exc:
            raise FetchError(
                CLOUD, f"{what} failed (HTTP {exc.code}); rerun 'planner prices refresh --cloud gcp'"
            ) from exc


def _prices(
    shape: MachineShape, index: SkuIndex, region: str, refused: set[tuple[str, str, str]], warnings: list[str]
) -> dict[str, float | None]:
    """The shape's price per purchase option; a refused (ambiguous) part is reported once per region."""
    prices: dict[str, float | None] = {}
    for usage, field_name in USAGE_TYPES.items():
        try:
            prices[field_name] = shape.price(index, usage, region)
        except AmbiguousSkuError as exc:
            prices[field_name] = None
            if exc.key not in refused:
                refused.add(exc.key)
                warnings.append(str(exc))
    return prices


def _rank(prices: Mapping[str, float | None]) -> tuple[bool, float]:
    """Cheapest on-demand first; shapes sold only otherwise after them, by their first price."""
    first = next(p for p in prices.values() if p is not None)
    return (prices["on_demand"] is None, prices["on_demand"] if prices["on_demand"] is not None else first)


def _retry_after(exc: BaseException) -> float | None:
    from google.api_core import exceptions as gx

    transient = (
        gx.TooManyRequests,
        gx.ResourceExhausted,
        gx.ServiceUnavailable,
        gx.InternalServerError,
        gx.BadGateway,
        gx.GatewayTimeout,
    )
    return 0.0 if isinstance(exc, transient) else None


def create_fetcher(*, project: str | None = None, retry: RetryPolicy | None = None) -> GcpPriceFetcher:
    """A :class:`GcpPriceFetcher` on Application Default Credentials.

    The project defaults to ``$GOOGLE_CLOUD_PROJECT``, then to the ADC project.
    """
    try:
        import google.auth
        from google.auth import exceptions as ga
        from google.cloud import billing_v1, compute_v1
    except ImportError as exc:
        raise FetchError(CLOUD, "the Google Cloud SDK is not installed; run: pip install 'danlu[gcp]'") from exc
    try:
        credentials, adc_project = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except ga.DefaultCredentialsError as exc:
        raise MissingCredentialsError(
            CLOUD,
            "no Application Default Credentials; run 'gcloud auth application-default login' "
            "or set GOOGLE_APPLICATION_CREDENTIALS",
        ) from exc
    project = project or os.environ.get(PROJECT_ENV) or adc_project
    if not project:
        raise MissingCredentialsError(CLOUD, f"no project; pass --project or set {PROJECT_ENV}")
    return GcpPriceFetcher(
        catalog_client=billing_v1.CloudCatalogClient(credentials=credentials, transport="rest"),
        machine_types_client=compute_v1.MachineTypesClient(credentials=credentials),
        accelerator_types_client=compute_v1.AcceleratorTypesClient(credentials=credentials),
        project=project,
        retry=retry,
    )
