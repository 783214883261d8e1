"""Grid intensity, PUE, GPU power and the per-node-hour carbon figure."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt

import pytest

from pricing.carbon import (
    DEFAULT_PUE,
    EMBEDDED_CARBON,
    UnknownGpuPowerError,
    gpu_power_kw,
    grid_intensity,
    intensity_source,
    kg_co2e_per_node_hour,
    pue,
)
from pricing.catalog import Offering
from pricing.errors import PricingError

P4D = Offering(
    cloud="aws", region="us-east-1", zone=None, instance_type="p4d.24xlarge", gpu="A100", gpus_per_node=8,
    gpu_memory_gb=40.0, vcpus=96.0, memory_gb=1152.0, on_demand=21.96, as_of=dt.date(2025, 7, 3),
)


def test_grid_intensity_per_cloud_region():
    assert grid_intensity("aws", "us-east-1") == 0.379069
    assert "eGRID2020 NERC SERC" in intensity_source("aws", "us-east-1")
    assert grid_intensity("azure", "eastus") == grid_intensity("azure", "EastUS") == 0.379069
    assert grid_intensity("azure", "westus2") == 0.322167
    assert grid_intensity("gcp", "us-central1") == pytest.approx(0.41272)  # Google's 2024 figure, not CCF's 0.456
    assert "Google region-carbon-info 2024" in intensity_source("gcp", "us-central1")
    assert grid_intensity("gcp", "europe-north2") == pytest.approx(0.00273)
    assert grid_intensity("aws", "Unknown") is None
    assert grid_intensity("lambda", "us-east-1") is None


def test_every_carbon_row_is_sourced_and_plausible():
    with EMBEDDED_CARBON.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["cloud"] for r in rows} == {"aws", "azure", "gcp"}
    for r in rows:
        assert r["source"] and 0 <= float(r["kgco2e_per_kwh"]) < 1.5, r


def test_pue_per_cloud_and_gcp_region():
    assert (pue("aws"), pue("azure"), pue("gcp")) == (1.135, 1.185, 1.1)
    assert pue("gcp", "europe-west4") == 1.07
    assert pue("gcp", "us-west1") == 1.1
    assert pue("AWS", "us-east-1") == 1.135
    assert pue("lambda") == DEFAULT_PUE


def test_gpu_power():
    assert gpu_power_kw("H100") == 0.7
    assert gpu_power_kw("a100-80gb") == 0.4
    assert gpu_power_kw("T4") == 0.07
    with pytest.raises(UnknownGpuPowerError, match="no board power on record for GPU 'RTX6000'"):
        gpu_power_kw("RTX6000")
    assert issubclass(UnknownGpuPowerError, PricingError)


def test_kg_co2e_per_node_hour_is_gpus_times_power_times_pue_times_intensity():
    assert kg_co2e_per_node_hour(P4D) == pytest.approx(8 * 0.4 * 1.135 * 0.379069)
    gcp = dataclasses.replace(P4D, cloud="gcp", region="us-central1", gpu="L4", gpus_per_node=1)
    assert kg_co2e_per_node_hour(gcp) == pytest.approx(0.072 * 1.11 * 0.41272)
    assert kg_co2e_per_node_hour(dataclasses.replace(P4D, region="mars-1")) is None
    assert kg_co2e_per_node_hour(dataclasses.replace(P4D, gpu="GH200")) is None
