"""AWS GPU prices from the live APIs (boto3).

Four sources are joined per region:

* ``ec2.describe_instance_types``: which instance types the region has and their
  NVIDIA GPUs (``GpuInfo``), vCPUs and memory;
* ``pricing.get_products`` (the Price List Query API, which only answers in
  us-east-1, so its client is pinned there whatever region is priced): Linux,
  shared tenancy, no pre-installed software, ``capacitystatus=Used``,
  ``marketoption=OnDemand`` rows of the "GPU instance" family, with their
  on-demand and reserved terms;
* ``ec2.describe_spot_price_history`` from now on: the current spot price per
  availability zone (the latest entry per zone);
* the Spot Instance Advisor JSON: the interruption-frequency bucket per type.

Reserved prices: ``reserved_1y``/``reserved_3y`` are **standard** Reserved Instances,
**No Upfront** when AWS sells that option for the type, otherwise the cheapest
effective rate among the standard Partial/All Upfront options.  The effective
hourly rate is the hourly fee plus the upfront fee spread over the term
(``Hrs + Quantity / (8760 × years)``), so options are comparable.  No Upfront
comes first because it asks no capital, like GCP's resource commitments and
Azure's monthly-paid reservations.

Every SDK call goes through one :class:`~pricing.retry.RetryPolicy` (botocore's
own retries are turned off in :func:`create_fetcher`); a throttled listing is
restarted from its first page.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
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
from pricing.skypilot import marketed_memory_gb

CLOUD = "aws"
PRICING_API_REGION = "us-east-1"
SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"

PRICE_LIST_FILTERS = (
    ("tenancy", "Shared"),
    ("operatingSystem", "Linux"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
    ("licenseModel", "No License required"),
    ("marketoption", "OnDemand"),
    ("instanceFamily", "GPU instance"),
)
"""Price List TERM_MATCH filters (besides ``regionCode``): the plain Linux on-demand rows."""

_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_THROTTLED = frozenset(
    {
        "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException",
        "RequestThrottled", "RequestThrottledException", "SlowDown", "ServiceUnavailable",
        "ServiceUnavailableException", "InternalError", "InternalFailure", "InternalServerError",
    }
)  # fmt: skip
_BAD_CREDENTIALS = frozenset(
    {
        "UnrecognizedClientException", "InvalidClientTokenId", "AuthFailure", "ExpiredToken",
        "ExpiredTokenException", "SignatureDoesNotMatch", "IncompleteSignature",
    }
)  # fmt: skip
_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
_PERMISSIONS = "pricing:GetProducts, ec2:DescribeInstanceTypes, ec2:DescribeSpotPriceHistory, ec2:DescribeRegions"


@dataclass(frozen=True, slots=True)
class InstanceFacts:
    """What ``describe_instance_types`` says about one GPU instance type."""

    instance_type: str
    gpu: str
    gpus: int
    gpu_memory_gb: float
    vcpus: float
    memory_gb: float


@dataclass(frozen=True, slots=True)
class ListPrice:
    """Hourly on-demand and effective reserved prices of one instance type."""

    on_demand: float | None
    reserved_1y: float | None
    reserved_3y: float | None


def canonical_gpu_name(name: str, memory_mib: float) -> str:
    """The SkyPilot catalog's name for an EC2 GPU (``A100`` with 80 GB is ``A100-80GB``)."""
    if name == "A100" and memory_mib >= 70 * 1024:
        return "A100-80GB"
    if name == "V100" and memory_mib >= 30 * 1024:
        return "V100-32GB"
    return name


