"""Candidate configurations for the optimizer: pools (cloud, region/zone, instance type,
purchase option) times node counts, with their speed, price, risk and carbon, and the
pruning of configurations that can never be part of a best plan.

A configuration is *dominated* when another one is at least as good on every quantity
the MILP can trade off (cost per unit of work, P90 and expected time per unit of work,
hourly burn, carbon per unit of work) and strictly better on one; replacing it in any
plan never makes that plan worse, so dropping it keeps the optimum and shrinks the model.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field, replace

import numpy as np

from planner.errors import PlannerError
from planner.job import JobSpec
from planner.overhead import SpotOverhead, spot_overhead
from planner.workload import WorkModel
from pricing.carbon import kg_co2e_per_node_hour
from pricing.catalog import HOURS_PER_YEAR, Catalog, CatalogFilter, Offering
from pricing.clouds import notice_lead_s
from pricing.risk import interruption_rate as default_interruption_rate

HELD = "reserved_held"
TERM_YEARS = {"reserved_1y": 1, "reserved_3y": 3}
FALLBACK_KG_PER_KWH = 0.475
"""World-average grid intensity (IEA 2019 figure used by Cloud Carbon Footprint docs) for regions we have no factor for."""


@dataclass(frozen=True, slots=True)
class Config:
    """One way to run the whole job for some hours: ``nodes`` of ``offering`` bought as ``purchase``."""

    offering: Offering
    purchase: str
    nodes: int
    raw_rate: float  # work units per failure-free hour
    rate: float  # work units per expected wall hour (overheads included)
    hourly_usd: float  # per node
    fixed_usd: float  # charged once when the configuration is used (a new reserved term)
    max_hours: float | None  # held reservation ends / term length
    p90_factor: float  # P90 wall hours per expected wall hour
    kg_per_hour: float
    overhead: SpotOverhead | None = None
    carbon_estimated: bool = False

    @property
    def gpus(self) -> int:
        return self.nodes * self.offering.gpus_per_node

    @property
    def burn(self) -> float:
        return self.hourly_usd * self.nodes

    @property
    def family(self) -> tuple[str, str, str, str]:
        o = self.offering
        return (o.cloud, o.region, o.instance_type, self.purchase)

    def label(self) -> str:
        o = self.offering
        where = f"{o.region}/{o.zone}" if o.zone and self.purchase == "spot" else o.region
        return f"{self.nodes}x {o.instance_type} {self.purchase} {o.cloud}:{where}"


@dataclass(slots=True)
class CandidateSet:
    configs: list[Config]
    considered: int
    pruned: int
    warnings: list[str] = field(default_factory=list)


def candidate_configs(
    job: JobSpec,
    catalog: Catalog,
    work: WorkModel,
    *,
    today: dt.date | None = None,
    interruption_rate=None,
    carbon_per_node_hour=None,
    prune: bool = True,
) -> CandidateSet:
    """Every feasible configuration of the job on the catalog, dominated ones pruned."""
    today = today or dt.date.today()
    interruption_rate = interruption_rate or default_interruption_rate
    carbon_per_node_hour = carbon_per_node_hour or kg_co2e_per_node_hour
    c = job.constraints
    allowed = set(job.purchase.allow)
    flt = CatalogFilter(
        clouds=tuple(c.clouds), region_globs=tuple(c.regions), min_gpu_memory_gb=work.min_gpu_memory_gb or None
    )
    offerings = catalog.filter(flt).offerings
    warnings: list[str] = []
    no_speed = sorted({o.gpu for o in offerings if work.speed(o.gpu) is None})
    if no_speed:
        warnings.append(f"no throughput figure for {', '.join(no_speed)}: those GPUs were not considered")

    configs: list[Config] = []
    regional = _one_per_region(o for o in offerings if work.speed(o.gpu) is not None)
    max_gpus = c.max_gpus or 10**9
    for o in (o for o in offerings if work.speed(o.gpu) is not None):
        if "spot" in allowed and o.spot:
            configs += _configs(job, work, o, "spot", o.spot, max_gpus, interruption_rate, carbon_per_node_hour)
    for o in regional:
        if "on_demand" in allowed and o.on_demand:
            configs += _configs(job, work, o, "on_demand", o.on_demand, max_gpus, None, carbon_per_node_hour)
        for term in ("reserved_1y", "reserved_3y"):
            price = o.price(term)
            if term in allowed and price:
                configs += _configs(job, work, o, term, price, max_gpus, None, carbon_per_node_hour)
    configs += _held_configs(job, work, catalog, today, max_gpus, carbon_per_node_hour, warnings)
    considered = len(configs)
    kept = prune_dominated(configs, carbon=job.objective.minimize == "carbon") if prune else configs
    return CandidateSet(kept, considered, considered - len(kept), warnings)


def _one_per_region(offerings) -> list[Offering]:
    """Zone rows collapsed to one per region: only spot is priced per zone."""
    best: dict[tuple[str, str, str], Offering] = {}
    for o in offerings:
        key = (o.cloud, o.region, o.instance_type)
        cur = best.get(key)
        if cur is None or (o.on_demand or math.inf) < (cur.on_demand or math.inf):
            best[key] = o
    return list(best.values())


def _configs(job, work, offering, purchase, price, max_gpus, risk, carbon, *, max_nodes=None):
    speed = work.speed(offering.gpu)
    out = []
    limit = min(job.constraints.max_nodes, max_nodes or 10**9)
    for n in range(1, limit + 1):
        gpus = n * offering.gpus_per_node
        if gpus > max_gpus:
            break
        raw = gpus * speed * work.efficiency_per_doubling ** math.log2(gpus) * 3600.0
        cfg = _config(job, work, offering, purchase, price, n, raw, risk, carbon)
        if cfg is not None:
            out.append(cfg)
    return out


def _config(job, work, o, purchase, price, n, raw, risk, carbon):
    kg = carbon(o)
    estimated = kg is None
    if kg is None:
        kg = o.gpus_per_node * 0.4 * FALLBACK_KG_PER_KWH  # 400 W per GPU when the power is unknown too
    ckpt_h = job.workload.checkpoint_gb / (job.overheads.checkpoint_write_gbps * n) / 3600.0
    overhead = None
    wall, p90 = 1.0, 1.0
    if purchase == "spot":
        overhead = spot_overhead(
            interruption_rate=risk(o),
            nodes=n,
            checkpoint_hours=ckpt_h,
            restart_hours=job.overheads.restart_minutes / 60.0 + ckpt_h,
            notice_hours=notice_lead_s(o.cloud) / 3600,
            nominal_hours=work.work / raw,
        )
        if overhead is None:
            return None
        wall, p90 = overhead.wall_factor, overhead.p90_factor / overhead.wall_factor
    years = TERM_YEARS.get(purchase)
    return Config(
        offering=o,
        purchase=purchase,
        nodes=n,
        raw_rate=raw,
        rate=raw / wall,
        hourly_usd=0.0 if years else price,
        fixed_usd=price * HOURS_PER_YEAR * years * n if years else 0.0,
        max_hours=HOURS_PER_YEAR * years if years else None,
        p90_factor=p90,
        kg_per_hour=kg * n,
        overhead=overhead,
        carbon_estimated=estimated,
    )


def _held_configs(job, work, catalog, today, max_gpus, carbon, warnings) -> list[Config]:
    out: list[Config] = []
    for i, held in enumerate(job.purchase.held):
        rows = [
            o for o in catalog
            if (o.cloud, o.region, o.instance_type) == (held.cloud, held.region, held.instance_type)
        ]
        if not rows:
            raise PlannerError(
                f"purchase.held[{i}]: {held.instance_type} in {held.cloud}:{held.region} is not in the catalog; "
                "check the instance type and region spelling (`planner prices show`)"
            )
        o = rows[0]
        if work.speed(o.gpu) is None:
            warnings.append(f"purchase.held[{i}]: no throughput figure for {o.gpu}; reservation not used")
            continue
        hours_left = (held.until - today).days * 24.0
        if hours_left <= 0:
            warnings.append(f"purchase.held[{i}]: reservation ended on {held.until}; not used")
            continue
        for cfg in _configs(job, work, o, HELD, 0.0, max_gpus, None, carbon, max_nodes=held.count):
            out.append(replace(cfg, max_hours=hours_left))
    return out


def prune_dominated(configs: list[Config], *, carbon: bool = False) -> list[Config]:
    """Drop configurations another one beats on every traded-off quantity (see module doc)."""
    free = [c for c in configs if c.fixed_usd == 0 and c.max_hours is None]
    rest = [c for c in configs if not (c.fixed_usd == 0 and c.max_hours is None)]
    if len(free) < 2:
        return configs
    cols = [
        [c.burn / c.rate for c in free],
        [c.p90_factor / c.rate for c in free],
        [1.0 / c.rate for c in free],
        [c.burn for c in free],
    ]
    if carbon:
        cols.append([c.kg_per_hour / c.rate for c in free])
    m = np.array(cols).T  # configs x criteria
    keep = np.ones(len(free), dtype=bool)
    order = np.lexsort(m.T[::-1])  # best-first on the first criterion: dominators come early
    eps = 1e-12
    for idx in order:
        if not keep[idx]:
            continue
        row = m[idx]
        le = np.all(m >= row - eps * np.abs(row), axis=1)  # others at least as bad everywhere
        lt = np.any(m > row + eps * np.abs(row), axis=1)  # and strictly worse somewhere
        dominated = le & lt
        dominated[idx] = False
        keep &= ~dominated
        # exact duplicates: keep the first seen
        dup = le & ~lt
        dup[idx] = False
        keep &= ~dup
    return [c for c, k in zip(free, keep) if k] + rest
