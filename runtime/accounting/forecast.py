"""Spend forecasts and the hard budget cap, from plain numbers.

:func:`forecast` answers "what will this run cost in total?": spend to date plus the
expected cost of the remaining work under the current plan.  The controller calls it at
every re-plan and periodically as work gets done; it knows nothing of the planner's
types, only hours and dollars.

:func:`cap_decision` answers "must the run checkpoint and stop *now* to stay under
``budget_usd``?".  It keeps back enough money, at the current burn rate, for what a stop
takes as *measured* in this run -- the longest gap between heartbeats, the longest a stop
request took to reach a committed checkpoint, the longest a release took -- and, for what
has not been measured yet, the shutdown timeout (a stop: at least two of the checkpoint
writes the workers report)::

    spent $4,900, burning $60/h, heartbeats 1 min apart, stop 15 min, release 5 min (measured)
    reserve = 60 * (1/60 + 15/60 + 5/60) = $21.00
    stop now?  4,900 + 21 >= 5,000  ->  no; must stop within (5,000 - 4,921) / 60 = 1.3 h
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

__all__ = ["CapDecision", "Forecast", "StopTimings", "cap_decision", "forecast"]


@dataclass(frozen=True, slots=True)
class Forecast:
    """Expected total spend of a run, as of ``at`` (POSIX seconds).

    ``remaining_usd`` is what the remaining ``remaining_hours`` of work cost under the
    current plan (``plan_hourly_usd`` for all its nodes, plus any one-off overhead);
    ``reserve_usd`` is what the hard budget cap keeps back at that burn for a stop, which a
    budget that is to see the work done must hold on top of the total.
    """

    at: float
    spent_usd: float
    remaining_hours: float
    plan_hourly_usd: float
    remaining_usd: float
    budget_usd: float | None = None
    deadline_at: float | None = None
    reserve_usd: float = 0.0

    @property
    def total_usd(self) -> float:
        return self.spent_usd + self.remaining_usd

    @property
    def expected_end(self) -> float:
        """When the work is expected to finish (POSIX seconds)."""
        return self.at + self.remaining_hours * 3600.0

    @property
    def budget_fraction(self) -> float | None:
        """Forecast total as a fraction of the budget (1.0 = exactly on budget)."""
        return None if not self.budget_usd else self.total_usd / self.budget_usd

    @property
    def over_budget_usd(self) -> float:
        """How far the forecast total exceeds the budget (0 when it does not)."""
        return 0.0 if self.budget_usd is None else max(0.0, self.total_usd - self.budget_usd)

    @property
    def deadline_at_risk(self) -> bool:
        """The work is expected to finish after the deadline."""
        return self.deadline_at is not None and self.expected_end > self.deadline_at

    @property
    def slack_hours(self) -> float | None:
        """Hours between the expected end and the deadline (negative when late)."""
        return None if self.deadline_at is None else (self.deadline_at - self.expected_end) / 3600.0


def forecast(
    spent_usd: float,
    remaining_work_hours: float,
    plan_hourly_usd: float,
    *,
    at: float | None = None,
    overhead_usd: float = 0.0,
    budget_usd: float | None = None,
    deadline_at: float | None = None,
    reserve_usd: float = 0.0,
) -> Forecast:
    """Spend to date plus the expected cost of the remaining work under the current plan.

    Args:
        spent_usd: what the ledger says the run has cost so far.
        remaining_work_hours: wall-clock hours the current plan needs to finish the work.
        plan_hourly_usd: what the plan costs per hour, all nodes together.  For a plan of
            several phases pass its expected remaining cost divided by its hours.
        at: when the forecast is made (default: now).
        overhead_usd: one-off costs the plan adds (provisioning, checkpoint restores).
        budget_usd: the run's budget, for :attr:`Forecast.budget_fraction`.
        deadline_at: the deadline (POSIX seconds), for :attr:`Forecast.deadline_at_risk`.
        reserve_usd: what the budget cap keeps back at the plan's burn (:meth:`StopTimings.reserve_hours`).

    Raises:
        ValueError: a figure is negative or not finite.
    """
    _require_non_negative(spent_usd=spent_usd, remaining_work_hours=remaining_work_hours,
                          plan_hourly_usd=plan_hourly_usd, overhead_usd=overhead_usd, reserve_usd=reserve_usd)
    if budget_usd is not None:
        _require_non_negative(budget_usd=budget_usd)
    return Forecast(
        at=time.time() if at is None else at,
        spent_usd=float(spent_usd),
        remaining_hours=float(remaining_work_hours),
        plan_hourly_usd=float(plan_hourly_usd),
        remaining_usd=remaining_work_hours * plan_hourly_usd + overhead_usd,
        budget_usd=budget_usd,
        deadline_at=deadline_at,
        reserve_usd=float(reserve_usd),
    )


@dataclass(frozen=True, slots=True)
class CapDecision:
    """Whether the run must checkpoint and stop now -- or, with a stop under way, release
    now -- and the figures behind the answer.

    ``reserve_usd`` is kept back for the next heartbeat gap, the stop (request to
    committed checkpoint) and the release; ``headroom_usd`` is what is left of the budget
    after spend and reserve (negative once the run must stop); ``hours_until_stop`` is how
    long the current burn rate can go on before that point (``None`` when nothing is
    burning).  ``release_now``: even without waiting for a checkpoint, one more heartbeat
    gap and the release would take the spend past the budget, so a stop that has not
    committed its checkpoint yet must give up on it and release the nodes.
    ``stop_hours``/``release_hours`` are the durations the reserve was sized with, and
    ``measured`` says whether they came from measurements or were assumed (see :func:`cap_decision`).
    """

    stop_now: bool
    release_now: bool
    spent_usd: float
    budget_usd: float
    burn_usd_per_hour: float
    reserve_usd: float
    headroom_usd: float
    hours_until_stop: float | None
    gap_hours: float
    stop_hours: float
    release_hours: float
    measured: bool
    reason: str


@dataclass(slots=True)
class StopTimings:
    """The longest durations seen so far in a run (simulated hours), for :func:`cap_decision`.

    ``None`` until first measured: the cap then assumes ``bound_hours`` (the controller's
    shutdown timeout); a heartbeat gap counts at least ``min_gap_hours`` (the heartbeat's period).
    """

    heartbeat_gap_hours: float = 0.0
    stop_hours: float | None = None
    release_hours: float | None = None
    save_write_hours: float = 0.0  # of any launch: a new launch reports none until its first save
    bound_hours: float = 0.0
    min_gap_hours: float = 0.0

    def saw_save_write(self, hours: float) -> None:
        self.save_write_hours = max(self.save_write_hours, hours)

    def saw_gap(self, hours: float) -> None:
        self.heartbeat_gap_hours = max(self.heartbeat_gap_hours, hours)

    def saw_stop(self, hours: float) -> None:
        self.stop_hours = hours if self.stop_hours is None else max(self.stop_hours, hours)

    def saw_release(self, hours: float) -> None:
        self.release_hours = hours if self.release_hours is None else max(self.release_hours, hours)

    def seen(self) -> dict[str, float | None]:
        """What was measured (to keep in the run's state; the constructor takes it back)."""
        return {"heartbeat_gap_hours": self.heartbeat_gap_hours, "stop_hours": self.stop_hours,
                "release_hours": self.release_hours, "save_write_hours": self.save_write_hours}

    def _figures(self) -> dict[str, float | None]:
        return {"bound_hours": self.bound_hours,
                "heartbeat_gap_hours": max(self.heartbeat_gap_hours, self.min_gap_hours),
                "stop_hours": self.stop_hours, "release_hours": self.release_hours,
                "save_write_hours": self.save_write_hours}

    def reserve_hours(self) -> float:
        """Hours of a launch's burn the cap keeps back now: a plan that is to finish under the cap
        must leave that much of its budget unspent on every launch (:mod:`runtime.control.replan`)."""
        return sum(_reserve_hours(**self._figures()))

    def cap(self, *, spent_usd: float, burn_usd_per_hour: float, budget_usd: float) -> CapDecision:
        """:func:`cap_decision` with the durations seen so far."""
        return cap_decision(spent_usd=spent_usd, burn_usd_per_hour=burn_usd_per_hour, budget_usd=budget_usd,
                            **self._figures())


def cap_decision(
    *,
    spent_usd: float,
    burn_usd_per_hour: float,
    budget_usd: float,
    bound_hours: float,
    heartbeat_gap_hours: float,
    stop_hours: float | None = None,
    release_hours: float | None = None,
    save_write_hours: float = 0.0,
) -> CapDecision:
    """Say whether the run must checkpoint and stop now to stay under ``budget_usd``.

    A stop costs, at the current burn rate, the time until the next heartbeat sees the
    spend (``heartbeat_gap_hours``, the longest gap measured between heartbeats), the time
    from the stop request to a committed checkpoint (``stop_hours``) and the time the
    release takes (``release_hours``).  Pass the longest of each measured so far in this
    run; one not yet measured (``None``) costs ``bound_hours``, the shutdown timeout.  A stop
    asked while a checkpoint is being written waits for that write before its own save, so a
    measured stop is taken to last ``save_write_hours`` (the longest write the workers
    reported) longer, and a stop not yet measured at least two such writes: the controller
    waits for a stop's checkpoint as long as the budget allows, so a reserve shorter than the
    write would give up a checkpoint that only needed the time.  The run must stop when
    waiting longer would leave too little budget for all three, so the stop happens *before*
    the budget is reached.

    Raises:
        ValueError: a figure is negative or not finite, or ``budget_usd`` is not positive.
    """
    _require_non_negative(spent_usd=spent_usd, burn_usd_per_hour=burn_usd_per_hour, bound_hours=bound_hours,
                          heartbeat_gap_hours=heartbeat_gap_hours, budget_usd=budget_usd,
                          save_write_hours=save_write_hours)
    _require_non_negative(**{name: value for name, value in (("stop_hours", stop_hours),
                                                              ("release_hours", release_hours)) if value is not None})
    if budget_usd <= 0:
        raise ValueError(f"budget_usd={budget_usd!r} must be positive for a hard cap")
    measured = stop_hours is not None and release_hours is not None
    _, stop, release = _reserve_hours(bound_hours, heartbeat_gap_hours, stop_hours, release_hours, save_write_hours)
    reserve = burn_usd_per_hour * (heartbeat_gap_hours + stop + release)
    headroom = budget_usd - spent_usd - reserve
    stop_now = headroom <= 0
    release_now = spent_usd + burn_usd_per_hour * (heartbeat_gap_hours + release) >= budget_usd
    until = None if burn_usd_per_hour == 0 else max(0.0, headroom / burn_usd_per_hour)
    if measured:
        basis = "measured"
    elif stop_hours is None and stop > bound_hours:
        basis = f"the stop as two {save_write_hours * 60:.1f} min checkpoint writes where not yet measured"
    else:
        basis = f"the {bound_hours * 60:.1f} min bound where not yet measured"
    if spent_usd >= budget_usd:
        reason = f"spent ${spent_usd:,.2f} has reached the budget ${budget_usd:,.2f}"
    elif stop_now:
        stop_words = "the stop (after a save in flight)" if measured and save_write_hours > 0 else "the stop"
        reason = (f"spent ${spent_usd:,.2f} + ${reserve:,.2f} for the next heartbeat, {stop_words} and the release "
                  f"({(heartbeat_gap_hours + stop + release) * 60:.1f} min at ${burn_usd_per_hour:,.2f}/h, "
                  f"{basis}) would exceed the budget ${budget_usd:,.2f}")
    elif until is None:
        reason = "nothing is being billed"
    else:
        reason = f"${headroom:,.2f} of headroom: {until:.2f} h at ${burn_usd_per_hour:,.2f}/h before a stop"
    return CapDecision(stop_now=stop_now, release_now=release_now, spent_usd=float(spent_usd),
                       budget_usd=float(budget_usd), burn_usd_per_hour=float(burn_usd_per_hour), reserve_usd=reserve,
                       headroom_usd=headroom, hours_until_stop=until, gap_hours=float(heartbeat_gap_hours),
                       stop_hours=float(stop), release_hours=float(release), measured=measured, reason=reason)


def _reserve_hours(bound_hours: float, heartbeat_gap_hours: float, stop_hours: float | None,
                   release_hours: float | None, save_write_hours: float) -> tuple[float, float, float]:
    """(heartbeat gap, stop, release) hours the cap keeps back (see :func:`cap_decision`)."""
    stop = max(bound_hours, 2 * save_write_hours) if stop_hours is None else stop_hours + save_write_hours
    release = bound_hours if release_hours is None else release_hours
    return heartbeat_gap_hours, stop, release


def _require_non_negative(**figures: float) -> None:
    for name, value in figures.items():
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name}={value!r} must be a finite number >= 0")
