"""Checkpoint and preemption overhead of running on spot capacity.

Young (1974) and Daly (2006, FGCS 22(3)) give the checkpoint interval; Daly's exact
expected wall time under Poisson interruptions,
``T_w = M e^{R/M} (e^{(tau+C)/M} - 1) T_s / tau``, gives the overhead.  When the cloud's
interruption notice is long enough to write a checkpoint (C well under the notice),
the runtime checkpoints on notice, so a loss costs only the restart R plus that one
checkpoint and no rework.  All times are in hours.  Pure functions: the runtime uses
the same formulas for its interval, so a quote and a run agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def young_interval(checkpoint_hours: float, mtbf_hours: float) -> float:
    """Young's first-order optimum compute time between checkpoints, sqrt(2 C M)."""
    return math.sqrt(2.0 * checkpoint_hours * mtbf_hours)


def daly_interval(checkpoint_hours: float, mtbf_hours: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints (M when C >= 2M)."""
    c, m = checkpoint_hours, mtbf_hours
    if c <= 0:
        return math.inf
    if c >= 2 * m:
        return m
    x = c / (2 * m)
    return math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c


def expected_wall_factor(interval: float, checkpoint_hours: float, mtbf_hours: float, restart_hours: float) -> float:
    """Daly's exact expected wall time per unit of failure-free work, ``T_w / T_s``."""
    m = mtbf_hours
    if math.isinf(m):
        return 1.0 + (checkpoint_hours / interval if math.isfinite(interval) else 0.0)
    return m * math.exp(restart_hours / m) * math.expm1((interval + checkpoint_hours) / m) / interval


@dataclass(frozen=True, slots=True)
class SpotOverhead:
    """Expected cost of interruptions for one spot configuration, per hour of useful work.

    ``wall_factor`` is expected wall hours per failure-free hour; it splits into
    ``checkpoint_share`` (periodic writes) and ``recovery_share`` (restarts and rework).
    ``p90_factor`` is the 90th-percentile wall hours per failure-free hour for a job of
    ``nominal_hours``; ``mode`` says whether the runtime checkpoints on notice.
    """

    mtbf_hours: float
    checkpoint_hours: float
    restart_hours: float
    interval_hours: float
    wall_factor: float
    checkpoint_share: float
    recovery_share: float
    p90_factor: float
    mode: str


def spot_overhead(
    *,
    interruption_rate: float,
    nodes: int,
    checkpoint_hours: float,
    restart_hours: float,
    notice_hours: float,
    nominal_hours: float,
) -> SpotOverhead | None:
    """Overhead of a spot configuration, or ``None`` when it would never finish
    (interruptions arrive faster than a restart completes)."""
    rate = interruption_rate * nodes
    mtbf = math.inf if rate <= 0 else 1.0 / rate
    if checkpoint_hours <= notice_hours / 2:
        # Checkpoint on notice: each loss costs the notice checkpoint plus the restart.
        per_loss = checkpoint_hours + restart_hours
        lost_fraction = rate * per_loss
        if lost_fraction >= 0.95:
            return None
        wall = 1.0 / (1.0 - lost_fraction)
        interval, ckpt_share, mode = math.inf, 0.0, "checkpoint on notice"
    else:
        interval = daly_interval(checkpoint_hours, mtbf)
        wall = expected_wall_factor(interval, checkpoint_hours, mtbf, restart_hours)
        if not math.isfinite(wall) or wall > 20:
            return None
        ckpt_share = checkpoint_hours / interval
        per_loss = restart_hours + (interval + checkpoint_hours) / 2
        mode = "periodic (Young/Daly)"
    expected_losses = rate * nominal_hours * wall
    p90_losses = poisson_quantile(expected_losses, 0.9)
    extra = max(0.0, p90_losses - expected_losses) * per_loss / max(nominal_hours, 1e-12)
    return SpotOverhead(
        mtbf_hours=mtbf,
        checkpoint_hours=checkpoint_hours,
        restart_hours=restart_hours,
        interval_hours=interval,
        wall_factor=wall,
        checkpoint_share=ckpt_share,
        recovery_share=wall - 1.0 - ckpt_share,
        p90_factor=wall + extra,
        mode=mode,
    )


def poisson_quantile(mean: float, q: float) -> float:
    """Smallest k with P(N <= k) >= q for N ~ Poisson(mean) (normal approximation above 50)."""
    if mean <= 0:
        return 0.0
    if mean > 50:
        return mean + 1.2815515655446004 * math.sqrt(mean)
    term = math.exp(-mean)
    total, k = term, 0
    while total < q:
        k += 1
        term *= mean / k
        total += term
    return float(k)
