"""What moving bytes between clouds and regions costs: per-cloud egress tables ($/GB).

Every cloud bills data that *leaves* it (or leaves a region of it) at the *source*
cloud's rate; ingress is free on AWS, GCP and Azure.  So the price of reading a dataset
in ``gcp:us-central1`` from a pool in ``aws:us-east-1`` is GCP's internet egress rate,
and reading it from ``gcp:europe-west4`` is GCP's inter-region rate.

The tables hold the published list price of the first paid volume tier (the tier a
training job's one-off transfer of some GB to a few TB falls in), per GB, in USD:
within a region (free), between regions of one continent, between continents, and out
to the internet (which is how a transfer to another cloud is billed).  Each row names
its page and the date it was read; :data:`DEFAULT_TABLE` covers clouds without a table
(e.g. one imported from a SkyPilot catalog) and says so in the quote.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from pricing.errors import PricingError

CLOUD_SCHEMES = {"s3": "aws", "gs": "gcp", "gcs": "gcp", "az": "azure", "abfs": "azure", "abfss": "azure"}
"""Object-store URL schemes and the cloud that bills their egress."""


class LocationError(PricingError, ValueError):
    """A location string that names no cloud and region (the message says how to write one)."""


@dataclass(frozen=True, slots=True, order=True)
class Site:
    """A cloud region: where data, a checkpoint store or a pool lives."""

    cloud: str
    region: str

    def __str__(self) -> str:
        return f"{self.cloud}:{self.region}"


@dataclass(frozen=True, slots=True)
class EgressTable:
    """One cloud's egress list prices, USD per GB, first paid tier."""

    cloud: str
    inter_region_usd_per_gb: float  # another region on the same continent
    inter_continent_usd_per_gb: float  # another region on another continent
    internet_usd_per_gb: float  # out of the cloud: the internet, another cloud
    as_of: dt.date
    source: str


EGRESS_TABLES: dict[str, EgressTable] = {
    "aws": EgressTable(
        "aws", 0.02, 0.02, 0.09, dt.date(2026, 6, 2),
        "aws.amazon.com/ec2/pricing/on-demand/ (Data Transfer): out to the internet $0.09/GB for the first "
        "10 TB a month after 100 GB free; to another AWS region $0.02/GB from US and EU regions (some "
        "Asia-Pacific sources charge up to $0.09); same-region S3 to EC2 free",
    ),
    "gcp": EgressTable(
        "gcp", 0.02, 0.08, 0.12, dt.date(2026, 5, 1),
        "cloud.google.com/vpc/network-pricing: Premium Tier internet data transfer $0.12/GiB (first TiB, "
        "NA/EU destinations); data transfer between regions $0.01-0.08/GiB by region pair, taken as $0.02 "
        "within a continent and $0.08 between continents; same-region free",
    ),
    "azure": EgressTable(
        "azure", 0.02, 0.05, 0.087, dt.date(2026, 5, 1),
        "azure.microsoft.com/pricing/details/bandwidth/: internet egress over the Microsoft network "
        "$0.087/GB for the first 10 TB after 100 GB free; between regions within North America or Europe "
        "$0.02/GB, between continents $0.05/GB; within a region free",
    ),
}

DEFAULT_TABLE = EgressTable(
    "default", 0.02, 0.08, 0.12, dt.date(2026, 6, 2),
    "no published table for this cloud: the highest of the AWS, GCP and Azure rates per kind, so an "
    "unknown cloud is never the cheap place to keep data",
)

DEFAULT_TRANSFER_GBPS = 1.0
"""Gbit/s assumed for a transfer between regions or clouds when the job states none: what
one VM's single object-store stream sustains across the public internet, a conservative
figure (a tuned multi-stream copy inside one cloud reaches several times that)."""