def instance_facts(item: Mapping[str, Any]) -> InstanceFacts | None:
    """Facts from one ``InstanceTypes[]`` item; ``None`` unless it carries whole NVIDIA GPUs."""
    gpu_info = item.get("GpuInfo")
    if not gpu_info:
        return None
    gpus = [g for g in gpu_info.get("Gpus", []) if g.get("Manufacturer") == "NVIDIA"]
    # Fractional GPUs (g6f) cannot run one DDP rank per GPU.
    if len(gpus) != 1 or float(gpus[0].get("GpuPartitionSize", 1.0)) < 1.0:
        return None
    gpu = gpus[0]
    memory_mib = float(gpu["MemoryInfo"]["SizeInMiB"])
    name = canonical_gpu_name(gpu["Name"], memory_mib)
    return InstanceFacts(
        instance_type=item["InstanceType"],
        gpu=name,
        gpus=int(gpu["Count"]),
        # EC2 reports usable memory (A10G: 22,888 MiB); compare marketed sizes, as the SkyPilot import does.
        gpu_memory_gb=marketed_memory_gb(name, round(memory_mib / 1024.0, 2)),
        vcpus=float(item["VCpuInfo"]["DefaultVCpus"]),
        memory_gb=float(item["MemoryInfo"]["SizeInMiB"]) / 1024.0,
    )


def parse_price_list_item(text: str) -> tuple[str, ListPrice] | None:
    """``(instance type, prices)`` from one ``PriceList`` entry (a JSON string).

    ``None`` for rows that are not plain on-demand capacity (the $0 CapacityBlock
    twins the price list carries) or that have no positive hourly price at all.
    """
    item = json.loads(text)
    attributes = item["product"]["attributes"]
    if attributes.get("marketoption", "OnDemand") != "OnDemand":
        return None
    terms = item.get("terms", {})
    on_demand = _on_demand_rate(terms.get("OnDemand", {}))
    reserved_1y = _reserved_rate(terms.get("Reserved", {}), years=1)
    reserved_3y = _reserved_rate(terms.get("Reserved", {}), years=3)
    if on_demand is None and reserved_1y is None and reserved_3y is None:
        return None
    return attributes["instanceType"], ListPrice(on_demand, reserved_1y, reserved_3y)


def _dimensions(term: Mapping[str, Any]) -> Iterator[tuple[str, float]]:
    for dim in term["priceDimensions"].values():
        yield dim["unit"], float(dim["pricePerUnit"]["USD"])


class ConflictingRatesError(Exception):
    """One price-list row carries several different on-demand hourly rates: none is trusted."""


def _on_demand_rate(terms: Mapping[str, Any]) -> float | None:
    rates = {price for term in terms.values() for unit, price in _dimensions(term) if unit == "Hrs" and price > 0}
    if len(rates) > 1:
        raise ConflictingRatesError(f"several on-demand hourly rates {sorted(rates)}")
    return rates.pop() if rates else None


def _reserved_rate(terms: Mapping[str, Any], *, years: int) -> float | None:
    by_option: dict[str, float] = {}
    for term in terms.values():
        attrs = term["termAttributes"]
        if attrs.get("LeaseContractLength") != f"{years}yr" or attrs.get("OfferingClass") != "standard":
            continue
        hourly = upfront = 0.0
        for unit, price in _dimensions(term):
            if unit == "Hrs":
                hourly += price
            elif unit == "Quantity":
                upfront += price
        effective = hourly + upfront / (HOURS_PER_YEAR * years)
        if effective > 0:
            option = attrs.get("PurchaseOption", "")
            by_option[option] = min(effective, by_option.get(option, effective))
    if "No Upfront" in by_option:
        return by_option["No Upfront"]
    return min(by_option.values(), default=None)


@dataclass(frozen=True, slots=True)
class SpotAdvisor:
    """Interruption-frequency buckets from the AWS Spot Instance Advisor JSON.

    ``spot_advisor[region]["Linux"][type]["r"]`` indexes ``ranges[]``, whose
    ``label`` ("<5%", ..., ">20%") is AWS's share of spot capacity reclaimed over
    the trailing month.  AWS publishes it per region, not per zone.
    """

    labels: Mapping[int, str]
    buckets: Mapping[tuple[str, str], int]

    @classmethod
    def parse(cls, data: Any, source: str) -> SpotAdvisor:
        try:
            labels = {int(r["index"]): str(r["label"]) for r in data["ranges"]}
            buckets = {
                (region, itype): int(entry["r"])
                for region, by_os in data["spot_advisor"].items()
                for itype, entry in by_os.get("Linux", {}).items()
            }
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MalformedResponseError(
                CLOUD,
                f"spot advisor data from {source} lacks ranges[].index/label or "
                f"spot_advisor.<region>.Linux.<type>.r ({exc!r})",
            ) from exc
        return cls(labels=labels, buckets=buckets)

    def bucket(self, region: str, instance_type: str) -> str | None:
        index = self.buckets.get((region, instance_type))
        return None if index is None else self.labels.get(index)


