"""Trace-driven simulation of spot/on-demand policies on the *Can't Be Late* job model.

A job needs ``C`` hours of compute and must finish within ``D`` hours of its start;
each launch of an instance costs a restart overhead ``d``.  Time advances in ticks of
the trace's ``gap_seconds`` (``g`` hours).  The engine asks the policy for a decision
at the start of every tick and applies these rules:

* **Availability.**  Tick ``i`` covers ``[i*g, (i+1)*g)``; a spot pool is usable in
  it when the trace says so.  Ticks past the end of a trace are unavailable.
* **Preemption** takes effect at the tick boundary: a spot instance whose pool is
  unavailable in tick ``i`` is gone at the start of tick ``i``, before the policy
  decides; the work it did up to the end of tick ``i-1`` is kept (the runtime
  checkpoints on the interruption notice).
* **Launches.**  Every change to a different instance -- the first start, a
  relaunch after a preemption, spot to on-demand, one pool to another -- starts a new
  launch.  Its overhead is ``d`` **rounded up to whole ticks** (``h = ceil(d/g)``
  ticks, billed, no progress), and a new launch replaces any overhead still pending.
  Policies are told this effective overhead ``h*g``, so their safety nets reason
  about the world they run in.  (The authors' simulator credits the part of a tick
  after ``d``; rounding keeps the hindsight optimum an exact dynamic programme.)
* **Billing.**  Every tick on an instance costs its price for the whole tick (the
  spot price of that tick when the trace has ``prices``), except the **last** tick,
  billed only up to the moment the work is done: the instance is released then.
* **Finish and deadline.**  ``finish_hours`` is that moment; the deadline counts as
  met when ``finish_hours <= D``.  A job still unfinished ``D + C + h*g`` hours (plus two
  ticks) in has ``finish_hours = None`` and missed its deadline.

With these rules a job on an always-available pool costs ``price * (C + h*g)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError
from planner.policy import ON_DEMAND, Policy, PolicyMemory, PolicyState, make_policy
from pricing.traces import MultiPoolTrace

DEFAULT_ON_DEMAND_PRICE = 3.06
"""p3.2xlarge on-demand USD/h, the price of the paper's evaluation."""
DEFAULT_SPOT_PRICE = 0.9701
"""p3.2xlarge spot USD/h used with the paper's traces (files without ``prices``)."""

_EPS = 1e-9


class SimulationError(PlannerError):
    """A simulation cannot run as asked (bad model parameters, a policy breaking the rules)."""


@dataclass(frozen=True, slots=True)
class JobModel:
    """The paper's job: ``job_hours`` of work, due ``deadline_hours`` after it starts."""

    job_hours: float
    deadline_hours: float
    restart_hours: float = 0.2
    on_demand_price: float = DEFAULT_ON_DEMAND_PRICE
    spot_price: float = DEFAULT_SPOT_PRICE

    def __post_init__(self) -> None:
        checks = {
            "job_hours": self.job_hours > 0,
            "deadline_hours": self.deadline_hours > 0,
            "restart_hours": self.restart_hours >= 0,
            "on_demand_price": self.on_demand_price > 0,
            "spot_price": self.spot_price > 0,
        }
        for key, ok in checks.items():
            value = getattr(self, key)
            if not ok or not math.isfinite(value):
                sign = ">= 0" if key == "restart_hours" else "> 0"
                raise SimulationError(f"{key} must be a finite number {sign}, got {value}")


@dataclass(frozen=True, slots=True)
class TickGrid:
    """The model on a trace's tick grid: the integers both the engine and the optimum use.

    ``work_ticks`` (K) productive ticks finish the job, the last one used for
    ``last_fraction`` of its length; ``last_tick`` is the latest tick index in which
    the job can finish and still meet the deadline; ``slack_ticks`` = ``last_tick + 1 -
    K`` ticks may go unproductive (idle or overhead) in a schedule that meets it.
    """

    tick_hours: float
    overhead_ticks: int
    work_ticks: int
    last_fraction: float
    last_tick: int

    @property
    def slack_ticks(self) -> int:
        return self.last_tick + 1 - self.work_ticks

    @property
    def overhead_hours(self) -> float:
        return self.overhead_ticks * self.tick_hours

    @property
    def feasible(self) -> bool:
        """Whether one on-demand launch at time 0 meets the deadline."""
        return self.slack_ticks >= self.overhead_ticks

    def horizon_ticks(self, model: JobModel) -> int:
        """Ticks the engine simulates at most (a late job is given up after these)."""
        return math.ceil((model.deadline_hours + model.job_hours) / self.tick_hours - 1e-6) + self.overhead_ticks + 2


def tick_grid(model: JobModel, tick_hours: float) -> TickGrid:
    """Put ``model`` on ticks of ``tick_hours`` (see the module docstring for the rules)."""
    if not tick_hours > 0:
        raise SimulationError(f"tick length must be > 0 hours, got {tick_hours}")
    overhead = math.ceil(model.restart_hours / tick_hours - 1e-6)
    work = max(math.ceil(model.job_hours / tick_hours - 1e-6), 1)
    fraction = (model.job_hours - (work - 1) * tick_hours) / tick_hours
    last = math.floor(model.deadline_hours / tick_hours - fraction + 1e-6)
    return TickGrid(tick_hours, overhead, work, fraction, last)


def require_feasible(model: JobModel, grid: TickGrid) -> None:
    """Raise :class:`SimulationError` when even on-demand from the start misses the deadline."""
    if not grid.feasible:
        need = model.job_hours + grid.overhead_hours
        raise SimulationError(
            f"deadline_hours {model.deadline_hours:g} cannot be met: job_hours {model.job_hours:g} plus one "
            f"launch overhead ({grid.overhead_hours:g} h, restart_hours rounded up to {grid.overhead_ticks} "
            f"tick(s) of {grid.tick_hours * 3600:g} s) is {need:g} h; give a deadline of at least {need:g} h"
        )


