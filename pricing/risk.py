"""Spot interruption rates: how often a running spot node is taken away, per node-hour.

The optimizer charges spot capacity for expected preemptions (restart time plus the work
since the last checkpoint), so it needs a rate per pool.  Rates come, in order of
preference, from the offering itself (a live fetcher or a trace set it), from the AWS
Spot Instance Advisor bucket of its (region, instance type), or from a per-cloud default.

**Calibration.**  The Advisor buckets ("<5%" ... ">20%") are the share of capacity AWS
reclaimed over a trailing month, not an hourly hazard, and read literally they suggest
spot GPUs survive for weeks.  Measured GPU spot lifetimes are far shorter, so the
">20%" bucket is calibrated to the "Can't Be Late" availability traces of p3.2xlarge
(:data:`OVER_20_RATE`), whose pools all sit in that bucket, and the lower buckets are
scaled by their midpoints (:data:`BUCKET_MIDPOINTS`).  The ranking between buckets is
AWS's; the absolute level is the traces'.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pricing.catalog import Offering
from pricing.errors import PricingError

BUCKET_LABELS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
"""The AWS Spot Advisor interruption-frequency buckets, index 0..4 as in its ``ranges``."""

TRACE_AVAILABLE_TICKS = 64_657
TRACE_GAP_SECONDS = 195
TRACE_PREEMPTIONS = 1_892
TRACE_AVAILABLE_RUNS = 1_893
TRACE_AVAILABLE_HOURS = TRACE_AVAILABLE_TICKS * TRACE_GAP_SECONDS / 3600  # 3502.25 h

MEAN_AVAILABLE_RUN_HOURS = TRACE_AVAILABLE_HOURS / TRACE_AVAILABLE_RUNS
"""1.850 h: mean length of a stretch in which p3.2xlarge spot was available.

Computed over the 9 zones of ``traces/skypilot-spot-traces/availability/1-node/
aws-02-15-2023`` (us-east-1a/c/d/f, us-east-2a/b, us-west-2a/b/c; 20,158 ticks of 195 s
each, about 45 days; in those files ``1`` = spot unavailable, ``0`` = available), pooled:
64,657 available ticks = 3,502.25 available hours in 1,893 available runs.  Per zone the
mean ranges from 0.81 h (us-west-2a) to 3.58 h (us-east-1a); the unweighted mean of the
nine zone means is 1.71 h.  Every one of these pools is in the Advisor's ">20%" bucket."""

OVER_20_RATE = TRACE_PREEMPTIONS / TRACE_AVAILABLE_HOURS
"""0.5402 interruptions per node-hour for the ">20%" bucket: the 1,892 available-to-
unavailable transitions of the same 9 traces divided by their 3,502.25 available hours
(:func:`rate_from_trace` over the pooled traces; one run per trace ends at the trace's
end rather than in a preemption, hence 1,892 and not 1,893)."""

BUCKET_MIDPOINTS = {"<5%": 0.025, "5-10%": 0.075, "10-15%": 0.125, "15-20%": 0.175, ">20%": 0.25}
"""Representative monthly reclaim fraction per bucket: the midpoint of its range, and 25%
for the open-ended ">20%" (the same reading as traces/aws-spot-advisor/SOURCE.md)."""

BUCKET_RATES: dict[str, float] = {
    label: OVER_20_RATE * mid / BUCKET_MIDPOINTS[">20%"] for label, mid in BUCKET_MIDPOINTS.items()
}
"""Interruptions per node-hour per bucket: 0.054, 0.162, 0.270, 0.378, 0.540."""

CLOUD_DEFAULT_RATES: dict[str, float] = {"aws": OVER_20_RATE, "gcp": OVER_20_RATE, "azure": OVER_20_RATE}
"""Rate for a pool with no published signal.  GCP publishes no spot interruption data at
all and Azure's eviction buckets need an authenticated Resource Graph query, so their
GPU spot pools get the ">20%" rate, as do AWS types missing from the Advisor: most GPU
pools the Advisor does rate are in that bucket (262 of 654 GPU region-type entries, the
largest group), and a pessimistic rate only makes the planner favour on-demand a little
more, whereas an optimistic one plans work that preemptions then destroy."""

