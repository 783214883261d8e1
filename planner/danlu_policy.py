"""``danlu``: the switching policy of ``planner run`` and ``planner simulate``.

Uniform Progress spends on-demand whenever the job falls behind the line ``C*t/D``:
it assumes, in effect, that spot will cover a share ``C/D`` of the time left.  Greedy
assumes it will cover everything until the last safe moment.  Which one is cheaper
depends on the pool: greedy wins where spot is plentiful and the slack is loose, UP
where it is not.  ``danlu`` measures the pool instead of assuming:

* **What it learns.**  From the pools it has seen (:mod:`planner.policy_memory`): the
  mean run ``U`` and outage ``V`` of spot availability (exponential MLEs, the open run
  censored, one prior pseudo-run each: ``1 / interruption rate`` where the planner knows
  the pool's rate, as ``planner run`` does), over the union of the pools it may use.
* **Idle or on-demand, when no spot is up.**  It waits (free) while the slack ``R - W``
  (time left less work left) exceeds the slack it keeps, and runs on-demand below it.  It
  keeps enough for the launches still to come -- two per spot run, ``cycle_weight * 2d *
  R / (U + V)``, plus ``reserve`` spare ones -- and, the scarcer spot has been, up to
  Uniform Progress's slack ``R * (D - C) / D``: all of it at availability ``U/(U+V)`` of
  ``scarce`` or less, none at ``plenty`` or more, linearly between.
* **Back from on-demand to spot** as soon as spot is up and its runs are long enough
  to pay for two launches (the one now and the one back to on-demand): ``U >=
  exit_run`` launches.  Greedy never comes back; UP waits until ``2d`` ahead of its line.
* **Which pool.**  Among the pools up, the cheapest per useful hour, ``price * U_p /
  (U_p - d)`` with each pool's own ``U_p``, then the one up the longest; it never
  leaves a running spot instance for another (that costs a launch).
* **The safety net** is the paper's (:func:`planner.policy.safety_net`) and has the
  last word, so whatever on-demand could still meet, this meets: the guarantee does
  not depend on the learned figures or on the parameters.

The parameters were tuned on two trace sets only (``bench/tune_policy.py``); the
held-out sets are in docs/simulate.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.policy import ON_DEMAND, Decision, PolicyMemory, PolicyState, safety_net

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class DanluPolicy:
    """Learns the pools' availability as the run goes and spends the slack by it."""

    cycle_weight: float = 1.0
    reserve: float = 8.0
    line_share: float = 0.0
    scarce: float = 0.1
    plenty: float = 0.4
    exit_ahead: float = -math.inf
    exit_run: float = 2.0
    prior_up_hours: float = 1.0
    prior_down_hours: float = 1.0
    name: str = "danlu"

    def decide(self, state: PolicyState) -> Decision:
        memory = state.memory.observe(state.elapsed_hours, state.spot_prices, state.preempted)
        state = replace(state, memory=memory)
        if state.work_left_hours <= _EPS:
            return Decision(None, "job complete", memory)
        spot = self._pool(state, memory)
        decision = self._rule(state, memory, spot)
        return safety_net(state, spot) or decision

    def _rule(self, state: PolicyState, memory: PolicyMemory, spot: str | None) -> Decision:
        d, now = state.restart_hours, state.elapsed_hours
        union = memory.union
        assert union is not None  # observe() always sets it
        priors = [self._prior_up(state, p) for p in memory.pools] or [self.prior_up_hours]
        up = union.mean_up_hours(now, max(priors))  # some pool is up at least as long as the best one
        down = union.mean_down_hours(now, self.prior_down_hours)
        slack = state.remaining_time_hours - state.work_left_hours
        need = self._need(state, up, down)
        if spot is not None:
            if state.current != ON_DEMAND:
                return Decision(spot, f"spot in {spot} (runs last {up:.2f} h on average)", memory)
            if up >= self.exit_run * d and slack - need >= self.exit_ahead * d:
                return Decision(spot, f"spot in {spot}: runs of {up:.2f} h pay for leaving on-demand", memory)
            return Decision(ON_DEMAND, f"on on-demand: spot runs {up:.2f} h, slack {slack:.2f} h of {need:.2f} h",
                            memory)
        if state.current == ON_DEMAND:
            return Decision(ON_DEMAND, "no spot: stay on on-demand", memory)
        if slack > need:
            return Decision(None, f"no spot: wait (slack {slack:.2f} h > {need:.2f} h kept)", memory)
        return Decision(ON_DEMAND, f"no spot and slack {slack:.2f} h <= {need:.2f} h: on-demand", memory)

    def _need(self, state: PolicyState, up: float, down: float) -> float:
        """The slack to keep: switches for the spot runs to come, plus spare launches, and
        -- the scarcer spot has been -- up to Uniform Progress's share of the time left."""
        d, left = state.restart_hours, state.remaining_time_hours
        switching = self.cycle_weight * 2 * d * left / (up + down) + self.reserve * d
        availability = up / (up + down)
        scarce = min(max((self.plenty - availability) / max(self.plenty - self.scarce, _EPS), 0.0), 1.0)
        share = self.line_share + (1.0 - self.line_share) * scarce if self.plenty > 0 else self.line_share
        line = left * (state.deadline_hours - state.job_hours) / state.deadline_hours
        return max(switching, share * line)

    def _prior_up(self, state: PolicyState, pool: str) -> float:
        """The mean run expected of ``pool`` before any is seen: 1 / its interruption rate when
        the planner knows one, else ``prior_up_hours``."""
        rate = state.interruption_rates.get(pool)
        return 1.0 / rate if rate is not None and rate > _EPS else self.prior_up_hours

    def _pool(self, state: PolicyState, memory: PolicyMemory) -> str | None:
        if state.on_spot:
            return state.current  # moving costs a launch; stay while it lasts
        if not state.spot_prices:
            return None
        d, now = state.restart_hours, state.elapsed_hours

        def per_useful_hour(pool: str) -> tuple[float, float]:
            record = memory.pools[pool]
            up = record.mean_up_hours(now, self._prior_up(state, pool))
            useful = max(up - d, _EPS)
            return (state.spot_prices[pool] * up / useful, record.since)

        return min(state.spot_prices, key=per_useful_hour)
