"""Checkpoint-interval theory: Young (1974) and Daly (2006), as plain functions.

Pure-Python math with no torch import, so that ``planner`` can use the same formulas for its
spot-overhead model. Notation (all in seconds):

* ``C`` -- cost of one checkpoint (the time training does not advance while saving),
* ``M`` -- mean time between interruptions (MTBF; interruptions assumed Poisson),
* ``R`` -- restart time (provision + load the checkpoint + warm up),
* ``tau`` -- compute time between two checkpoints.

Daly's higher-order optimum reproduces the worked examples of his paper: for M = 24 h,
C = 5 min it gives 116.7 min (paper: 117 min), for M = 6 h 56.7 min (57), for M = 15 min
9.1 min (9.1).
"""

from __future__ import annotations

import math

# The formulas live in the planner, so a quote and a run use the very same arithmetic.
from planner import overhead


def young_interval(C: float, M: float) -> float:
    """Young's first-order optimum ``sqrt(2 C M)``."""
    _check(C=C, M=M)
    return overhead.young_interval(C, M)


def daly_interval(C: float, M: float) -> float:
    """Daly's higher-order optimum.

    ``sqrt(2CM) * (1 + sqrt(C/2M)/3 + (C/2M)/9) - C`` for ``C < 2M``, else ``M``; zero
    when a checkpoint costs nothing.
    """
    _check(C=C, M=M)
    return overhead.daly_interval(C, M) if C > 0 else 0.0


def expected_wall_time(T_s: float, tau: float, C: float, M: float, R: float) -> float:
    """Daly's expected wall-clock time to finish ``T_s`` of failure-free work.

    ``T_w = M e^{R/M} (e^{(tau+C)/M} - 1) T_s / tau``.
    """
    _check(C=C, M=M, R=R, T_s=T_s)
    if tau <= 0:
        raise ValueError(f"tau must be > 0 seconds, got {tau}")
    return overhead.expected_wall_factor(tau, C, M, R) * T_s


def expected_overhead_fraction(tau: float, C: float, M: float, R: float) -> float:
    """``T_w / T_s - 1`` under Daly's model: checkpoints, rework and restarts together."""
    return expected_wall_time(1.0, tau, C, M, R) - 1.0


def first_order_overhead(C: float, M: float, R: float) -> float:
    """``sqrt(2C/M) + R/M``: the overhead at Young's interval, valid while ``C + R << M``."""
    _check(C=C, M=M, R=R)
    return math.sqrt(2.0 * C / M) + R / M


def _check(**values: float) -> None:
    for name, value in values.items():
        if name == "M" and not value > 0:
            raise ValueError(f"M (mean time between interruptions) must be > 0 seconds, got {value}")
        if not value >= 0:
            raise ValueError(f"{name} must be >= 0 seconds, got {value}")


class IntervalEstimator:
    """The checkpoint interval for a running job, re-estimated as costs are measured.

    Costs are smoothed with an exponential moving average, so that one slow write (a cold
    object-store connection) does not swing the interval. With an asynchronous writer the
    interval is never shorter than the time a write takes to become durable, because the
    next save has to wait for the previous one.

    >>> est = IntervalEstimator(mtbf_s=7200.0)
    >>> est.interval_s is None          # nothing measured yet: checkpoint early to learn C
    True
    >>> est.observe(stall_s=2.0, write_s=5.0)
    >>> round(est.interval_s, 1)
    168.4
    """

    def __init__(self, mtbf_s: float, *, initial_cost_s: float | None = None, smoothing: float = 0.3):
        _check(M=mtbf_s)
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.mtbf_s = mtbf_s
        self._smoothing = smoothing
        self._cost_s = initial_cost_s
        self._write_s = 0.0

    @property
    def cost_s(self) -> float | None:
        """The smoothed checkpoint cost C, or None before the first measurement."""
        return self._cost_s

    @property
    def interval_s(self) -> float | None:
        """Seconds of training between checkpoints, or None while C is unknown."""
        if self._cost_s is None:
            return None
        return max(daly_interval(self._cost_s, self.mtbf_s), self._write_s)

    def observe(self, *, stall_s: float, write_s: float = 0.0) -> None:
        """Record one measured save: ``stall_s`` blocked training, ``write_s`` until durable."""
        _check(stall_s=stall_s, write_s=write_s)
        a = self._smoothing
        self._cost_s = stall_s if self._cost_s is None else (1 - a) * self._cost_s + a * stall_s
        self._write_s = write_s if self._write_s == 0.0 else (1 - a) * self._write_s + a * write_s
