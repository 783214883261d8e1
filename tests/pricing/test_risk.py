"""Spot interruption rates: the bucket calibration, trace rates and the Spot Advisor reader."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from pricing.catalog import Offering
from pricing.errors import PricingError
from pricing.risk import (
    BUCKET_LABELS,
    BUCKET_RATES,
    CLOUD_DEFAULT_RATES,
    MEAN_AVAILABLE_RUN_HOURS,
    OVER_20_RATE,
    TRACE_AVAILABLE_HOURS,
    TRACE_POOLS,
    UNKNOWN_CLOUD_RATE,
    SpotDataError,
    bucket_rate,
    interruption_rate,
    parse_spot_advisor,
    rate_from_trace,
    read_spot_advisor,
)
from tests.conftest import shared_path

SPOT = Offering(
    cloud="aws", region="us-east-1", zone="use1-az1", instance_type="p3.2xlarge", gpu="V100", gpus_per_node=1,
    gpu_memory_gb=16.0, vcpus=8.0, memory_gb=61.0, on_demand=3.06, spot=0.97, as_of=dt.date(2025, 7, 3),
)


def test_bucket_rates_rise_with_the_bucket_and_top_out_at_the_trace_rate():
    rates = [bucket_rate(label) for label in BUCKET_LABELS]
    assert rates == sorted(rates) and len(set(rates)) == len(rates)
    assert rates[-1] == OVER_20_RATE == pytest.approx(0.5402, abs=1e-4)
    assert MEAN_AVAILABLE_RUN_HOURS == pytest.approx(1.850, abs=1e-3)
    # proportional to the bucket midpoints 2.5%, 7.5%, 12.5%, 17.5%, 25%
    assert [r / rates[0] for r in rates] == pytest.approx([1, 3, 5, 7, 10])


@pytest.mark.shared
def test_calibration_constants_match_the_p3_traces():
    folder = shared_path("traces", "skypilot-spot-traces", "availability", "1-node", "aws-02-15-2023")
    files = sorted(folder.glob("*_v100_1.json"))
    assert len(files) == 9
    preemptions = hours = runs = 0.0
    for file in files:
        trace = json.loads(file.read_text(encoding="utf-8"))
        gap = trace["metadata"]["gap_seconds"]
        available = [v == 0 for v in trace["data"]]  # in these files 1 = spot unavailable
        zone_hours = sum(available) * gap / 3600
        preemptions += rate_from_trace(available, gap) * zone_hours
        hours += zone_hours
        runs += sum(1 for i, a in enumerate(available) if a and (i == 0 or not available[i - 1]))
    assert hours == pytest.approx(TRACE_AVAILABLE_HOURS)
    assert preemptions / hours == pytest.approx(OVER_20_RATE)
    assert hours / runs == pytest.approx(MEAN_AVAILABLE_RUN_HOURS)


def test_rate_from_trace_counts_preemptions_per_available_hour():
    assert rate_from_trace([True, True, False, True, False], gap_seconds=1800) == pytest.approx(2 / 1.5)
    assert rate_from_trace([True] * 10, gap_seconds=60) == 0.0
    assert rate_from_trace([False, True, True], gap_seconds=3600) == 0.0  # becoming available is not a preemption
    with pytest.raises(SpotDataError, match="never has spot available"):
        rate_from_trace([False, False], gap_seconds=60)
    with pytest.raises(SpotDataError, match="gap_seconds must be positive"):
        rate_from_trace([True], gap_seconds=0)


def test_interruption_rate_prefers_measured_then_trace_then_bucket_then_cloud_default():
    assert interruption_rate(dataclasses.replace(SPOT, interruption_rate=0.1, interruption_bucket=">20%")) == 0.1
    # p3.2xlarge in us-east-1 is covered by the Can't Be Late traces: their rate beats the bucket
    traced = TRACE_POOLS[("aws", "us-east-1", "p3.2xlarge")].rate
    assert interruption_rate(dataclasses.replace(SPOT, interruption_bucket="5-10%")) == traced
    untraced = dataclasses.replace(SPOT, region="eu-west-1", zone=None)
    assert interruption_rate(dataclasses.replace(untraced, interruption_bucket="5-10%")) == BUCKET_RATES["5-10%"]
    assert interruption_rate(untraced) == CLOUD_DEFAULT_RATES["aws"]
    assert interruption_rate(dataclasses.replace(SPOT, cloud="gcp")) == CLOUD_DEFAULT_RATES["gcp"]
    assert interruption_rate(dataclasses.replace(SPOT, cloud="lambda")) == UNKNOWN_CLOUD_RATE
    with pytest.raises(PricingError, match="unknown interruption bucket 'often'"):
        interruption_rate(dataclasses.replace(untraced, interruption_bucket="often"))


@pytest.mark.shared
def test_reads_the_spot_advisor_snapshot():
    buckets = read_spot_advisor(shared_path("traces", "aws-spot-advisor", "spot-advisor-data.json"))
    assert buckets[("us-east-1", "p3.2xlarge")] == ">20%"
    assert buckets[("us-east-1", "p4d.24xlarge")] == "10-15%"
    assert buckets[("us-east-2", "p5.48xlarge")] == "5-10%"
    assert set(buckets.values()) <= set(BUCKET_LABELS)
    assert len(buckets) == 14_962


RANGES = [{"index": i, "label": label} for i, label in enumerate(BUCKET_LABELS)]


def test_parse_spot_advisor_resolves_indexes_through_the_files_ranges():
    reordered = [{"index": 0, "label": ">20%"}, {"index": 4, "label": "<5%"}]
    data = {"ranges": reordered, "spot_advisor": {"eu-west-1": {"Linux": {"g5.xlarge": {"s": 60, "r": 4}},
                                                                 "Windows": {"g5.xlarge": {"s": 50, "r": 0}}}}}
    assert parse_spot_advisor(data) == {("eu-west-1", "g5.xlarge"): "<5%"}
    assert parse_spot_advisor(data, os_name="Windows") == {("eu-west-1", "g5.xlarge"): ">20%"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"ranges": RANGES}, "key 'spot_advisor' is missing"),
        ({"spot_advisor": {}}, "key 'ranges' must be"),
        ({"ranges": [{"index": 0, "label": "rare"}], "spot_advisor": {}}, "has no known label"),
        ({"ranges": RANGES, "spot_advisor": {"us-east-1": {"Linux": {"p3.2xlarge": {"r": 9}}}}},
         r"spot_advisor\.us-east-1\.Linux\.p3\.2xlarge\.r = 9 is not a range index"),
    ],
)
def test_parse_spot_advisor_rejects_malformed_data(data, message):
    with pytest.raises(SpotDataError, match=message):
        parse_spot_advisor(data, origin="feed.json")


def test_read_spot_advisor_names_an_unreadable_file(tmp_path):
    bad = tmp_path / "advisor.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(SpotDataError, match=r"advisor\.json: cannot read the AWS Spot Advisor JSON"):
        read_spot_advisor(bad)
