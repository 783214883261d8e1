"""The hindsight optimum: the cheapest schedule that meets the deadline, knowing the trace.

A dynamic programme over ticks, exact for the simulator's rules (see
:mod:`planner.simulate`): the same launch overhead of ``h`` whole ticks, the same
preemptions, the same per-tick prices and the same partly billed last tick, so its
cost is a true lower bound for every policy that meets the deadline.

Progress is counted by its *lag*: ``lag = t + 1 - k`` ticks that did no work so far
(idle or overhead), ``k`` being the productive ticks.  A schedule meets the deadline
only if ``lag`` never exceeds the slack ``S = last_tick + 1 - K``, so the value
tables are ``(modes, S + 1)`` per tick, not ``(modes, K)``.

A launch is one transition that jumps ``h`` ticks: launched in tick ``u`` from any
state of lag ``L``, mode ``m`` is *ready* (about to do work) after tick ``u + h - 1``
with lag ``L + h``, having paid its prices over those ``h`` ticks, provided it stayed
up through all of them.  A launch abandoned or preempted before it is ready is never
optimal (idling through those ticks costs nothing and adds the same lag), so the
tables need no overhead-phase axis: the work per tick is ``O(modes * S)`` whatever
``h`` is, and a 72-hour window on a 32-second trace (8,100 ticks, ``h`` = 23) takes
well under a second.  Windows are solved side by side as a batch in numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.policy import ON_DEMAND, Decision, PolicyState
from planner.simulate import JobModel, TickGrid, require_feasible, tick_grid
from pricing.traces import MultiPoolTrace

_MAX_RECORD_BYTES = 2 << 30
"""Back-pointers of one schedule beyond this would not fit a laptop: refuse instead."""


@dataclass(frozen=True, slots=True)
class SchedulePolicy:
    """Replays a fixed per-tick schedule through the simulator (``None`` = idle)."""

    targets: tuple[str | None, ...]
    name: str = "optimal"

    def decide(self, state: PolicyState) -> Decision:
        tick = round(state.elapsed_hours / state.tick_hours)
        target = self.targets[tick] if tick < len(self.targets) else None
        return Decision(target, "hindsight optimum", state.memory)


def optimal_costs(trace: MultiPoolTrace, model: JobModel, starts: Sequence[int]) -> np.ndarray:
    """Optimal cost (USD) of the job started at each tick of ``starts``, over all pools of ``trace``."""
    grid = tick_grid(model, trace.tick_hours)
    require_feasible(model, grid)
    available, prices = _stack(trace, model, grid, starts)
    cost, _ = _solve(available, prices, model.on_demand_price, grid, record=False)
    return cost


def optimal_schedule(trace: MultiPoolTrace, model: JobModel) -> tuple[float, tuple[str | None, ...]]:
    """The optimal cost and schedule (instance per tick until the job is done) from tick 0."""
    grid = tick_grid(model, trace.tick_hours)
    require_feasible(model, grid)
    available, prices = _stack(trace, model, grid, [0])
    cost, record = _solve(available, prices, model.on_demand_price, grid, record=True)
    assert record is not None
    modes = (ON_DEMAND, *trace.pools)
    return float(cost[0]), tuple(None if m < 0 else modes[m] for m in _backtrack(record, grid))


def optimal_policy(trace: MultiPoolTrace, model: JobModel) -> SchedulePolicy:
    """The hindsight optimum as a policy the simulator can replay."""
    return SchedulePolicy(optimal_schedule(trace, model)[1])


def _stack(trace: MultiPoolTrace, model: JobModel, grid: TickGrid, starts: Sequence[int]):
    n = grid.last_tick + 1
    windows = [trace.window(s, n) for s in starts]
    available = np.stack([w.available for w in windows])
    prices = np.stack([np.where(np.isnan(w.spot_prices), model.spot_price, w.spot_prices) for w in windows])
    return available, prices


@dataclass
class _Record:
    """Back-pointers of one window: enough to rebuild the optimal schedule."""

    launched: list[np.ndarray]  # per tick t, packed (M, L) bits: ready[m, lag] came by a launch ready at t
    any_source: list[np.ndarray]  # per tick t, (L,) int8: -1 idle, else the mode whose ready state is cheapest
    finish_mode: np.ndarray  # per tick: the mode that finishes the job in that tick at least cost
    finish_launched: np.ndarray  # ... by a launch in that very tick (only when h == 0)
    finish_cost: np.ndarray
    lags: int


def _solve(
    available: np.ndarray, spot_prices: np.ndarray, on_demand_price: float, grid: TickGrid, *, record: bool
) -> tuple[np.ndarray, _Record | None]:
    """Minimum cost per window.  ``available``/``spot_prices``: (windows, pools, >= last_tick + 1)."""
    batch, pools, _ = available.shape
    ticks = grid.last_tick + 1
    g, h, k_total, frac = grid.tick_hours, grid.overhead_ticks, grid.work_ticks, grid.last_fraction
    lags = grid.slack_ticks + 1
    modes = pools + 1
    if record and ticks * lags * (modes / 8 + 1) > _MAX_RECORD_BYTES:
        raise MemoryError(f"the optimal schedule of {ticks} ticks with {lags - 1} ticks of slack is too large to trace")

    up = np.ones((batch, modes, ticks), dtype=bool)
    up[:, 1:] = available[:, :, :ticks]
    cost = np.empty((batch, modes, ticks))
    cost[:, 0] = on_demand_price * g
    cost[:, 1:] = spot_prices[:, :, :ticks] * g
    cost = np.where(up, cost, 0.0)
    # a launch ready after tick t paid ticks t-h+1..t and needed its pool up in all of them
    zero = np.zeros((batch, modes, 1))
    cum_cost = np.concatenate([zero, np.cumsum(cost, axis=2)], axis=2)
    cum_down = np.concatenate([zero, np.cumsum(~up, axis=2)], axis=2)

    inf = np.inf
    start = np.full((batch, lags), inf)
    start[:, 0] = 0.0
    history = [start] * max(h, 1)  # the any-state after ticks t-h .. t-1, oldest first
    ready = np.full((batch, modes, lags), inf)
    best = np.full(batch, inf)
    rec = (
        _Record([], [], np.full(ticks, -1), np.zeros(ticks, dtype=bool), np.full(ticks, inf), lags)
        if record else None
    )
    for t in range(ticks):
        previous_any = history[-1]
        c = cost[:, :, t]
        u = up[:, :, t]
        finish_lag = t + 1 - k_total
        if finish_lag >= 0:
            # the tick that completes the work is billed only for the part used
            done = ready[:, :, finish_lag] + frac * c
            launched_now = np.zeros_like(done, dtype=bool)
            if h == 0:
                fresh = previous_any[:, finish_lag, None] + frac * c
                launched_now = fresh < done
                done = np.minimum(done, fresh)
            done = np.where(u, done, inf)
            best = np.minimum(best, done.min(axis=1))
            if rec is not None:
                m = int(np.argmin(done[0]))
                rec.finish_mode[t], rec.finish_cost[t] = m, done[0, m]
                rec.finish_launched[t] = launched_now[0, m]

        kept = ready + c[:, :, None]
        if h == 0:
            arrival = previous_any[:, None, :] + c[:, :, None]
        else:
            first = t - h + 1
            arrival = np.full_like(ready, inf)
            if first >= 0:
                paid = cum_cost[:, :, t + 1] - cum_cost[:, :, first]
                whole = (cum_down[:, :, t + 1] - cum_down[:, :, first]) == 0
                arrival[:, :, h:] = history[0][:, None, :-h] + np.where(whole, paid, inf)[:, :, None]
        by_launch = arrival < kept
        new_ready = np.where(by_launch, arrival, kept)
        new_ready[~np.broadcast_to(u[:, :, None], new_ready.shape)] = inf
        if finish_lag >= 0:
            new_ready[:, :, finish_lag] = inf  # finished jobs leave the table

        idle = np.full((batch, lags), inf)
        idle[:, 1:] = previous_any[:, :-1]
        cheapest = new_ready.min(axis=1)
        any_now = np.minimum(idle, cheapest)
        if rec is not None:
            rec.launched.append(np.packbits(by_launch[0], axis=None))
            source = np.argmin(new_ready[0], axis=0).astype(np.int8)
            rec.any_source.append(np.where(idle[0] <= cheapest[0], np.int8(-1), source))
        history = [*history[1:], any_now]
        ready = new_ready
    return best, rec


def _backtrack(rec: _Record, grid: TickGrid) -> list[int]:
    """Mode per tick of the optimal schedule (-1 idle, 0 on-demand, p + 1 spot pool p)."""
    if not np.isfinite(rec.finish_cost).any():
        return []
    h, lags = grid.overhead_ticks, rec.lags
    t = int(np.argmin(rec.finish_cost))
    mode = int(rec.finish_mode[t])
    lag = t + 1 - grid.work_ticks
    out = {t: mode}
    # where the schedule stands before tick t: ("any", lag) or ("ready", mode, lag)
    where = ("any", lag) if rec.finish_launched[t] else ("ready", mode, lag)
    t -= 1
    while t >= 0:
        if where[0] == "any":
            source = int(rec.any_source[t][where[1]])
            if source < 0:
                out[t] = -1
                where, t = ("any", where[1] - 1), t - 1
                continue
            where = ("ready", source, where[1])
        _, m, lag = where
        launched = _bit(rec.launched[t], m * lags + lag)
        if not launched:
            out[t] = m
            t -= 1
            continue
        span = max(h, 1)
        for u in range(t - span + 1, t + 1):
            out[u] = m
        t -= span
        where = ("any", lag - h)
    return [out.get(i, -1) for i in range(max(out) + 1)]


def _bit(packed: np.ndarray, index: int) -> bool:
    return bool((packed[index >> 3] >> (7 - (index & 7))) & 1)