@dataclass(frozen=True, slots=True)
class SimResult:
    """One policy on one window.  ``targets[i]``/``progress[i]``: the instance used in tick
    ``i`` (pool id, ``"on_demand"`` or ``None``) and the work done at the end of it."""

    policy: str
    cost_usd: float
    finish_hours: float | None
    deadline_met: bool
    launches: int
    preemptions: int
    spot_hours: float
    on_demand_hours: float
    targets: tuple[str | None, ...]
    progress: tuple[float, ...]

    def summary(self) -> dict[str, object]:
        return {
            "cost_usd": round(self.cost_usd, 6),
            "finish_hours": None if self.finish_hours is None else round(self.finish_hours, 6),
            "deadline_met": self.deadline_met,
            "launches": self.launches,
            "preemptions": self.preemptions,
            "spot_hours": round(self.spot_hours, 6),
            "on_demand_hours": round(self.on_demand_hours, 6),
        }


def simulate(trace: MultiPoolTrace, model: JobModel, policy: Policy) -> SimResult:
    """Run ``policy`` on ``trace`` from its first tick (use :meth:`MultiPoolTrace.window`
    to start elsewhere) and account the cost as the module docstring describes."""
    grid = tick_grid(model, trace.tick_hours)
    require_feasible(model, grid)
    g = grid.tick_hours
    prices = np.where(np.isnan(trace.spot_prices), model.spot_price, trace.spot_prices)
    current: str | None = None
    overhead_left = 0
    done_ticks = 0
    memory = PolicyMemory()
    cost = spot_hours = od_hours = 0.0
    launches = preemptions = 0
    finish: float | None = None
    targets: list[str | None] = []
    progress: list[float] = []
    for tick in range(grid.horizon_ticks(model)):
        if tick < trace.ticks:
            up = np.flatnonzero(trace.available[:, tick])
            spot_now = {trace.pools[p]: float(prices[p, tick]) for p in up}
        else:
            spot_now = {}
        preempted = None
        if current is not None and current != ON_DEMAND and current not in spot_now:
            preempted, current, overhead_left = current, None, 0
            preemptions += 1
        state = PolicyState(
            elapsed_hours=tick * g,
            work_done_hours=min(done_ticks * g, model.job_hours),
            job_hours=model.job_hours,
            deadline_hours=model.deadline_hours,
            restart_hours=grid.overhead_hours,
            tick_hours=g,
            current=current,
            overhead_left_hours=overhead_left * g,
            spot_prices=spot_now,
            on_demand_price=model.on_demand_price,
            preempted=preempted,
            memory=memory,
        )
        decision = policy.decide(state)
        target, memory = decision.target, decision.memory
        if target is not None and target != ON_DEMAND and target not in spot_now:
            raise SimulationError(
                f"policy {policy.name} chose spot pool {target!r} at tick {tick}, but it is not available "
                f"(available: {', '.join(spot_now) or 'none'})"
            )
        if target is not None and target != current:
            launches += 1
            overhead_left = grid.overhead_ticks
        current = target
        targets.append(current)
        if current is None:
            progress.append(state.work_done_hours)
            continue
        price = model.on_demand_price if current == ON_DEMAND else spot_now[current]
        used = 1.0
        if overhead_left > 0:
            overhead_left -= 1
        elif done_ticks == grid.work_ticks - 1:
            used = grid.last_fraction
            done_ticks += 1
            finish = (tick + used) * g
        else:
            done_ticks += 1
        cost += price * used * g
        if current == ON_DEMAND:
            od_hours += used * g
        else:
            spot_hours += used * g
        progress.append(min(done_ticks * g, model.job_hours))
        if finish is not None:
            break
    met = finish is not None and finish <= model.deadline_hours + _EPS
    return SimResult(
        policy.name, cost, finish, met, launches, preemptions, spot_hours, od_hours, tuple(targets), tuple(progress)
    )


def simulate_policies(
    trace: MultiPoolTrace, model: JobModel, names: tuple[str, ...], *, home_pool: str | None = None
) -> dict[str, SimResult]:
    """Simulate each named policy (and ``optimal``, the hindsight optimum) on ``trace``.

    ``home_pool`` (default: the first pool of the trace) pins the paper's single-pool
    policies; ``danlu`` and ``optimal`` use every pool.
    """
    from planner.optimal import optimal_policy  # the optimum imports this module

    home = home_pool if home_pool is not None else trace.pools[0]
    results: dict[str, SimResult] = {}
    for name in names:
        policy = optimal_policy(trace, model) if name == "optimal" else make_policy(name, home_pool=home)
        results[name] = simulate(trace, model, policy)
    return results


def spot_models(trace: MultiPoolTrace) -> dict[str, dict[str, float | str | bool]]:
    """Each pool's spot model as the quote reads a trace (:mod:`pricing.spot_model`, :mod:`pricing.risk`):
    interruptions per available hour and the outage figures behind its capacity waits.  One function
    of one trace in both, so ``planner simulate`` and ``planner quote`` agree on a pool."""
    from pricing.risk import rate_from_trace
    from pricing.spot_model import waits_from_trace

    out: dict[str, dict[str, float | str | bool]] = {}
    for i, pool in enumerate(trace.pools):
        up = trace.available[i]
        rate = rate_from_trace(up.tolist(), trace.gap_seconds) if up.any() else None
        out[pool] = {"interruptions_per_hour": rate,
                     **waits_from_trace([up], trace.gap_seconds, f"trace {pool}").to_dict()}
    return out
