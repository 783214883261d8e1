"""Carbon: grid intensity per cloud region, data-centre PUE, and GPU board power.

``kg CO2e per node-hour = GPUs x GPU board power (kW) x PUE x grid intensity (kg/kWh)``.

This is the **GPU-only upper bound** of the operational emissions: it takes each GPU at
its maximum board power (TDP; training averages less) and leaves out host CPUs, memory,
network and embodied emissions.  It is meant for ranking plans (``--objective carbon``),
not for reporting.

Grid intensities (``pricing/embedded/carbon.csv``, compiled by
``tools/build_embedded_catalog.py``, source named per row) are annual location-based
averages: Google's own 2024 figures for GCP regions, Cloud Carbon Footprint's factors
(EPA eGRID2020 for US regions, carbonfootprint.com / EEA elsewhere) for AWS and Azure and
for GCP regions Google's file lacks.
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

from pricing.catalog import Offering
from pricing.errors import CatalogFormatError, PricingError

EMBEDDED_CARBON = Path(__file__).resolve().parent / "embedded" / "carbon.csv"

PUE = {"aws": 1.135, "azure": 1.185, "gcp": 1.1}
"""Fleet-average power usage effectiveness per cloud, as Cloud Carbon Footprint uses
(commit b7a049c: ``AWS_CLOUD_CONSTANTS.PUE_AVG``, ``AZURE_CLOUD_CONSTANTS.PUE_AVG``,
``GCP_CLOUD_CONSTANTS.PUE_AVG``; see shared carbon/SOURCE.md)."""

GCP_REGION_PUE = {
    "us-east4": 1.08, "us-central1": 1.11, "us-central2": 1.11, "europe-west1": 1.09,
    "europe-west4": 1.07, "europe-north1": 1.09, "asia-east1": 1.12, "asia-southeast1": 1.13,
}
"""Google's trailing-twelve-month PUE for the regions CCF lists
(``GCP_CLOUD_CONSTANTS.PUE_TRAILING_TWELVE_MONTH``); other GCP regions use 1.1."""

DEFAULT_PUE = 1.2
"""For clouds CCF does not cover (e.g. Lambda): a little above the three hyperscalers'
averages, well below the 1.58 CCF quotes for on-premise data centres."""

GPU_BOARD_POWER_W = {
    "V100": 300, "V100-32GB": 300, "T4": 70, "A10": 150, "A10G": 300, "L4": 72, "L40S": 350,
    "A100": 400, "A100-80GB": 400, "H100": 700, "H200": 700, "B200": 1000,
}
"""Maximum board power (TDP, W) per GPU, from research/gpu-specs.md §1 (secondary quotes of
NVIDIA datasheets).  SXM figures where the clouds ship SXM parts (V100, A100, H100, H200);
where the sources conflict the higher value is kept, since this is an upper bound: A10G
300 W (nvidia-smi on g5) over 150 W, L40S 350 W over 300 W."""


class UnknownGpuPowerError(PricingError):
    """No board power is on record for a GPU name."""


def pue(cloud: str, region: str | None = None) -> float:
    """Power usage effectiveness of ``cloud`` (per region where Google publishes one)."""
    cloud = cloud.lower()
    if cloud == "gcp" and region is not None and region in GCP_REGION_PUE:
        return GCP_REGION_PUE[region]
    return PUE.get(cloud, DEFAULT_PUE)


def grid_intensity(cloud: str, region: str) -> float | None:
    """Grid carbon intensity in kg CO2e/kWh for a cloud region, or ``None`` if unknown.

    Region names match case-insensitively (Azure's data mixes ``EastUS`` and ``westus2``).
    """
    return _intensities().get((cloud.lower(), region.lower()))


def intensity_source(cloud: str, region: str) -> str | None:
    """Where :func:`grid_intensity`'s figure for this region comes from."""
    return _sources().get((cloud.lower(), region.lower()))


_POWER_KW = {name.lower(): watts / 1000 for name, watts in GPU_BOARD_POWER_W.items()}


def gpu_power_kw(gpu: str) -> float:
    """Maximum board power of one ``gpu`` (canonical catalog name, any case) in kW."""
    try:
        return _POWER_KW[gpu.lower()]
    except KeyError:
        raise UnknownGpuPowerError(
            f"no board power on record for GPU {gpu!r}; known: {', '.join(GPU_BOARD_POWER_W)}"
        ) from None


def kg_co2e_per_node_hour(offering: Offering) -> float | None:
    """GPU-only upper bound of kg CO2e per node-hour; ``None`` when region or GPU is unknown."""
    intensity = grid_intensity(offering.cloud, offering.region)
    power = _POWER_KW.get(offering.gpu.lower())
    if intensity is None or power is None:
        return None
    return offering.gpus_per_node * power * pue(offering.cloud, offering.region) * intensity


@functools.lru_cache(maxsize=1)
def _table() -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], str]]:
    intensities: dict[tuple[str, str], float] = {}
    sources: dict[tuple[str, str], str] = {}
    with EMBEDDED_CARBON.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        for row in reader:
            key = (row["cloud"].lower(), row["region"].lower())
            try:
                intensities[key] = float(row["kgco2e_per_kwh"])
            except ValueError:
                raise CatalogFormatError(
                    f"{EMBEDDED_CARBON}:{reader.line_num}: column 'kgco2e_per_kwh': "
                    f"{row['kgco2e_per_kwh']!r} is not a number; rebuild with tools/build_embedded_catalog.py"
                ) from None
            sources[key] = row["source"]
    return intensities, sources


def _intensities() -> dict[tuple[str, str], float]:
    return _table()[0]


def _sources() -> dict[tuple[str, str], str]:
    return _table()[1]
