"""An independent brute force of on-demand-only plans, to check the MILP against.

It re-derives every configuration straight from the catalog rows and the throughput
table (not through planner.pools), then tries every single configuration and every
ordered pair with the switch overhead, solving each pair's two-variable LP at the
endpoints of its feasible interval (the cost is linear in the split).

Data gravity is re-derived from the job's ``[data]`` and ``run.checkpoint_region`` and
the egress list prices (:mod:`pricing.egress`, the data): a dataset read once is copied
into each region a plan uses (time, no node-hours), one read every epoch is paid per
share of the work, and the second phase loads the checkpoint from its store.
"""

from __future__ import annotations

import fnmatch
import math

import numpy as np

from planner.job import JobSpec
from pricing.catalog import Catalog
from pricing.egress import Site, parse_site, transfer_hours, usd_per_gb
from pricing.throughput import load_throughput_table


def memory_need_gb(job: JobSpec, gpus: int) -> float | None:
    """GB per GPU by the rule of docs/quote.md ("Memory by parallelism"), written out again here;
    None when the job has no rule (no params_billions, or min_gpu_memory_gb overrides it)."""
    w = job.workload
    if w.params_billions is None or w.min_gpu_memory_gb:
        return None
    psi, t = w.params_billions * 1e9, w.tensor_parallel
    weights, grads, adam = (4, 4, 8) if w.precision == "fp32" else (2, 2, 12)
    ranks = gpus // t
    sharded = {"ddp": 0.0, "zero2": grads + adam, "zero3": weights + grads + adam,
               "fsdp": weights + grads + adam}[w.strategy]
    states = ((weights + grads + adam - sharded) + sharded / ranks) * psi / t
    if w.activation_gb is not None:
        act = w.activation_gb * 1e9
    else:
        layers = (psi / (12 * 128**2)) ** (1 / 3)  # params = 12 L h^2 with h = 128 L
        width = 128 * layers
        act = ((4 if w.precision == "fp32" else 2) * layers + 34) * w.micro_batch_tokens * width / t
    return (states + act) / 1e9 + 2.0


def on_demand_configs(job: JobSpec, catalog: Catalog, *, with_sites: bool = False):
    """(rate units/h, burn $/h) per (cloud, region, type, nodes), on-demand only (and the sites)."""
    table = load_throughput_table()
    w = job.workload
    info = table.model(w.model)
    eff = w.scaling.efficiency_per_doubling or info.efficiency_per_doubling
    min_mem = w.min_gpu_memory_gb or info.min_gpu_memory_gb
    if w.params_billions is not None and not w.min_gpu_memory_gb:
        min_mem = 0.0  # the rule decides per node count, below
    c = job.constraints
    cheapest: dict[tuple, tuple[float, int, float]] = {}
    mems: dict[tuple, float] = {}
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
        mems[key] = o.gpu_memory_gb
        if key not in cheapest or o.on_demand < cheapest[key][0]:
            cheapest[key] = (o.on_demand, o.gpus_per_node, m.per_gpu_per_second)
    rates, burns, sites = [], [], []
    for (cloud, region, itype), (price, gpn, speed) in cheapest.items():
        for n in range(1, c.max_nodes + 1):
            g = n * gpn
            if c.max_gpus and g > c.max_gpus:
                break
            need = None if gpn % w.tensor_parallel else memory_need_gb(job, g)
            if gpn % w.tensor_parallel and memory_need_gb(job, w.tensor_parallel) is not None:
                continue  # the rule's tensor parallelism stays within a node
            if need is not None and need > mems[(cloud, region, itype)] + 1e-9:
                continue
            rates.append(g * speed * eff ** math.log2(g) * 3600.0)
            burns.append(price * n)
            sites.append(Site(cloud, region))
    if with_sites:
        return np.array(rates), np.array(burns), sites
    return np.array(rates), np.array(burns)


