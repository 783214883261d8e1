"""The capacity MILP: how many reservations to buy, of what and when, and how each period is served.

Per GPU class (classes share no constraint, so each is its own model), reservation option r
(cloud, region, instance type, term) and start period s: ``x[r,s]`` instances bought at the start
of period s, active for the L_r whole periods the term covers; ``a[r,t]`` the active instances,
a running sum (a[r,t] = a[r,t-1] + x[r,t] - x[r,t-L_r], so the model grows with T, not T * L),
integer.  Capacity is counted in units of the gcd of the options' GPUs per node; the options of
that unit size are left continuous (outside the robust model), since given whole counts of the
bigger ones their LP is integral (:func:`whole_purchases` makes sure of it).

The cost of serving period t elastically, given integer capacity c, is convex and piecewise
linear (reserved hours displace on-demand first, then spot up to the declared preemptible
share): :func:`elastic_segments` gives it as a few segments ``y[t,i]`` with
``sum_i y[t,i] <= c``.  The objective is the reservations' charge plus those costs.  A term
that runs past the horizon is charged by ``rule``: ``pro_rata`` its share of whole periods
inside the horizon (``min(L, T - s) / L`` of the term), ``whole`` all of it.

With several scenarios (demand scaled by each factor) a class's reservations are shared and
its objective is its worst regret, ``max_k cost_k - best_k`` (min-max regret, Savage's
criterion), ``best_k`` being the class's optimum in scenario k alone.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.capacity.demand import ClassDemand, Demand
from planner.capacity.errors import NoOfferError
from planner.capacity.offers import ClassOffers, ReservedOption
from planner.capacity.sparse_milp import SparseMilp

RULES = ("pro_rata", "whole")
NEGLIGIBLE_GPU_HOURS = 1e-9
"""Demand below this (per period) is none: no plan buys a term for a nanosecond of a GPU."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """``count`` instances of ``option`` bought at the start of ``start_period``."""

    demand_class: str
    option: ReservedOption
    start_period: int
    count: int
    periods_in_horizon: int  # whole periods of the term inside the horizon
    charged_usd: float


@dataclass(frozen=True, slots=True)
class ClassPeriods:
    """How one class is served, period by period (GPU-hours and USD)."""

    demand: np.ndarray
    reserved_capacity: np.ndarray
    reserved_used: np.ndarray
    spot: np.ndarray
    on_demand: np.ndarray
    elastic_usd: np.ndarray


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    demand: Demand
    rule: str
    reservations: tuple[Reservation, ...]
    served: Mapping[str, ClassPeriods]

    @property
    def reservation_usd(self) -> float:
        return sum(r.charged_usd * r.count for r in self.reservations)

    @property
    def elastic_usd(self) -> float:
        return float(sum(p.elastic_usd.sum() for p in self.served.values()))

    @property
    def tco_usd(self) -> float:
        return self.reservation_usd + self.elastic_usd


def charge(option: ReservedOption, start: int, horizon: int, period_hours: float, rule: str) -> float:
    """What one instance of ``option`` bought at ``start`` costs under the past-horizon ``rule``."""
    periods = option.term_periods(period_hours)
    if rule == "whole":
        return option.term_usd
    if rule == "pro_rata":
        return option.term_usd * min(periods, horizon - start) / periods
    raise ValueError(f"unknown rule {rule!r}; expected one of {RULES}")


def solve(demand: Demand, offers: Mapping[str, ClassOffers], rule: str = "pro_rata", *,
          scenarios: Sequence[float] = (1.0,), best: Mapping[str, Sequence[float]] | None = None,
          gap: float = 1e-6, time_limit_s: float = 120.0, start: Sequence[Reservation] = ()) -> CapacityPlan:
    """The cheapest plan (or, with several ``scenarios`` and each class's ``best`` cost per scenario,
    the one whose reservations minimise each class's worst regret).

    Classes share nothing (no constraint spans two GPU classes), so each is solved on its own:
    the sum of the per-class optima is the optimum, and the models stay small.  ``start``: a known
    plan's reservations, given to the solver as a first incumbent (it changes the time, not the result).
    """
    reservations: list[Reservation] = []
    for cls in demand.classes:
        base = None if best is None else best[cls.name]
        mine = [r for r in start if r.demand_class == cls.name]
        reservations.extend(_solve_class(cls, offers[cls.name], demand, rule, scenarios, base, gap, time_limit_s,
                                         mine))
    return evaluate(demand, offers, reservations, rule)


def class_costs(demand: Demand, offers: Mapping[str, ClassOffers], plan: CapacityPlan) -> dict[str, float]:
    """Each class's share of ``plan``'s cost (its reservations plus its elastic GPU-hours)."""
    out = {c.name: float(plan.served[c.name].elastic_usd.sum()) for c in demand.classes}
    for r in plan.reservations:
        out[r.demand_class] += r.charged_usd * r.count
    return out


def elastic_segments(need: float, share: float, unit_hours: float, spot_usd: float | None,
                     od_usd: float | None) -> tuple[float, list[tuple[float, float]], int]:
    """The elastic cost of one period as a function of integer reserved capacity ``c`` (in units of
    ``unit_hours`` GPU-hours): ``(cost at c = 0, [(slope, length), ...], least c)``.

    Reserved hours displace on-demand first, then spot.  The exact cost is piecewise linear in c
    with breakpoints at c1 (non-preemptible need) and c2 (all need); interpolated between whole c
    it stays convex with breakpoints at floor/ceil of c1 and c2, so a few segments of integer length
    carry it exactly.  With these segments, one GPU size per class and integer terms, the model's
    matrix is an interval (network) matrix plus unit columns: its LP optimum is already integral.
    """
    firm, loose = need * (1 - share), need * share
    spot_rate = spot_usd if spot_usd is not None and share > 0 else od_usd
    if od_usd is not None and spot_rate is not None:
        spot_rate = min(spot_rate, od_usd)
    od_rate = od_usd

    def cost(c: float) -> float:
        covered = c * unit_hours
        on_demand = max(0.0, firm - covered)
        spot = max(0.0, min(loose, need - max(covered, firm)))
        total = 0.0
        if on_demand > 0:
            total += on_demand * (od_rate if od_rate is not None else math.inf)
        if spot > 0:
            total += spot * (spot_rate if spot_rate is not None else math.inf)
        return total

    c1, c2 = firm / unit_hours, need / unit_hours
    least = 0
    if od_rate is None:
        least = math.ceil(c1)  # exact: a sliver of firm need still needs a whole unit
        if spot_rate is None:
            least = math.ceil(c2)
    points = sorted({least, *(max(least, v) for v in (math.floor(c1), math.ceil(c1), math.floor(c2),
                                                         math.ceil(c2)))})
    base = cost(points[0])
    segments = []
    for lo, hi in itertools.pairwise(points):
        if hi > lo:
            segments.append(((cost(hi) - cost(lo)) / (hi - lo), float(hi - lo)))
    return base, segments, least


def same_start_bounds(options: Sequence[ReservedOption]) -> list[int | None]:
    """Per option, the most instances of it an optimal plan buys in one period (None: no such limit).

    If a bigger option of the same term holds a whole number k of this one's nodes (the offers keep
    it only when it is cheaper per GPU-hour), k of these bought in the same period are beaten by one
    of it: the same capacity in every period, for less.  So at most k - 1 are bought together.  The
    bound removes no optimum and cuts the search for mixed node sizes.
    """
    out: list[int | None] = []
    for o in options:
        multiples = [k.gpus_per_node // o.gpus_per_node for k in options
                     if k.term == o.term and k.gpus_per_node > o.gpus_per_node and k.gpus_per_node % o.gpus_per_node == 0
                     and k.usd_per_gpu_hour < o.usd_per_gpu_hour]
        out.append(min(multiples) - 1 if multiples else None)
    return out


Buys = list[tuple[ReservedOption, list[int], list[int]]]  # per option: its purchase and active columns


def _solve_class(cls: ClassDemand, offer: ClassOffers, demand: Demand, rule: str, scenarios: Sequence[float],
                 best: Sequence[float] | None, gap: float, time_limit_s: float,
                 start: Sequence[Reservation] = ()) -> list[Reservation]:
    T, P = demand.horizon, demand.period_hours
    D = np.asarray(cls.gpu_hours, dtype=float)
    options = offer.reserved if D.size and D.max() > 0 else ()
    spot_usd = offer.spot.usd_per_gpu_hour if offer.spot is not None else None
    od_usd = offer.on_demand.usd_per_gpu_hour if offer.on_demand is not None else None
    if not options:
        if od_usd is None and (spot_usd is None or cls.preemptible_share < 1) and D.max() > 0:
            raise NoOfferError(f"demand class {cls.name!r}: nothing allowed serves its non-preemptible demand; add "
                               "on_demand or a reserved term to [purchase] allow")
        return []
    unit = math.gcd(*(o.gpus_per_node for o in options))
    unit_hours = unit * P
    robust = len(scenarios) > 1
    if robust and (best is None or len(best) != len(scenarios)):
        raise ValueError("a robust solve needs each scenario's best cost")
    milp = SparseMilp()
    peak_units = math.ceil(float(D.max()) * max(scenarios) / unit_hours)
    capacity: list[dict[int, float]] = [{} for _ in range(T)]
    charges: dict[int, float] = {}  # purchase column -> its charge (the same in every scenario)
    buys: Buys = []
    together = same_start_bounds(options)
    # Only the nodes bigger than the unit need to be integer (see whole_purchases): given whole counts
    # of them, the rest is the one-size model, whose LP optimum is integral.
    loose = not robust and min(o.gpus_per_node for o in options) == unit
    for option, most in zip(options, together):
        L, size = option.term_periods(P), option.gpus_per_node // unit
        bound = math.ceil(peak_units / size)
        # x (bought at s) is continuous: x[t] = a[t] - a[t-1] + x[t-L] is whole whenever the active counts a are.
        xb = bound if most is None else min(bound, most)
        x = [milp.column(0.0 if robust else charge(option, s, T, P, rule), 0, xb) for s in range(T)]
        a = [milp.column(0.0, 0, bound, integer=not (loose and size == 1)) for _ in range(T)]
        for s in range(T):
            charges[x[s]] = charge(option, s, T, P, rule)
        for t in range(T):
            row = {a[t]: 1.0, x[t]: -1.0}
            if t:
                row[a[t - 1]] = -1.0
            if t - L >= 0:
                row[x[t - L]] = 1.0
            milp.row(row, 0.0, 0.0)
            capacity[t][a[t]] = float(size)
        buys.append((option, x, a))
    regret = milp.column(1.0, -math.inf, math.inf) if robust else None
    for k, factor in enumerate(scenarios):
        scenario_cost: dict[int, float] = dict(charges) if robust else {}
        constant = 0.0
        for t in range(T):
            need = float(D[t]) * factor
            if need <= NEGLIGIBLE_GPU_HOURS:  # a sliver (say 1e-300) would underflow into a unit count of 0
                continue
            base, segments, least = elastic_segments(need, cls.preemptible_share, unit_hours, spot_usd, od_usd)
            constant += base
            if least:
                milp.row(capacity[t], least, math.inf)
            if segments:
                y = [milp.column(0.0 if robust else slope, 0, length) for slope, length in segments]
                row = {yi: 1.0 for yi in y}
                row.update({j: -v for j, v in capacity[t].items()})
                milp.row(row, -math.inf, -least)
                if robust:
                    scenario_cost.update({yi: slope for yi, (slope, _) in zip(y, segments)})
        if robust:
            # regret >= cost_k - best_k
            row = {j: -v for j, v in scenario_cost.items()}
            row[regret] = 1.0
            milp.row(row, constant - best[k], math.inf)
        else:
            milp.constant += constant
    values = milp.solve(gap=gap, time_limit_s=time_limit_s, start=_start_values(start, buys, T, P))
    values = whole_purchases(milp, values, buys, gap, time_limit_s)
    out = []
    for option, x, _ in buys:
        L = option.term_periods(P)
        for s, j in enumerate(x):
            count = round(values[j])
            if count:
                out.append(Reservation(cls.name, option, s, count, min(L, T - s), charge(option, s, T, P, rule)))
    return out


def _fractional(values: np.ndarray, buys: Buys) -> bool:
    counts = values[[j for _, x, a in buys for j in (*x, *a)]]
    return bool(np.any(np.abs(counts - np.round(counts)) > 1e-6))


def whole_purchases(milp: SparseMilp, values: np.ndarray, buys: Buys, gap: float, time_limit_s: float) -> np.ndarray:
    """``values`` with every purchase and active count whole.

    The model leaves the unit-size options continuous (integer=False), since with whole counts of
    the bigger nodes fixed, the rest is an interval matrix plus unit columns (as the one-size
    model, :func:`elastic_segments`): each of its vertices is integral.  HiGHS may still end on an
    optimal point that is not a vertex of that rest (its node LP is not that LP); then the bigger
    nodes are fixed at their values and the rest is solved again as an LP, whose simplex optimum
    is a vertex, at the same cost.  Should even that not be whole, the model is solved with every
    count integer: never a wrong plan, only a slower one.
    """
    if not _fractional(values, buys):
        return values
    fixed = milp.relaxed()
    for j, integer in enumerate(milp.integer):
        if integer:
            fixed.lower[j] = fixed.upper[j] = float(round(values[j]))
    again = fixed.solve(gap=gap, time_limit_s=time_limit_s)
    if not _fractional(again, buys):
        return again
    strict = milp.relaxed()
    active = {c for _, _, a in buys for c in a}
    strict.integer = [j in active for j in range(milp.columns)]
    return strict.solve(gap=gap, time_limit_s=time_limit_s)


def _start_values(start: Sequence[Reservation], buys: Buys, T: int, P: float) -> dict[int, float] | None:
    """A MIP start from a known plan's reservations (its purchases and active counts); HiGHS completes the rest."""
    if not start:
        return None
    values: dict[int, float] = {}
    for option, x, a in buys:
        bought = np.zeros(T)
        for r in start:
            if r.option == option:
                bought[r.start_period] += r.count
        L = option.term_periods(P)
        active = np.cumsum(bought) - np.concatenate([np.zeros(min(L, T)), np.cumsum(bought)[:max(0, T - L)]])
        values.update({j: float(v) for j, v in zip(x, bought)})
        values.update({j: float(v) for j, v in zip(a, active)})
    return values