UNKNOWN_CLOUD_RATE = OVER_20_RATE
"""Rate for clouds not in :data:`CLOUD_DEFAULT_RATES`, by the same reasoning."""


@dataclass(frozen=True, slots=True)
class TracePool:
    """What an availability trace measured for one (cloud, region, instance type), zones pooled."""

    zones: int
    preemptions: int
    available_hours: float
    mean_outage_hours: float  # mean length of a stretch with no spot capacity
    p90_outage_hours: float
    unavailable_share: float  # share of the trace's ticks with no capacity

    @property
    def rate(self) -> float:
        return self.preemptions / self.available_hours


TRACE_POOLS: dict[tuple[str, str, str], TracePool] = {
    ("aws", "us-east-1", "p3.2xlarge"): TracePool(4, 1177, 2542.31, 1.551, 3.868, 0.418),
    ("aws", "us-east-2", "p3.2xlarge"): TracePool(2, 321, 609.81, 4.903, 14.679, 0.721),
    ("aws", "us-west-2", "p3.2xlarge"): TracePool(3, 394, 350.13, 7.369, 16.239, 0.893),
}
"""Per-region figures of the "Can't Be Late" p3.2xlarge availability traces
(``traces/skypilot-spot-traces/availability/1-node/aws-02-15-2023``, 195 s ticks, 45 days,
``1`` = unavailable), zones of a region pooled: preemptions are available-to-unavailable
transitions, outages the unavailable runs.  Derived numbers, not the files (which stay in
../shared); ``tests/planner/test_pool_risk.py`` recomputes them from the files.  Where a
trace covers a pool its rate replaces the Advisor bucket: us-west-2 is the pool the paper
calls low-availability, and its rate is twice the others'."""


@dataclass(frozen=True, slots=True)
class RiskEstimate:
    """A spot pool's interruptions per node-hour, where the figure comes from, and whether it is a
    default (no signal about this pool at all)."""

    rate: float
    source: str
    default: bool = False


def estimate(offering: Offering, *, learned: Mapping[tuple[str, str, str], tuple[int, float]] | None = None
             ) -> RiskEstimate:
    """The best-informed rate for ``offering``: the catalog's own rate, else the trace of its
    (region, type), else its Advisor bucket, else its cloud's default; then updated with what past
    runs saw on the same (cloud, region, type) (``learned``: preemptions, exposed node-hours)."""
    key = (offering.cloud, offering.region, offering.instance_type)
    trace = TRACE_POOLS.get(key)
    if offering.interruption_rate is not None:
        prior = RiskEstimate(offering.interruption_rate, "catalog rate (live fetch or trace import)")
    elif trace is not None:
        prior = RiskEstimate(trace.rate, f"availability trace ({trace.zones} zones, {trace.available_hours:,.0f} "
                                         "available h, Can't Be Late 2023)")
    elif offering.interruption_bucket:
        prior = RiskEstimate(bucket_rate(offering.interruption_bucket),
                             f"AWS Spot Advisor bucket {offering.interruption_bucket}")
    else:
        prior = RiskEstimate(CLOUD_DEFAULT_RATES.get(offering.cloud, UNKNOWN_CLOUD_RATE),
                             f"default for {offering.cloud} (no published interruption data for this pool)",
                             default=True)
    seen = (learned or {}).get(key)
    if not seen:
        return prior
    preemptions, hours = seen
    # Gamma(1, 1/prior) prior on a Poisson rate: past runs move it both ways, by their exposure.
    rate = (1 + preemptions) / (1 / max(prior.rate, 1e-6) + max(hours, 0.0))
    return RiskEstimate(rate, f"learned from past runs ({preemptions} preemptions in {hours:,.1f} node-h; "
                              f"prior: {prior.source})")