def load_spot_advisor(
    session: Any = None, *, url: str = SPOT_ADVISOR_URL, retry: RetryPolicy | None = None, timeout: float = 30.0
) -> SpotAdvisor:
    """Download and parse the Spot Instance Advisor JSON (public, no credentials)."""
    import requests

    http = session or requests.Session()

    def get() -> Any:
        response = http.get(url, timeout=timeout)
        response.raise_for_status()
        return response.json()

    def retry_after(exc: BaseException) -> float | None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return 0.0 if status in (429, 500, 502, 503, 504) else None

    try:
        data = (retry or RetryPolicy()).call(
            get, retry_after=retry_after, cloud=CLOUD, what="the spot advisor download"
        )
    except requests.ConnectionError as exc:
        raise NetworkError(CLOUD, f"cannot reach {url}; check the network or HTTPS_PROXY") from exc
    except ValueError as exc:  # requests' JSONDecodeError is a ValueError too
        raise MalformedResponseError(CLOUD, f"{url} did not return JSON ({exc})") from exc
    except requests.RequestException as exc:
        raise FetchError(CLOUD, f"spot advisor download from {url} failed: {exc}") from exc
    return SpotAdvisor.parse(data, url)


class AwsPriceFetcher:
    """Fetches AWS GPU offerings with injected boto3 clients.

    ``ec2_client(region)`` returns an EC2 client for ``region``; ``pricing_client``
    must be a Price List client in a region that serves it (us-east-1).
    ``advisor`` loads the Spot Advisor data (``None``: no interruption buckets).
    """

    cloud = CLOUD

    def __init__(
        self,
        *,
        pricing_client: Any,
        ec2_client: Callable[[str], Any],
        advisor: Callable[[], SpotAdvisor] | None = None,
        retry: RetryPolicy | None = None,
        clock: Callable[[], dt.datetime] = utc_now,
    ):
        self._pricing = pricing_client
        self._ec2 = ec2_client
        self._advisor = advisor
        self._retry = retry or RetryPolicy()
        self._clock = clock

    def fetch(self, regions: Sequence[str] | None, progress: ProgressCallback | None = None) -> FetchResult:
        for region in regions or ():
            if not _REGION.match(region):
                raise InvalidRegionError(CLOUD, f"{region!r} is not an AWS region name (e.g. us-east-1)")
        run = RegionFetch(CLOUD, self._clock())
        wanted = list(regions) if regions else self._enabled_regions()
        advisor = self._load_advisor(run.warnings)
        return fetch_by_region(run, wanted, lambda r: self._fetch_region(r, run, advisor), progress)

    def _enabled_regions(self) -> list[str]:
        ec2 = self._ec2(PRICING_API_REGION)
        response = self._call("describe_regions", lambda: ec2.describe_regions())
        return sorted(r["RegionName"] for r in response["Regions"])

    def _load_advisor(self, warnings: list[str]) -> SpotAdvisor | None:
        if self._advisor is None:
            return None
        try:
            return self._advisor()
        except FetchError as exc:
            warnings.append(f"{exc}; spot interruption buckets left empty")
            return None

    def _fetch_region(self, region: str, run: RegionFetch, advisor: SpotAdvisor | None) -> list[Offering]:
        ec2 = self._ec2(region)
        facts = self._instance_facts(ec2, region)
        if not facts:
            return []
        prices = self._list_prices(region, run.warnings)
        spot = self._spot_prices(ec2, region, sorted(facts))
        source = f"aws pricing+ec2 api {run.fetched_at:%Y-%m-%dT%H:%MZ}"
        offerings: list[Offering] = []
        unpriced: list[str] = []
        for itype, f in sorted(facts.items()):
            price = prices.get(itype, ListPrice(None, None, None))
            zones = spot.get(itype, {})
            if not zones and price == ListPrice(None, None, None):
                unpriced.append(itype)
                continue
            base = Offering(
                cloud=CLOUD, region=region, zone=None, instance_type=itype, gpu=f.gpu, gpus_per_node=f.gpus,
                gpu_memory_gb=f.gpu_memory_gb, vcpus=f.vcpus, memory_gb=f.memory_gb, on_demand=price.on_demand,
                reserved_1y=price.reserved_1y, reserved_3y=price.reserved_3y,
                interruption_bucket=advisor.bucket(region, itype) if advisor else None,
                as_of=run.fetched_at.date(), source=source,
            )  # fmt: skip
            if not zones:
                offerings.append(base)
            for zone, spot_price in sorted(zones.items()):
                if price.on_demand is not None and spot_price > price.on_demand:
                    run.warnings.append(
                        f"aws {zone} {itype}: spot {spot_price:g} is above on-demand {price.on_demand:g} "
                        "(kept as quoted)"
                    )
                offerings.append(replace(base, zone=zone, spot=spot_price))
        if unpriced:
            run.warnings.append(f"aws {region}: no Linux on-demand or spot price for {', '.join(unpriced)}")
        return offerings

    def _instance_facts(self, ec2: Any, region: str) -> dict[str, InstanceFacts]:
        def listing() -> list[dict[str, Any]]:
            pages = ec2.get_paginator("describe_instance_types").paginate(PaginationConfig={"PageSize": 100})
            return [item for page in pages for item in page["InstanceTypes"]]

        items = self._call(f"describe_instance_types in {region}", listing)
        facts: dict[str, InstanceFacts] = {}
        for item in items:
            try:
                f = instance_facts(item)
            except (KeyError, TypeError, ValueError) as exc:
                raise _malformed("describe_instance_types", region, item.get("InstanceType"), exc) from exc
            if f is not None:
                facts[f.instance_type] = f
        return facts

    def _list_prices(self, region: str, warnings: list[str]) -> dict[str, ListPrice]:
        filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}]
        filters += [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in PRICE_LIST_FILTERS]

        def listing() -> list[str]:
            pages = self._pricing.get_paginator("get_products").paginate(
                ServiceCode="AmazonEC2", FormatVersion="aws_v1", Filters=filters, PaginationConfig={"PageSize": 100}
            )
            return [text for page in pages for text in page["PriceList"]]

        prices: dict[str, ListPrice] = {}
        for n, text in enumerate(self._call(f"get_products for {region}", listing)):
            try:
                parsed = parse_price_list_item(text)
            except ConflictingRatesError as exc:
                warnings.append(f"aws {region} PriceList item {n}: {exc}; refused")
                continue
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise _malformed("get_products", region, f"PriceList item {n}", exc) from exc
            if parsed is None:
                continue
            itype, price = parsed
            if itype in prices and prices[itype] != price:
                warnings.append(f"aws {region} {itype}: several price-list rows disagree; its prices were refused")
                prices[itype] = ListPrice(None, None, None)
                continue
            prices[itype] = price
        return prices

    def _spot_prices(self, ec2: Any, region: str, instance_types: list[str]) -> dict[str, dict[str, float]]:
        start = self._clock()

        def listing() -> list[dict[str, Any]]:
            pages = ec2.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=instance_types,
                ProductDescriptions=["Linux/UNIX"],
                StartTime=start,
                PaginationConfig={"PageSize": 1000},
            )
            return [row for page in pages for row in page["SpotPriceHistory"]]

        latest: dict[tuple[str, str], tuple[dt.datetime, float]] = {}
        for row in self._call(f"describe_spot_price_history in {region}", listing):
            try:
                if row["ProductDescription"] != "Linux/UNIX":
                    continue
                key = (row["InstanceType"], row["AvailabilityZone"])
                stamp, price = row["Timestamp"], float(row["SpotPrice"])
            except (KeyError, TypeError, ValueError) as exc:
                raise _malformed("describe_spot_price_history", region, row.get("InstanceType"), exc) from exc
            if price > 0 and (key not in latest or stamp > latest[key][0]):
                latest[key] = (stamp, price)
        by_type: dict[str, dict[str, float]] = {}
        for (itype, zone), (_, price) in latest.items():
            by_type.setdefault(itype, {})[zone] = price
        return by_type

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return self._retry.call(fn, retry_after=_retry_after, cloud=CLOUD, what=what)
        except FetchError:
            raise
        except Exception as exc:
            translated = _translate(exc, what)
            if translated is None:
                raise
            raise translated from exc