def evaluate(demand: Demand, offers: Mapping[str, ClassOffers], reservations: Sequence[Reservation],
             rule: str) -> CapacityPlan:
    """The plan that holds ``reservations`` and serves ``demand`` with them first, then spot, then on-demand.

    Given the reservations this dispatch is optimal (each period on its own: free reserved hours first,
    then the cheaper elastic option within its limit), so the report recomputes every figure from the
    integer counts instead of trusting the solver's continuous values.
    """
    T, P = demand.horizon, demand.period_hours
    served: dict[str, ClassPeriods] = {}
    for cls in demand.classes:
        offer = offers[cls.name]
        D = np.asarray(cls.gpu_hours, dtype=float)
        cap = np.zeros(T)
        for r in reservations:
            if r.demand_class == cls.name:
                cap[r.start_period:r.start_period + r.periods_in_horizon] += r.count * r.option.gpus_per_node * P
        used = np.minimum(D, cap)
        rest = D - used
        spot_price = offer.spot.usd_per_gpu_hour if offer.spot and cls.preemptible_share > 0 else math.inf
        od_price = offer.on_demand.usd_per_gpu_hour if offer.on_demand else math.inf
        if spot_price < od_price:
            spot = np.minimum(rest, cls.preemptible_share * D)
        else:
            spot = np.zeros(T)
        od = rest - spot
        if od_price == math.inf and (od > 1e-6 * np.maximum(D, 1)).any():
            t = int(np.argmax(od))
            raise NoOfferError(f"demand class {cls.name!r}: period {t} is not covered by reservations and "
                               "on-demand is not allowed")
        od = np.where(od_price == math.inf, 0.0, od)
        cost = spot * (spot_price if spot_price < math.inf else 0.0) + od * (od_price if od_price < math.inf else 0)
        served[cls.name] = ClassPeriods(D, cap, used, spot, od, cost)
    return CapacityPlan(demand, rule, tuple(reservations), served)