class SpotDataError(PricingError):
    """A spot advisor file or availability trace cannot be used."""


def bucket_rate(label: str) -> float:
    """Interruptions per node-hour for an AWS Spot Advisor bucket label such as ``">20%"``."""
    try:
        return BUCKET_RATES[label]
    except KeyError:
        raise SpotDataError(f"unknown interruption bucket {label!r}; expected one of {', '.join(BUCKET_LABELS)}") from None


def interruption_rate(offering: Offering) -> float:
    """Expected spot interruptions per node-hour for ``offering`` (:func:`estimate` without past runs).

    Uses ``offering.interruption_rate`` when set, else the trace of its pool (:data:`TRACE_POOLS`),
    else its ``interruption_bucket``, else the default of its cloud (:data:`CLOUD_DEFAULT_RATES`).
    """
    return estimate(offering).rate


def rate_from_trace(available: Sequence[bool], gap_seconds: float) -> float:
    """Preemptions per available hour in an availability trace.

    ``available[i]`` says whether spot was available during tick ``i`` (ticks are
    ``gap_seconds`` long); a preemption is a change from available to unavailable.  A
    trace without preemptions gives 0.0.  (The "Can't Be Late" 0/1 files store the
    opposite: convert with ``[v == 0 for v in data]``.)
    """
    if gap_seconds <= 0:
        raise SpotDataError(f"gap_seconds must be positive, got {gap_seconds}")
    available_ticks = sum(1 for a in available if a)
    if available_ticks == 0:
        raise SpotDataError("the trace never has spot available, so no interruption rate can be measured")
    preemptions = sum(1 for before, after in zip(available, available[1:]) if before and not after)
    return preemptions / (available_ticks * gap_seconds / 3600)


def read_spot_advisor(path: str | Path, os_name: str = "Linux") -> dict[tuple[str, str], str]:
    """Interruption bucket label per (region, instance type) from a ``spot-advisor-data.json`` file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpotDataError(f"{path}: cannot read the AWS Spot Advisor JSON ({exc}); download it again") from None
    return parse_spot_advisor(data, origin=str(path), os_name=os_name)


def parse_spot_advisor(data: Any, origin: str = "spot advisor data", os_name: str = "Linux") -> dict[tuple[str, str], str]:
    """Like :func:`read_spot_advisor`, for JSON already loaded (e.g. by a live fetcher).

    The bucket index ``r`` of each entry is resolved through the file's own ``ranges``
    table, so a reordering by AWS cannot silently shift the labels.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("spot_advisor"), Mapping):
        raise SpotDataError(f"{origin}: key 'spot_advisor' is missing; this is not AWS Spot Advisor data")
    labels = _range_labels(data.get("ranges"), origin)
    buckets: dict[tuple[str, str], str] = {}
    for region, by_os in data["spot_advisor"].items():
        types = by_os.get(os_name, {}) if isinstance(by_os, Mapping) else None
        if not isinstance(types, Mapping):
            raise SpotDataError(f"{origin}: spot_advisor.{region}.{os_name} must be an object of instance types")
        for instance_type, entry in types.items():
            index = entry.get("r") if isinstance(entry, Mapping) else None
            if index not in labels:
                raise SpotDataError(
                    f"{origin}: spot_advisor.{region}.{os_name}.{instance_type}.r = {index!r} is not a range index"
                )
            buckets[(region, instance_type)] = labels[index]
    return buckets


def _range_labels(ranges: Any, origin: str) -> dict[int, str]:
    if not isinstance(ranges, list) or not ranges:
        raise SpotDataError(f"{origin}: key 'ranges' must be the list of interruption buckets")
    labels: dict[int, str] = {}
    for item in ranges:
        if not isinstance(item, Mapping) or item.get("label") not in BUCKET_RATES:
            raise SpotDataError(
                f"{origin}: ranges entry {item!r} has no known label; expected one of {', '.join(BUCKET_LABELS)}"
            )
        labels[item.get("index")] = item["label"]
    return labels
