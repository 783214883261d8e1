"""The robust plan (min-max regret over demand x0.8, x1.0, x1.2) equals an exhaustive search on a
small mixed-node-size case, with the MIP start and the same-period bound the report uses."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from planner.capacity.demand import PERIOD_HOURS
from planner.capacity.model import class_costs, evaluate, solve
from planner.capacity.offers import TERMS, offers_for
from planner.capacity.report import SCENARIOS, least_regret_start
from pricing.catalog import HOURS_PER_YEAR

from .helpers import demand_of, small_catalog

ALLOW = {"on_demand", "spot", "reserved_1y", "reserved_3y"}


def costs_of_every_plan(rows, hours: np.ndarray, share: float, period: str) -> list[list[float]]:
    """For every multiset of purchases that can matter, its cost under each scenario (pro rata)."""
    P, T = PERIOD_HOURS[period], len(hours)
    items = [(o, term, s) for o in rows for term in TERMS if o.price(term) for s in range(T)]
    g_min, g_max = min(o.gpus_per_node for o in rows), max(o.gpus_per_node for o in rows)
    most = math.ceil((hours.max() * max(SCENARIOS) + g_max * P) / (g_min * P))
    od = min(o.on_demand / o.gpus_per_node for o in rows)
    spot = min(o.spot / o.gpus_per_node for o in rows)
    out = []
    for k in range(most + 1):
        for combo in itertools.combinations_with_replacement(range(len(items)), k):
            cap, fixed = np.zeros(T), 0.0
            for i in combo:
                o, term, s = items[i]
                L = int(HOURS_PER_YEAR * TERMS[term] // P)
                cap[s:] += o.gpus_per_node * P
                fixed += o.price(term) * HOURS_PER_YEAR * TERMS[term] * (T - s) / L
            row = []
            for f in SCENARIOS:
                need = hours * f
                rest = np.maximum(0.0, need - cap)
                on_spot = np.minimum(rest, share * need)
                row.append(fixed + float((on_spot * spot + (rest - on_spot) * od).sum()))
            out.append(row)
    return out


@pytest.mark.parametrize("seed", [6])  # a case where no plan is optimal in every scenario (regret > 0)
def test_robust_plan_equals_brute_force_min_max_regret(seed: int) -> None:
    rng = np.random.default_rng(seed)
    period, P = "month", PERIOD_HOURS["month"]
    hours = rng.uniform(0.3 * P, 1.8 * P, 4)
    demand = demand_of(period, {"G2": (list(hours), 0.4)})
    rows = [o for o in small_catalog() if o.gpu == "G2"]  # 2-GPU 1y/3y and 1-GPU 3y nodes
    offers = {"G2": offers_for(rows, ALLOW, 0.25)}
    table = np.array(costs_of_every_plan(rows, hours, 0.4, period))
    best = table.min(axis=0)
    expected = (table - best).max(axis=1).min()

    optima = {f: solve(demand.scaled(f), offers, "pro_rata") for f in SCENARIOS}
    assert [optima[f].tco_usd for f in SCENARIOS] == pytest.approx(list(best), rel=1e-7)
    per = {"G2": [class_costs(demand.scaled(f), offers, optima[f])["G2"] for f in SCENARIOS]}
    robust = solve(demand, offers, "pro_rata", scenarios=SCENARIOS, best=per,
                   start=least_regret_start(demand, offers, "pro_rata", optima, per))
    regret = max(evaluate(demand.scaled(f), offers, robust.reservations, "pro_rata").tco_usd - b
                 for f, b in zip(SCENARIOS, best))
    assert expected > 1.0  # the case is not one where a single plan is best everywhere
    assert regret == pytest.approx(expected, rel=1e-6, abs=1e-6)
