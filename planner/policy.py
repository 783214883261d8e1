"""Spot/on-demand switching rules, shared by ``planner run`` and ``planner simulate``.

A policy is a pure function of a :class:`PolicyState`: given where the job stands
(work done, time left, what it runs on now, which spot pools are available and at
what price) it returns a :class:`Decision` -- run on a spot pool, on on-demand, or
nothing -- with a one-line ``reason`` the controller logs.  Policies keep no hidden
state: whatever they must remember between decisions travels in
:class:`PolicyMemory`, which comes back in every :class:`Decision` and goes into the
next state, so a controller can persist it (``to_dict``/``from_dict``) across its
own restarts and resume with exactly the same behaviour.

The rules follow *Can't Be Late* (NSDI '24) as its authors' simulator implements them;
all quantities are hours.  ``tick_hours`` is how often the caller asks for a decision
(the trace's ``gap_seconds`` in a simulation); the deadline tests round time left
*down* and work left *up* to whole ticks, as the paper's simulator does:

* ``remaining_time = floor((D - t) / tick) * tick``
* the **safety net**: when ``ceil(work_left + 2d)`` exceeds the remaining time and the
  job is idle or on on-demand, run on-demand; when ``ceil(work_left + d)`` reaches it,
  run on-demand unless already on a spot instance past its launch overhead (losing it
  then still leaves time for one on-demand launch).

Policies (:data:`POLICY_NAMES`): ``on_demand``; ``greedy`` (spot whenever available,
else wait, on-demand only at the last safe moment); ``uniform_progress`` (the paper's
Uniform Progress); ``danlu`` (ours: :class:`planner.danlu_policy.DanluPolicy`, which learns the pools'
availability as the run goes and spends slack by it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from planner.policy_memory import PolicyMemory, PoolRecord

__all__ = [
    "ON_DEMAND", "POLICY_NAMES", "REPLAN_TARGET", "Decision", "Policy", "PolicyMemory", "PolicyState", "PoolRecord",
    "make_policy",
]

ON_DEMAND = "on_demand"
"""The ``target`` (and ``current``) value that means the on-demand instance."""

REPLAN_TARGET = "replan"
"""A run's decision to re-plan over everything the job allows (no purchase option narrowed): there is
nothing worth waiting for, or the launch was left for a better plan."""

POLICY_NAMES = ("on_demand", "greedy", "uniform_progress", "danlu")

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class PolicyState:
    """Everything a policy may look at when it decides (hours and USD per hour).

    ``current`` is the instance the job holds now: a spot pool id, :data:`ON_DEMAND`,
    or ``None`` (idle, or just preempted -- then ``preempted`` names the lost pool).
    ``overhead_left_hours`` > 0 means that instance is still inside its launch
    overhead (paid, not yet training).  ``spot_prices`` lists only the spot pools
    available now.  ``restart_hours`` is the overhead ``d`` of each new launch.
    ``interruption_rates`` (per running hour, per pool) are what the planner expects of
    the pools -- the catalog, the spot advisor, the rates learned from past runs
    (:mod:`pricing.learned`); ``danlu`` starts from them before it has seen a pool itself.
    """

    elapsed_hours: float
    work_done_hours: float
    job_hours: float
    deadline_hours: float
    restart_hours: float
    tick_hours: float
    current: str | None
    overhead_left_hours: float
    spot_prices: Mapping[str, float]
    on_demand_price: float
    preempted: str | None = None
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    interruption_rates: Mapping[str, float] = field(default_factory=dict)

    @property
    def work_left_hours(self) -> float:
        return max(self.job_hours - self.work_done_hours, 0.0)

    @property
    def remaining_time_hours(self) -> float:
        """Time left before the deadline, rounded down to whole ticks."""
        return math.floor((self.deadline_hours - self.elapsed_hours) / self.tick_hours + 1e-6) * self.tick_hours

    @property
    def on_spot(self) -> bool:
        return self.current is not None and self.current != ON_DEMAND

    def ticks_up(self, hours: float) -> float:
        """``hours`` rounded up to whole ticks."""
        return math.ceil(hours / self.tick_hours - 1e-6) * self.tick_hours


@dataclass(frozen=True, slots=True)
class Decision:
    """Where to run during the next tick: a spot pool id, :data:`ON_DEMAND`, or ``None`` (idle)."""

    target: str | None
    reason: str
    memory: PolicyMemory = field(default_factory=PolicyMemory)


class Policy(Protocol):
    name: str

    def decide(self, state: PolicyState) -> Decision: ...


def make_policy(name: str, *, home_pool: str | None = None) -> Policy:
    """The policy called ``name`` (one of :data:`POLICY_NAMES`).

    ``home_pool`` pins the single-pool policies (``greedy``, ``uniform_progress``) to
    one spot pool, as in the paper; without it they use whichever pool is available.
    ``danlu`` always considers every pool in the state.
    """
    if name == "on_demand":
        return OnDemandPolicy()
    if name == "greedy":
        return GreedyPolicy(home_pool)
    if name == "uniform_progress":
        return UniformProgressPolicy(home_pool)
    if name == "danlu":
        from planner.danlu_policy import (
            DanluPolicy,  # it builds on the rules of this module
        )

        return DanluPolicy()
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")


def cheapest_pool(prices: Mapping[str, float]) -> str | None:
    """The cheapest pool in ``prices`` (first listed on a tie), or ``None`` when empty."""
    return min(prices, key=prices.__getitem__) if prices else None


def last_safe_moment(state: PolicyState, spot: str | None) -> Decision | None:
    """The one-launch guard: on-demand once ``ceil(work_left + d)`` reaches the time left.

    A spot instance already past its launch overhead is kept: if it is preempted
    next tick there is still time for one on-demand launch.  ``spot`` is the pool the
    caller would use now (``None`` if none is available).
    """
    if state.ticks_up(state.work_left_hours + state.restart_hours) < state.remaining_time_hours - _EPS:
        return None
    if state.restart_hours <= _EPS and spot is not None:
        return Decision(spot, "deadline close and launches are free: spot", state.memory)
    if state.on_spot and state.overhead_left_hours <= _EPS:
        return Decision(state.current, "deadline close: keep the running spot instance until preempted", state.memory)
    return Decision(ON_DEMAND, "deadline close: on-demand to finish in time", state.memory)


def safety_net(state: PolicyState, spot: str | None) -> Decision | None:
    """The paper's deadline guard, or ``None`` when the deadline is not yet at risk.

    :func:`last_safe_moment`, plus: when idle or on on-demand and ``ceil(work_left +
    2d)`` exceeds the time left, on-demand (one failed spot attempt would be fatal).
    """
    guard = last_safe_moment(state, spot)
    if guard is not None:
        return guard
    two_launches = state.ticks_up(state.work_left_hours + 2 * state.restart_hours)
    if two_launches > state.remaining_time_hours + _EPS and not state.on_spot:
        return Decision(ON_DEMAND, "deadline within one failed spot attempt: on-demand", state.memory)
    return None


def _done(state: PolicyState) -> Decision | None:
    if state.work_left_hours <= _EPS:
        return Decision(None, "job complete", state.memory)
    return None


def _pinned_or_any(state: PolicyState, home_pool: str | None) -> str | None:
    if home_pool is not None:
        return home_pool if home_pool in state.spot_prices else None
    if state.on_spot:
        return state.current  # moving costs a launch; stay while it lasts
    return cheapest_pool(state.spot_prices)


@dataclass(frozen=True, slots=True)
class OnDemandPolicy:
    """Always on-demand: the cost every other policy is measured against."""

    name: str = "on_demand"

    def decide(self, state: PolicyState) -> Decision:
        return _done(state) or Decision(ON_DEMAND, "on-demand only", state.memory)


@dataclass(frozen=True, slots=True)
class GreedyPolicy:
    """Spot whenever available, otherwise wait; on-demand from the last safe moment to the end."""

    home_pool: str | None = None
    name: str = "greedy"

    def decide(self, state: PolicyState) -> Decision:
        done = _done(state)
        if done:
            return done
        if state.current == ON_DEMAND:
            return Decision(ON_DEMAND, "greedy stays on on-demand to the end", state.memory)
        spot = _pinned_or_any(state, self.home_pool)
        guard = last_safe_moment(state, spot)
        if guard is not None:
            return guard
        if spot is None:
            return Decision(None, "no spot: wait", state.memory)
        return Decision(spot, "spot available", state.memory)


def progress_gap(state: PolicyState, lead_hours: float = 0.0) -> float:
    """Work done minus the uniform-progress line ``C * (t + lead) / D`` (negative = behind)."""
    line = state.job_hours * (state.elapsed_hours + lead_hours) / state.deadline_hours
    return state.work_done_hours - line


@dataclass(frozen=True, slots=True)
class UniformProgressPolicy:
    """*Can't Be Late*'s Uniform Progress, as in the authors' simulator (``rc_cr_threshold``).

    Spot when available.  Without spot: wait while ahead of the line ``C*t/D``,
    on-demand once behind it.  On on-demand, go back to spot only once ahead of the
    line by ``2d`` (hysteresis).  The safety net has the last word.
    """

    home_pool: str | None = None
    name: str = "uniform_progress"

    def decide(self, state: PolicyState) -> Decision:
        done = _done(state)
        if done:
            return done
        spot = _pinned_or_any(state, self.home_pool)
        memory = state.memory
        if spot is not None:
            decision = Decision(spot, "spot available", memory)
        else:
            decision = Decision(None, "no spot, ahead of the progress line: wait", memory)
        if progress_gap(state) < 0 and spot is None:
            decision = Decision(ON_DEMAND, "behind the progress line and no spot: on-demand", memory)
        if state.current == ON_DEMAND and (spot is None or progress_gap(state, 2 * state.restart_hours) <= 0):
            decision = Decision(ON_DEMAND, "on on-demand until 2d ahead of the progress line", memory)
        return safety_net(state, spot) or decision
