"""The MILP equals an exhaustive search on small cases: 2 GPU classes, 8 periods, both terms, both rules."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from planner.capacity.demand import PERIOD_HOURS
from planner.capacity.model import solve
from planner.capacity.offers import TERMS, offers_for
from pricing.catalog import HOURS_PER_YEAR

from .helpers import demand_of, small_catalog

ALLOW = {"on_demand", "spot", "reserved_1y", "reserved_3y"}


def brute_force(rows, hours: np.ndarray, share: float, period: str, rule: str) -> float:
    """Cheapest cost over every multiset of purchases (option, start) small enough to matter.

    Every term here outlasts the 8-period horizon, so all reservations end with it and capacity
    never falls; a plan with total capacity >= peak + the largest node's period is never optimal
    (its last purchase serves nothing), which bounds the number of purchases.
    """
    P, T = PERIOD_HOURS[period], len(hours)
    items = [(o, term, s) for o in rows for term in TERMS if o.price(term) for s in range(T)]
    g_min, g_max = min(o.gpus_per_node for o in rows), max(o.gpus_per_node for o in rows)
    most = math.ceil((hours.max() + g_max * P) / (g_min * P))
    od = min(o.on_demand / o.gpus_per_node for o in rows)
    spot = min(o.spot / o.gpus_per_node for o in rows)
    best = math.inf
    for k in range(most + 1):
        for combo in itertools.combinations_with_replacement(range(len(items)), k):
            cap = np.zeros(T)
            fixed = 0.0
            for i in combo:
                o, term, s = items[i]
                years = TERMS[term]
                L = int(HOURS_PER_YEAR * years // P)
                assert L >= T
                cap[s:] += o.gpus_per_node * P
                term_usd = o.price(term) * HOURS_PER_YEAR * years
                fixed += term_usd if rule == "whole" else term_usd * (T - s) / L
            rest = np.maximum(0.0, hours - cap)
            on_spot = np.minimum(rest, share * hours) if spot < od else np.zeros(T)
            best = min(best, fixed + float((on_spot * spot + (rest - on_spot) * od).sum()))
    return best


@pytest.mark.parametrize("rule", ["pro_rata", "whole"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_milp_equals_brute_force(rule: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    period = "month"
    P = PERIOD_HOURS[period]
    catalog = small_catalog()
    series = {"G1": (list(rng.uniform(0, 2.2 * P, 8)), 0.3), "G2": (list(rng.uniform(0, 2.5 * P, 8)), 0.5)}
    demand = demand_of(period, series)
    offers = {c.name: offers_for([o for o in catalog if o.gpu == c.gpu], ALLOW, 0.25) for c in demand.classes}
    plan = solve(demand, offers, rule)
    expected = sum(brute_force([o for o in catalog if o.gpu == name], np.array(hours), share, period, rule)
                   for name, (hours, share) in series.items())
    assert plan.tco_usd == pytest.approx(expected, rel=1e-7)
