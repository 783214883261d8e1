"""Spot capacity waits: how long a spot pool keeps a job waiting for capacity.

Spot is not always there.  Two waits matter to a plan (both unbilled: no node runs meanwhile):

* **at launch**, a request at an arbitrary moment finds the pool without capacity with the
  trace's unavailable share, and then waits for the rest of that outage;
* **after each loss**, the pool has just run out of capacity (that is what a preemption is), so
  the job waits for the outage the loss starts.

Each wait is given up after a *patience* (``[overheads] capacity_wait_minutes``; by default one
restart, ``restart_minutes``: the runtime re-plans elsewhere as soon as a launch finds no
capacity, so a failed attempt costs about one provisioning): a wait is ``min(W, patience)``
with ``W`` exponential with the trace's mean (a residual outage at launch, a whole outage after
a loss).  A sum of waits is quoted by its mean and a P90 from the normal approximation of a
compound Poisson sum (``mean + 1.2816 sd``; the number of losses is Poisson); the quote adds
the expected waits to the expected time and the P90 waits to the P90.

The outage figures come from the "Can't Be Late" availability traces where they cover a pool
(:data:`TRACE_WAITS`, per region, zones pooled, like :data:`pricing.risk.TRACE_POOLS`; in those
files ``1`` = unavailable), else from the pooled traces with the unavailable share scaled by
the pool's AWS Spot Advisor bucket (as :data:`pricing.risk.BUCKET_RATES` scale the rates; an
outage lasts as long as anywhere), else from the pooled traces unscaled, marked as a default.
``planner simulate`` reports :func:`waits_from_trace` for the traces it replays, so a pool's
model is one function of one trace file in both.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from pricing.catalog import Offering
from pricing.risk import BUCKET_MIDPOINTS

Z90 = 1.2815515655446004


@dataclass(frozen=True, slots=True)
class CapacityWait:
    """What a trace says about a pool's outages: the share of time it has no capacity, the mean
    length of an outage a preemption starts, and the mean wait from an unavailable moment to the
    next available one (hours)."""

    unavailable_share: float
    outage_mean: float
    residual_mean: float
    source: str
    default: bool = False

    def launch(self, patience: float) -> tuple[float, float]:
        """(expected, P90) hours a launch waits, giving up after ``patience`` hours: no wait with
        the pool's available share, else an exponential residual outage, truncated."""
        m1, m2 = _truncated_exponential(self.residual_mean, patience)
        mean, second = self.unavailable_share * m1, self.unavailable_share * m2
        return mean, min(patience, _p90(mean, second - mean**2))

    def after_losses(self, expected_losses: float, patience: float) -> tuple[float, float]:
        """(expected, P90) hours waited in total after a Poisson number of losses with that mean,
        each waiting for the outage it starts (exponential, truncated at ``patience``)."""
        m1, m2 = _truncated_exponential(self.outage_mean, patience)
        mean = expected_losses * m1
        return mean, _p90(mean, expected_losses * m2)  # compound Poisson: Var = mu E[Z^2]

    def scaled(self, share: float, source: str, *, default: bool = False) -> CapacityWait:
        """The same pool, found without capacity ``share`` times as often."""
        return CapacityWait(min(1.0, self.unavailable_share * share), self.outage_mean, self.residual_mean,
                            source, default)

    def to_dict(self) -> dict:
        return asdict(self)


def _truncated_exponential(mean: float, cap: float) -> tuple[float, float]:
    """E[min(X, cap)] and E[min(X, cap)^2] for X exponential with ``mean``."""
    if mean <= 0 or cap <= 0:
        return 0.0, 0.0
    if math.isinf(cap):
        return mean, 2 * mean * mean
    tail = math.exp(-cap / mean)
    return mean * (1 - tail), 2 * mean * mean * (1 - tail * (1 + cap / mean))


def _p90(mean: float, variance: float) -> float:
    return mean + Z90 * math.sqrt(max(variance, 0.0)) if mean > 0 else 0.0


def waits_from_trace(available: Iterable[Sequence[bool] | np.ndarray], gap_seconds: float,
                     source: str = "availability trace") -> CapacityWait:
    """The outages of one or more zones' availability (``True`` = spot usable in that tick), pooled.

    An outage is a run of unavailable ticks after an available one (a preemption); the residual
    wait of an unavailable tick is the time from its start to the next available tick (to the
    trace's end when none follows)."""
    g = gap_seconds / 3600.0
    residual: list[np.ndarray] = []
    outages: list[np.ndarray] = []
    ticks = down_ticks = 0
    for zone in available:
        up = np.asarray(zone, dtype=bool)
        n = len(up)
        if n == 0:
            continue
        ticks += n
        down_ticks += int((~up).sum())
        idx = np.where(up, np.arange(n), n)
        nxt = np.minimum.accumulate(idx[::-1])[::-1]  # the next available tick at or after each tick
        residual.append(((nxt - np.arange(n)) * g)[~up])
        edges = np.flatnonzero(np.diff(np.concatenate([[0], (~up).astype(np.int8), [0]])))
        starts, ends = edges[::2], edges[1::2]
        after_up = starts > 0  # an outage at the very start followed no preemption
        outages.append((ends[after_up] - starts[after_up]) * g)
    lost = np.concatenate(outages) if outages else np.zeros(0)
    waits = np.concatenate(residual) if residual else np.zeros(0)
    return CapacityWait(down_ticks / ticks if ticks else 0.0, float(lost.mean()) if lost.size else 0.0,
                        float(waits.mean()) if waits.size else 0.0, source)


TRACE_WAITS: dict[tuple[str, str, str], CapacityWait] = {
    ("aws", "us-east-1", "p3.2xlarge"): CapacityWait(0.4179, 1.5508, 4.5558,
                                                     "availability trace (4 zones, Can't Be Late 2023)"),
    ("aws", "us-east-2", "p3.2xlarge"): CapacityWait(0.7208, 4.9033, 14.3210,
                                                     "availability trace (2 zones, Can't Be Late 2023)"),
    ("aws", "us-west-2", "p3.2xlarge"): CapacityWait(0.8931, 7.4012, 29.0865,
                                                     "availability trace (3 zones, Can't Be Late 2023)"),
}
""":func:`waits_from_trace` of ``traces/skypilot-spot-traces/availability/1-node/aws-02-15-2023``,
the zones of each region pooled (``tests/planner/test_capacity_wait.py`` recomputes them from the
files).  us-west-2, the paper's low-availability pool, has no capacity 89% of the time and an
outage a preemption starts lasts 7.4 h on average, against 42% and 1.6 h in us-east-1."""

POOLED_WAIT = CapacityWait(0.6436, 3.3379, 18.3327,
                           "Can't Be Late traces, 9 zones pooled (AWS p3.2xlarge, Advisor bucket >20%)")
"""All nine zones of the same traces together: the ">20%" bucket's outages."""


def capacity_wait(offering: Offering) -> CapacityWait:
    """The best-informed waits for ``offering``'s spot pool (see the module docstring)."""
    key = (offering.cloud, offering.region, offering.instance_type)
    if key in TRACE_WAITS:
        return TRACE_WAITS[key]
    bucket = offering.interruption_bucket
    if bucket in BUCKET_MIDPOINTS:
        share = BUCKET_MIDPOINTS[bucket] / BUCKET_MIDPOINTS[">20%"]
        return POOLED_WAIT.scaled(share, f"AWS Spot Advisor bucket {bucket}, scaled from the pooled traces")
    return POOLED_WAIT.scaled(1.0, f"default for {offering.cloud}: the pooled traces (no availability data "
                                   "for this pool)", default=True)