def _malformed(operation: str, region: str, where: Any, exc: BaseException) -> MalformedResponseError:
    return MalformedResponseError(
        CLOUD,
        f"malformed {operation} response in {region} at {where}: {exc!r}; "
        "the API shape may have changed, please report it with this line",
    )


def _error_code(exc: BaseException) -> tuple[str, int | None]:
    response = getattr(exc, "response", None) or {}
    error = response.get("Error", {}) if isinstance(response, dict) else {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") if isinstance(response, dict) else None
    return str(error.get("Code", "")), status


def _retry_after(exc: BaseException) -> float | None:
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return None
    code, status = _error_code(exc)
    return 0.0 if code in _THROTTLED or status in (429, 500, 502, 503, 504) else None


def _translate(exc: BaseException, what: str) -> FetchError | None:
    """One actionable :class:`FetchError` for a botocore exception (never echoing secrets).

    ``None`` for exceptions that are not botocore's: those are bugs, not fetch failures.
    """
    from botocore import exceptions as bx

    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError, bx.ProfileNotFound, bx.TokenRetrievalError)):
        return MissingCredentialsError(
            CLOUD,
            f"no usable credentials ({type(exc).__name__}); run 'aws configure' or 'aws sso login', "
            "or set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
        )
    if isinstance(
        exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError, bx.ConnectionClosedError)
    ):
        return NetworkError(CLOUD, f"cannot reach AWS for {what}; check the network connection or HTTPS_PROXY")
    if isinstance(exc, bx.ClientError):
        code, _ = _error_code(exc)
        if code in _BAD_CREDENTIALS:
            return MissingCredentialsError(
                CLOUD,
                f"AWS rejected the credentials ({code}) during {what}; "
                "refresh them ('aws sso login' or 'aws configure')",
            )
        if code in _DENIED:
            return AccessDeniedError(CLOUD, f"{what} was denied ({code}); grant {_PERMISSIONS} to these credentials")
        if code == "OptInRequired":
            return FetchError(
                CLOUD, f"{what}: the region is not enabled for this account; enable it or drop it from --region"
            )
        return FetchError(
            CLOUD, f"{what} failed ({code or type(exc).__name__}); rerun 'planner prices refresh --cloud aws'"
        )
    if isinstance(exc, bx.BotoCoreError):
        return FetchError(CLOUD, f"{what} failed ({type(exc).__name__}: {exc})")
    return None


