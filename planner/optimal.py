"""The hindsight optimum: the cheapest schedule that meets the deadline, knowing the trace.

A dynamic programme over ticks, exact for the simulator's rules (see
:mod:`planner.simulate`): the same launch overhead of ``h`` whole ticks, the same
preemptions, the same per-tick prices and the same partly billed last tick, so its
cost is a true lower bound for every policy that meets the deadline.

State after tick ``t``: idle, or running mode ``m`` (on-demand or one spot pool) with
``j`` overhead ticks still to serve.  Progress is counted by its *lag*: ``lag = t + 1 -
k`` ticks that did no work so far (idle or overhead), ``k`` being the productive
ticks.  A schedule meets the deadline only if ``lag`` never exceeds the slack ``S =
last_tick + 1 - K``, so the value table is ``(modes, phases, S + 1)`` per tick, not
``(modes, phases, K)``, and windows are solved side by side as a batch in numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.policy import ON_DEMAND, Decision, PolicyState
from planner.simulate import JobModel, TickGrid, require_feasible, tick_grid
from pricing.traces import MultiPoolTrace

_CONTINUE, _OVERHEAD, _LAUNCH = 0, 1, 2


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
    n = grid.last_tick + 1
    windows = [trace.window(s, n) for s in starts]
    available = np.stack([w.available for w in windows])
    prices = np.stack([np.where(np.isnan(w.spot_prices), model.spot_price, w.spot_prices) for w in windows])
    cost, _ = _solve(available, prices, model.on_demand_price, grid, record=False)
    return cost


def optimal_schedule(trace: MultiPoolTrace, model: JobModel) -> tuple[float, tuple[str | None, ...]]:
    """The optimal cost and schedule (instance per tick until the job is done) from tick 0."""
    grid = tick_grid(model, trace.tick_hours)
    require_feasible(model, grid)
    window = trace.window(0, grid.last_tick + 1)
    prices = np.where(np.isnan(window.spot_prices), model.spot_price, window.spot_prices)
    cost, record = _solve(window.available[None], prices[None], model.on_demand_price, grid, record=True)
    assert record is not None
    modes = (ON_DEMAND, *trace.pools)
    return float(cost[0]), tuple(None if m < 0 else modes[m] for m in _backtrack(record, grid))


def optimal_policy(trace: MultiPoolTrace, model: JobModel) -> SchedulePolicy:
    """The hindsight optimum as a policy the simulator can replay."""
    return SchedulePolicy(optimal_schedule(trace, model)[1])


@dataclass
class _Record:
    """Back-pointers of one window: enough to rebuild the optimal schedule."""

    any_source: list[np.ndarray]  # per tick, (L,): argmin over [idle, run(m, j)...] of the previous states
    run_code: list[np.ndarray]  # per tick, (M, H, L): how each running state was reached
    finish_mode: np.ndarray  # per tick: mode finishing the job in that tick at least cost
    finish_code: np.ndarray
    finish_cost: np.ndarray
    phases: int


def _solve(
    available: np.ndarray, spot_prices: np.ndarray, on_demand_price: float, grid: TickGrid, *, record: bool
) -> tuple[np.ndarray, _Record | None]:
    """Minimum cost per window.  ``available``/``spot_prices``: (windows, pools, >= last_tick + 1)."""
    batch, pools, _ = available.shape
    g, h, k_total, frac = grid.tick_hours, grid.overhead_ticks, grid.work_ticks, grid.last_fraction
    lags = grid.slack_ticks + 1
    modes, phases = pools + 1, max(h, 1)
    idle = np.full((batch, lags), np.inf)
    idle[:, 0] = 0.0
    run = np.full((batch, modes, phases, lags), np.inf)
    best = np.full(batch, np.inf)
    up = np.ones((batch, modes), dtype=bool)
    cost = np.empty((batch, modes))
    cost[:, 0] = on_demand_price * g
    rec = (
        _Record([], [], np.full(grid.last_tick + 1, -1), np.zeros(grid.last_tick + 1, dtype=int),
                np.full(grid.last_tick + 1, np.inf), phases)
        if record else None
    )
    for t in range(grid.last_tick + 1):
        up[:, 1:] = available[:, :, t]
        cost[:, 1:] = spot_prices[:, :, t] * g
        c3 = cost[:, :, None]
        any_state = np.minimum(idle, run.min(axis=(1, 2)))
        shifted = np.full_like(any_state, np.inf)
        shifted[:, 1:] = any_state[:, :-1]
        launch_from = any_state if h == 0 else shifted

        finish_lag = t + 1 - k_total
        if finish_lag >= 0:
            # the tick that completes the work is billed only for the part used
            done = run[:, :, 0, finish_lag] + frac * cost
            if h == 0:
                done = np.minimum(done, any_state[:, finish_lag, None] + frac * cost)
            done = np.where(up, done, np.inf)
            best = np.minimum(best, done.min(axis=1))
            if rec is not None:
                m = int(np.argmin(done[0]))
                rec.finish_mode[t], rec.finish_cost[t] = m, done[0, m]
                continued = done[0, m] == run[0, m, 0, finish_lag] + frac * cost[0, m]
                rec.finish_code[t] = _CONTINUE if continued else _LAUNCH

        new_run = np.full_like(run, np.inf)
        new_run[:, :, 0, :] = run[:, :, 0, :] + c3
        if h >= 2:
            overhead = run[:, :, 1:h, :-1] + cost[:, :, None, None]
            new_run[:, :, 1 : h - 1, 1:] = overhead[:, :, 1:]
            new_run[:, :, 0, 1:] = np.minimum(new_run[:, :, 0, 1:], overhead[:, :, 0])
            new_run[:, :, h - 1, :] = launch_from[:, None, :] + c3
        else:
            new_run[:, :, 0, :] = np.minimum(new_run[:, :, 0, :], launch_from[:, None, :] + c3)
        if finish_lag >= 0:
            new_run[:, :, 0, finish_lag] = np.inf  # finished jobs leave the table
        new_run[~up] = np.inf

        if rec is not None:
            rec.any_source.append(np.argmin(np.concatenate([idle[0][None], run[0].reshape(-1, lags)]), axis=0))
            rec.run_code.append(_codes(run[0], new_run[0], cost[0], h))
        idle, run = shifted, new_run
    return best, rec


def _codes(run: np.ndarray, new_run: np.ndarray, cost: np.ndarray, h: int) -> np.ndarray:
    """How each state of ``new_run`` (one window) was reached from ``run``."""
    codes = np.full(new_run.shape, _LAUNCH, dtype=np.int8)
    if h >= 2:
        codes[:, : h - 1, :] = _OVERHEAD
        via_overhead = np.full(new_run.shape[::2], np.inf)
        via_overhead[:, 1:] = run[:, 1, :-1] + cost[:, None]
        codes[:, 0, :] = np.where(new_run[:, 0, :] == via_overhead, _OVERHEAD, _LAUNCH)
    codes[:, 0, :] = np.where(new_run[:, 0, :] == run[:, 0, :] + cost[:, None], _CONTINUE, codes[:, 0, :])
    return codes


def _backtrack(rec: _Record, grid: TickGrid) -> list[int]:
    """Mode per tick of the optimal schedule (-1 idle, 0 on-demand, p + 1 spot pool p)."""
    if not np.isfinite(rec.finish_cost).any():
        return []
    t = int(np.argmin(rec.finish_cost))
    phases, h = rec.phases, grid.overhead_ticks
    mode = int(rec.finish_mode[t])
    modes = [mode]
    lag = t + 1 - grid.work_ticks
    # the state before the finishing tick
    if rec.finish_code[t] == _CONTINUE:
        state: tuple[int, int] = (mode, 0)
    else:
        state = _unflatten(int(rec.any_source[t][lag]), phases)
    while t > 0:
        t -= 1
        m, j = state
        modes.append(m)
        if m < 0:  # idle this tick: came from any state one lag lower
            lag -= 1
            state = _unflatten(int(rec.any_source[t][lag]), phases)
            continue
        code = rec.run_code[t][m, j, lag]
        if code == _CONTINUE:
            state = (m, 0)
        elif code == _OVERHEAD:
            lag -= 1
            state = (m, j + 1)
        else:
            if h >= 1:
                lag -= 1
            state = _unflatten(int(rec.any_source[t][lag]), phases)
    modes.reverse()
    return modes


def _unflatten(index: int, phases: int) -> tuple[int, int]:
    """Flat index over [idle, run(0, 0), run(0, 1), ...] -> (mode or -1 for idle, phase)."""
    if index == 0:
        return (-1, 0)
    return divmod(index - 1, phases)
