"""Online mode: decide period by period, knowing only the past, when to buy a reservation.

The problem is Wang, Li and Liang's ("To Reserve or Not to Reserve", ICAC 2013): one
instance type, on-demand at ``p`` per instance-hour or a term of ``L`` periods for a fee
``R``; demand is revealed period by period and must be served at once.  In the paper a
reserved instance also costs ``alpha * p`` per hour used; a cloud term is billed every hour
whether used or not (every payment option), so the whole term is the fee and ``alpha = 0``:
their deterministic algorithm is then no worse than ``2 - alpha = 2`` times the hindsight optimum.

Demand is counted in instances (GPU-hours / (GPUs per node * period hours), fractional), in
levels: level ``l`` of period t is ``clip(n_t - l + 1, 0, 1)``; reservations cover the lowest
levels.  Both rules decide at period t after seeing its demand; a purchase serves from t on.

* **Wang-Li-Liang (baseline)**: reserve one more instance (for the lowest uncovered level
  ``l``) while the on-demand cost that level incurred over the last L periods, t included,
  reaches the fee ``R / (1 - alpha)``.
* **danlu (ours)**: reserve for level ``l`` when its mean use over the last ``lookback`` periods
  *and* over all the history up to one term back are both at least the break-even utilization
  ``R / (L * P * p)`` times ``1 + margin``: the past is the forecast of the term ahead, and the
  longer past keeps a burst from buying terms.  It waits for ``lookback`` periods of history.
  Unlike the baseline it has no worst-case guarantee (no deterministic rule beats 2 - alpha on
  every input); its ratio is measured, on the traces in docs/capacity.md and the tests.

Both are charged by the same rule as the plan, with the same dispatch, and compared with the
hindsight optimum (the capacity MILP on the whole series, which knows the future) and with
all on-demand.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from planner.capacity.demand import ClassDemand, Demand
from planner.capacity.model import Reservation, charge, evaluate, solve
from planner.capacity.offers import ClassOffers, ElasticPrice, ReservedOption

ALPHA = 0.0
"""The paper's usage price of a reserved instance as a share of on-demand: 0, a term is billed whole."""


@dataclass(frozen=True, slots=True)
class ReplayCosts:
    """Total cost of each strategy over one demand series."""

    hindsight_usd: float
    all_on_demand_usd: float
    baseline_usd: float
    ours_usd: float
    baseline_reservations: int
    ours_reservations: int
    hindsight_reservations: int

    @property
    def baseline_ratio(self) -> float:
        return self.baseline_usd / self.hindsight_usd if self.hindsight_usd else 1.0

    @property
    def ours_ratio(self) -> float:
        return self.ours_usd / self.hindsight_usd if self.hindsight_usd else 1.0


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    runs: tuple[ReplayCosts, ...]
    bound: float

    def mean(self, attr: str) -> float:
        return statistics.fmean(getattr(r, attr) for r in self.runs)

    def worst(self, attr: str) -> float:
        return max(getattr(r, attr) for r in self.runs)


def levels(n: np.ndarray, level: int) -> np.ndarray:
    """Use of capacity level ``level`` (1-based) in each period, 0..1."""
    return np.clip(n - (level - 1), 0.0, 1.0)


def wang_li_liang(n: np.ndarray, term_periods: int, fee_usd: float, od_usd_per_instance_period: float) -> list[int]:
    """Purchase count per period by the paper's deterministic rule (with ``alpha`` = :data:`ALPHA`)."""
    T = len(n)
    active = np.zeros(T + term_periods)
    bought = [0] * T
    threshold = fee_usd / (1.0 - ALPHA)
    for t in range(T):
        lo = max(0, t - term_periods + 1)
        while n[t] > active[t]:
            level = int(active[t]) + 1
            uncovered = active[lo:t + 1] < level
            spent = od_usd_per_instance_period * float((levels(n[lo:t + 1], level) * uncovered).sum())
            if spent < threshold:
                break
            bought[t] += 1
            active[t:t + term_periods] += 1
    return bought