def create_fetcher(*, profile: str | None = None, retry: RetryPolicy | None = None) -> AwsPriceFetcher:
    """An :class:`AwsPriceFetcher` on boto3's standard credential chain (``profile``: a named profile)."""
    try:
        import boto3
        from botocore import exceptions as bx
        from botocore.config import Config
    except ImportError as exc:
        raise FetchError(CLOUD, "boto3 is not installed; run: pip install 'danlu[aws]'") from exc
    try:
        session = boto3.Session(profile_name=profile)
    except bx.ProfileNotFound as exc:
        raise MissingCredentialsError(
            CLOUD, f"AWS profile {profile!r} not found; check ~/.aws/config or AWS_PROFILE"
        ) from exc
    config = Config(retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=10, read_timeout=60)
    policy = retry or RetryPolicy()

    def client(service: str, region: str) -> Any:
        # Clients resolve credentials when built, so a half-configured chain fails here.
        try:
            return session.client(service, region_name=region, config=config)
        except bx.BotoCoreError as exc:
            raise (_translate(exc, f"creating the {service} client") or exc) from exc

    return AwsPriceFetcher(
        pricing_client=client("pricing", PRICING_API_REGION),
        ec2_client=lambda region: client("ec2", region),
        advisor=lambda: load_spot_advisor(retry=policy),
        retry=policy,
    )