_CONTINENT_PREFIXES: dict[str, tuple[tuple[str, str], ...]] = {
    # region-name prefixes -> continent, per naming scheme
    "aws": (("us-", "na"), ("ca-", "na"), ("mx-", "na"), ("eu-", "eu"), ("il-", "mea"), ("me-", "mea"),
            ("af-", "mea"), ("ap-", "asia"), ("sa-", "sa")),
    "gcp": (("us-", "na"), ("northamerica-", "na"), ("europe-", "eu"), ("me-", "mea"), ("africa-", "mea"),
            ("asia-", "asia"), ("australia-", "asia"), ("southamerica-", "sa")),
}
_AZURE_WORDS = (("us", "na"), ("canada", "na"), ("mexico", "na"), ("europe", "eu"), ("uk", "eu"),
                ("france", "eu"), ("germany", "eu"), ("norway", "eu"), ("sweden", "eu"), ("switzerland", "eu"),
                ("poland", "eu"), ("italy", "eu"), ("spain", "eu"), ("brazil", "sa"), ("chile", "sa"),
                ("japan", "asia"), ("korea", "asia"), ("india", "asia"), ("asia", "asia"), ("australia", "asia"),
                ("uae", "mea"), ("qatar", "mea"), ("southafrica", "mea"), ("israel", "mea"))
_LOCATION = re.compile(r"^([a-z][a-z0-9_-]{0,39}):([a-z0-9][a-z0-9-]{0,62})$")


def table_for(cloud: str) -> EgressTable:
    return EGRESS_TABLES.get(cloud, DEFAULT_TABLE)


def continent(site: Site) -> str | None:
    """The continent of a region by its name, or None when the name says nothing."""
    region = site.region.lower()
    if site.cloud == "azure":
        for word, cont in _AZURE_WORDS:
            # "eastus", "westus2", "southcentralus", "centralindia": the country word is in the name
            if word == "us" and re.search(r"us\d*$", region):
                return cont
            if word != "us" and word in region:
                return cont
        return None
    for prefix, cont in _CONTINENT_PREFIXES.get(site.cloud, _CONTINENT_PREFIXES["aws"]):
        if region.startswith(prefix):
            return cont
    return None


def usd_per_gb(source: Site, destination: Site) -> float:
    """List price of moving one GB from ``source`` to ``destination``, billed by the source's cloud."""
    if source == destination:
        return 0.0
    table = table_for(source.cloud)
    if source.cloud != destination.cloud:
        return table.internet_usd_per_gb
    a, b = continent(source), continent(destination)
    # An unreadable region name is priced as the dearer case: a quote should not hide a cost.
    same = a is not None and a == b
    return table.inter_region_usd_per_gb if same else table.inter_continent_usd_per_gb


def transfer_hours(gb: float, gbps: float) -> float:
    """Hours to move ``gb`` gigabytes at ``gbps`` gigabits per second."""
    return gb * 8.0 / gbps / 3600.0


def parse_site(text: str, region: str | None = None) -> Site:
    """``"gcp:us-central1"``, or an object-store URL (``s3://bucket/prefix``) with its ``region``.

    Raises :class:`LocationError` saying how to write the location."""
    text = text.strip()
    if "://" in text:
        scheme = text.split("://", 1)[0].lower()
        cloud = CLOUD_SCHEMES.get(scheme)
        if cloud is None:
            raise LocationError(
                f"{text!r}: the scheme {scheme!r} is not an object store of a cloud ({', '.join(CLOUD_SCHEMES)}); "
                'write "cloud:region", e.g. "gcp:us-central1"'
            )
        if not region:
            raise LocationError(
                f"{text!r} names the cloud ({cloud}) but not the region its bucket is in; add the region, "
                'e.g. region = "us-east-1"'
            )
        return Site(cloud, region.strip().lower())
    match = _LOCATION.match(text.lower())
    if match is None:
        raise LocationError(f'{text!r} is not "cloud:region" (e.g. "aws:us-east-1") or an object-store URL '
                            '(e.g. "s3://bucket/prefix" with region = "us-east-1")')
    if region and region.strip().lower() != match.group(2):
        raise LocationError(f"{text!r} and region {region!r} disagree; give the region once")
    return Site(match.group(1), match.group(2))