def history_rule(n: np.ndarray, term_periods: int, fee_usd: float, od_usd_per_instance_period: float, *,
                 lookback: int, margin: float = 0.1) -> list[int]:
    """Purchase count per period by our rule: the last ``lookback`` periods forecast the term ahead."""
    T = len(n)
    active = np.zeros(T + term_periods)
    bought = [0] * T
    break_even = fee_usd / (term_periods * od_usd_per_instance_period)
    for t in range(lookback - 1, T):
        recent = n[t - lookback + 1:t + 1]
        history = n[max(0, t - term_periods + 1):t + 1]
        while True:
            level = int(active[t]) + 1
            need = break_even * (1 + margin)
            # The recent window says the level is in use now; the history (up to a term back) guards
            # against buying a term for a burst that the longer past shows to be rare.
            if float(levels(recent, level).mean()) < need or float(levels(history, level).mean()) < need:
                break
            bought[t] += 1
            active[t:t + term_periods] += 1
    return bought


def replay_series(gpu_hours: np.ndarray, period: str, option: ReservedOption, on_demand: ElasticPrice,
                  rule: str = "pro_rata", *, lookback: int, margin: float = 0.1) -> ReplayCosts:
    """Every strategy on one demand series (GPU-hours per period)."""
    cls = ClassDemand("replay", option.gpu, tuple(float(v) for v in gpu_hours), 0.0)
    demand = Demand("replay", period, len(gpu_hours), (cls,))
    P = demand.period_hours
    offers = {"replay": ClassOffers(on_demand, None, (option,))}
    L = option.term_periods(P)
    n = np.asarray(gpu_hours, dtype=float) / (option.gpus_per_node * P)
    od_instance_period = on_demand.usd_per_gpu_hour * option.gpus_per_node * P

    def cost(bought: list[int]) -> float:
        held = [Reservation("replay", option, s, c, min(L, len(n) - s), charge(option, s, len(n), P, rule))
                for s, c in enumerate(bought) if c]
        return evaluate(demand, offers, held, rule).tco_usd

    baseline = wang_li_liang(n, L, option.term_usd, od_instance_period)
    ours = history_rule(n, L, option.term_usd, od_instance_period, lookback=lookback, margin=margin)
    hindsight = solve(demand, offers, rule)
    return ReplayCosts(
        hindsight_usd=hindsight.tco_usd, all_on_demand_usd=float(np.sum(gpu_hours)) * on_demand.usd_per_gpu_hour,
        baseline_usd=cost(baseline), ours_usd=cost(ours), baseline_reservations=sum(baseline),
        ours_reservations=sum(ours), hindsight_reservations=sum(r.count for r in hindsight.reservations))


def rotations(series: list[float], horizon: int, count: int, growth: float = 0.0) -> list[np.ndarray]:
    """``count`` extensions of ``series`` to ``horizon`` periods, each starting the repetition at a
    different offset (evenly spaced through the series), with compound growth."""
    n = len(series)
    out = []
    for k in range(count):
        offset = (k * n) // count
        out.append(np.array([series[(offset + t) % n] * (1 + growth) ** t for t in range(horizon)]))
    return out


def replay_all(series: list[np.ndarray], period: str, option: ReservedOption, on_demand: ElasticPrice,
               rule: str = "pro_rata", *, lookback: int, margin: float = 0.1) -> ReplaySummary:
    runs = tuple(replay_series(s, period, option, on_demand, rule, lookback=lookback, margin=margin)
                 for s in series)
    return ReplaySummary(runs, 2.0 - ALPHA)


def cheapest_option(offers: ClassOffers, term: str) -> ReservedOption | None:
    """The reservation of ``term`` cheapest per GPU-hour (fewest GPUs per node on a tie)."""
    found = [o for o in offers.reserved if o.term == term]
    return min(found, key=lambda o: (o.usd_per_gpu_hour, o.gpus_per_node), default=None)