def _gravity(job: JobSpec, sites: list[Site]):
    """Per configuration: staging (USD, hours), whole-job streaming USD, checkpoint load (USD, hours)."""
    n = len(sites)
    stage_c, stage_h, stream, load_c, load_h = (np.zeros(n) for _ in range(5))
    d = job.data
    gbit = d.transfer_gbps if d is not None else 1.0
    if d is not None:
        src = parse_site(d.location, d.region)
        for k, s in enumerate(sites):
            if d.read == "every_epoch":
                stream[k] = d.dataset_gb * d.epochs * usd_per_gb(src, s)
            elif s != src:
                stage_c[k] = d.dataset_gb * usd_per_gb(src, s)
                stage_h[k] = transfer_hours(d.dataset_gb, gbit)
    r = job.run
    if r.checkpoint_dir and "://" in r.checkpoint_dir and r.checkpoint_region and job.workload.checkpoint_gb:
        store = parse_site(r.checkpoint_dir, r.checkpoint_region)
        for k, s in enumerate(sites):
            if s != store:
                load_c[k] = job.workload.checkpoint_gb * usd_per_gb(store, s)
                load_h[k] = transfer_hours(job.workload.checkpoint_gb, gbit)
    return stage_c, stage_h, stream, load_c, load_h


def brute_force_cost(job: JobSpec, catalog: Catalog) -> float | None:
    """Cheapest expected cost of any one- or two-phase on-demand plan, or None."""
    return brute_force_costs(job, catalog)[0]


def brute_force_costs(job: JobSpec, catalog: Catalog, *,
                      stop_reserve_hours: float = 0.0) -> tuple[float | None, float | None]:
    """Cheapest expected cost of any one- or two-phase on-demand plan, and of any one-phase plan;
    with ``stop_reserve_hours`` the budget must also cover that many hours of the dearer phase's burn."""
    rates, burns, sites = on_demand_configs(job, catalog, with_sites=True)
    if len(rates) == 0:
        return None, None
    stage_c, stage_h, stream, load_c, load_h = _gravity(job, sites)
    site_id = np.array([sorted(set(sites)).index(s) for s in sites])
    W = job.workload.amount
    R = job.overheads.restart_minutes / 60.0
    D = job.constraints.deadline_hours or math.inf
    B = job.constraints.budget_usd or math.inf
    best = math.inf
    hours = W / rates
    cost = hours * burns + stream + stage_c
    ok = (hours + stage_h <= D * (1 + 1e-9)) & (cost + stop_reserve_hours * burns <= B * (1 + 1e-9))
    if ok.any():
        best = cost[ok].min()
    single = None if math.isinf(best) else float(best)
    # Ordered pairs: phase i first (no switch), then j (pays R and the checkpoint load at its burn).
    # x = hours on i in [0, W/r_i]; hours on j = (W - r_i x) / r_j.
    for i in range(len(rates)):
        ri, bi = rates[i], burns[i]
        rj, bj = rates, burns
        hi_x = W / ri
        # A second region needs its own copy of the data; the same region shares the first one.
        other = site_id != site_id[i]
        stage_cost = stage_c[i] + np.where(other, stage_c, 0.0)
        stage_time = stage_h[i] + np.where(other, stage_h, 0.0)
        entry = load_c + bj * load_h
        # time(x) = a_t x + c_t ; cost(x) = a_c x + c_c, streaming paid by each phase's share of the work
        a_t, c_t = 1 - ri / rj, W / rj + R + load_h + stage_time
        a_c = bi - bj * ri / rj + (stream[i] - stream) * ri / W
        c_c = bj * W / rj + bj * R + stream + entry + stage_cost
        lo = np.zeros_like(rj)
        hi = np.full_like(rj, hi_x)
        budget = B - stop_reserve_hours * np.maximum(bi, bj)
        for a, c0, limit in ((a_t, c_t, D), (a_c, c_c, budget)):
            if np.all(np.isinf(limit)):
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
            c = a_c * xs + c_c
            both = feasible & (xs > 1e-12) & (xs < hi_x * (1 - 1e-12))
            if both.any():
                best = min(best, c[both].min())
    return (None if math.isinf(best) else float(best)), single
