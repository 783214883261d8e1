"""An independent brute force of on-demand-only plans, to check the MILP against.

It re-derives every configuration straight from the catalog rows and the throughput
table (not through planner.pools), then tries every single configuration and every
ordered pair with the switch overhead, solving each pair's two-variable LP at the
endpoints of its feasible interval (the cost is linear in the split).
"""

from __future__ import annotations

import fnmatch
import math

import numpy as np

from planner.job import JobSpec
from pricing.catalog import Catalog
from pricing.throughput import load_throughput_table


def on_demand_configs(job: JobSpec, catalog: Catalog):
    """(rate units/h, burn $/h) per (cloud, region, type, nodes), on-demand only."""
    table = load_throughput_table()
    w = job.workload
    info = table.model(w.model)
    eff = w.scaling.efficiency_per_doubling or info.efficiency_per_doubling
    min_mem = w.min_gpu_memory_gb or info.min_gpu_memory_gb
    c = job.constraints
    cheapest: dict[tuple, tuple[float, int, float]] = {}
    for o in catalog:
        if c.clouds and o.cloud not in c.clouds:
            continue
        if c.regions and not any(fnmatch.fnmatchcase(o.region, g) for g in c.regions):
            continue
        if o.gpu_memory_gb < min_mem - 1e-9 or not o.on_demand:
            continue
        m = table.per_gpu(info.name, o.gpu)
        if m is None:
            continue
        key = (o.cloud, o.region, o.instance_type)
        if key not in cheapest or o.on_demand < cheapest[key][0]:
            cheapest[key] = (o.on_demand, o.gpus_per_node, m.per_gpu_per_second)
    rates, burns = [], []
    for price, gpn, speed in cheapest.values():
        for n in range(1, c.max_nodes + 1):
            g = n * gpn
            if c.max_gpus and g > c.max_gpus:
                break
            rates.append(g * speed * eff ** math.log2(g) * 3600.0)
            burns.append(price * n)
    return np.array(rates), np.array(burns)


def brute_force_cost(job: JobSpec, catalog: Catalog) -> float | None:
    """Cheapest expected cost of any one- or two-phase on-demand plan, or None."""
    rates, burns = on_demand_configs(job, catalog)
    if len(rates) == 0:
        return None
    W = job.workload.amount
    R = job.overheads.restart_minutes / 60.0
    D = job.constraints.deadline_hours or math.inf
    B = job.constraints.budget_usd or math.inf
    best = math.inf
    hours = W / rates
    cost = hours * burns
    ok = (hours <= D * (1 + 1e-9)) & (cost <= B * (1 + 1e-9))
    if ok.any():
        best = cost[ok].min()
    # Ordered pairs: phase i first (no switch), then j (pays R at its burn).
    # x = hours on i in [0, W/r_i]; hours on j = (W - r_i x) / r_j.
    for i in range(len(rates)):
        ri, bi = rates[i], burns[i]
        rj, bj = rates, burns
        hi_x = W / ri
        # time(x) = x + (W - ri x)/rj + R = a_t x + c_t ; cost(x) = bi x + bj (W - ri x)/rj + bj R
        a_t, c_t = 1 - ri / rj, W / rj + R
        a_c, c_c = bi - bj * ri / rj, bj * W / rj + bj * R
        lo = np.zeros_like(rj)
        hi = np.full_like(rj, hi_x)
        for a, c0, limit in ((a_t, c_t, D), (a_c, c_c, B)):
            if math.isinf(limit):
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                bound = (limit - c0) / a
            hi = np.where(a > 0, np.minimum(hi, bound), hi)
            lo = np.where(a < 0, np.maximum(lo, bound), lo)
            lo = np.where((a == 0) & (c0 > limit), np.inf, lo)
        feasible = lo <= hi * (1 + 1e-12) + 1e-12
        feasible[i] = False  # the same configuration twice is the single case
        for x in (lo, hi):
            xs = np.clip(x, 0, hi_x)
            c = bi * xs + bj * (W - ri * xs) / rj + bj * R
            both = feasible & (xs > 1e-12) & (xs < hi_x * (1 - 1e-12))
            if both.any():
                best = min(best, c[both].min())
    return None if math.isinf(best) else float(best)
