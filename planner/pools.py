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
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from planner.cluster import cluster_configs
from planner.errors import JobSpecError, PlannerError
from planner.job import JobSpec, when
from planner.overhead import SpotOverhead, spot_overhead
from planner.transfer import Transfers
from planner.workload import WorkModel, workers
from pricing import learned as learned_store
from pricing.carbon import kg_co2e_per_node_hour
from pricing.catalog import Catalog, CatalogFilter, Offering
from pricing.clouds import notice_lead_s
from pricing.egress import Site
from pricing.pool import CLUSTER, Pool
from pricing.risk import RiskEstimate, estimate
from pricing.spot_model import CapacityWait, capacity_wait

FALLBACK_KG_PER_KWH = 0.475
"""World-average grid intensity (IEA 2019 figure used by Cloud Carbon Footprint docs) for regions we have no factor for."""


@dataclass(frozen=True, slots=True)
class Config:
    """One way to run the whole job for some hours: ``nodes`` of ``pool``.

    Prices, the term and its length come from the pool; what needed the catalog row
    (speed, risk, carbon, the price's date) was worked out when the configuration was built."""

    pool: Pool
    nodes: int
    raw_rate: float  # work units per failure-free hour
    rate: float  # work units per expected wall hour (overheads included)
    p90_factor: float  # P90 wall hours per expected wall hour
    kg_per_hour: float
    as_of: dt.date | None = None  # date of the price this configuration rests on
    overhead: SpotOverhead | None = None
    carbon_estimated: bool = False
    # Data gravity (planner.transfer): staging the dataset into this pool's region, once per
    # region a plan uses (no node-hours); loading a checkpoint stored elsewhere on entering
    # the phase (``entry_*``: a later phase; ``start_*``: the first phase of a re-plan), on
    # running nodes; egress per expected wall hour (streamed data, restarts' checkpoint loads).
    risk: RiskEstimate | None = None  # spot: the interruption rate used and where it comes from
    stage_usd: float = 0.0
    stage_hours: float = 0.0
    entry_usd: float = 0.0
    entry_hours: float = 0.0
    start_usd: float = 0.0
    start_hours: float = 0.0
    data_usd_per_hour: float = 0.0
    ckpt_usd_per_hour: float = 0.0
    # Unbilled waits, for spot capacity (pricing.spot_model) or a cluster's queue (planner.cluster):
    # at the phase's launch (expected, P90) and after its losses, per billed wall hour (expected,
    # P90 over the whole job on this configuration).
    launch_wait_hours: float = 0.0
    launch_wait_p90_hours: float = 0.0
    wait_per_hour: float = 0.0
    wait_p90_per_hour: float = 0.0
    capacity: CapacityWait | None = None

    @property
    def purchase(self) -> str:
        return self.pool.purchase

    @property
    def gpus(self) -> int:
        return self.nodes * self.pool.gpus_per_node

    @property
    def hourly_usd(self) -> float:
        """Marginal price of an hour, per node."""
        return self.pool.hourly_usd

    @property
    def fixed_usd(self) -> float:
        """Charged once when the configuration is used: a new reserved term for every node."""
        return self.pool.term_usd * self.nodes

    @property
    def max_hours(self) -> float | None:
        """How long the pool may run: the term's length, or until a held reservation ends."""
        return self.pool.term_hours

    @property
    def burn(self) -> float:
        return self.hourly_usd * self.nodes

    @property
    def family(self) -> tuple[str, str]:
        return self.pool.key

    @property
    def site(self) -> Site:
        return Site(self.pool.cloud, self.pool.region)

    @property
    def egress_per_hour(self) -> float:
        return self.data_usd_per_hour + self.ckpt_usd_per_hour

    @property
    def entry_cost(self) -> float:
        """Charged when the configuration is a later phase: the checkpoint's egress and its load on running nodes."""
        return self.entry_usd + self.burn * self.entry_hours

    @property
    def start_cost(self) -> float:
        """Charged when it is the first phase (non-zero in a re-plan that resumes from a remote checkpoint)."""
        return self.start_usd + self.burn * self.start_hours

    @property
    def transfer_group(self) -> tuple:
        """What configurations must share to be compared by dominance: their transfer charges, and
        their site when staging is paid once per site (phases in one region share one copy)."""
        shared = self.site if (self.stage_usd or self.stage_hours) else None
        return (shared, self.stage_usd, self.stage_hours, self.entry_usd, self.entry_hours, self.start_usd,
                self.start_hours)


@dataclass(slots=True)
class CandidateSet:
    configs: list[Config]
    considered: int
    pruned: int
    warnings: list[str] = field(default_factory=list)
    transfers: Transfers = field(default_factory=Transfers)


def catalog_filter(job: JobSpec, work: WorkModel) -> CatalogFilter:
    """The rows a job may run on: its clouds, regions, GPU types and the memory its model needs."""
    c = job.constraints
    return CatalogFilter(clouds=tuple(c.clouds), region_globs=tuple(c.regions), gpus=tuple(c.gpus),
                         min_gpu_memory_gb=work.min_gpu_memory_gb or None)


def check_gpu_names(job: JobSpec, catalog: Catalog, *, source: str = "job file") -> None:
    """Every GPU the job names (``[workload.throughput]``, ``constraints.gpus``) is one the
    catalog sells; a misspelt name would otherwise be silently ignored."""
    known = {g.lower() for g in catalog.gpus}
    named = [(f"workload.throughput.{g}", g) for g in job.workload.throughput]
    named += [(f"constraints.gpus[{i}]", g) for i, g in enumerate(job.constraints.gpus)]
    problems = [
        f"{key}: the catalog has no GPU {gpu!r}; its GPUs are {', '.join(catalog.gpus) or 'none'} "
        "(fix the name, or drop the entry)"
        for key, gpu in named if gpu.lower() not in known
    ]
    if problems:
        raise JobSpecError(source, problems)


def candidate_configs(
    job: JobSpec,
    catalog: Catalog,
    work: WorkModel,
    *,
    now: dt.datetime | None = None,
    interruption_rates: Mapping[str, float] | None = None,
    blocked: Collection[tuple[str, str]] = (),
    purchase: Collection[str] | None = None,
    max_nodes: int | None = None,
    objective: str | None = None,
    carbon_per_node_hour: Callable[[Offering], float | None] | None = None,
    prune: bool = True,
    transfers: Transfers | None = None,
    learned: Mapping[tuple[str, str, str], tuple[int, float]] | None = None,
) -> CandidateSet:
    """Every feasible configuration of the job on the catalog, dominated ones pruned.

    ``interruption_rates`` (per spot pool id) replace the catalog's estimate, pools whose
    :attr:`Pool.key` is in ``blocked`` are left out, ``purchase`` narrows the job's
    ``purchase.allow``, ``max_nodes`` replaces ``constraints.max_nodes`` and ``objective``
    (default: the job's) is the one the MILP will minimise, which decides what pruning keeps;
    ``transfers`` (default: none) prices reaching the data and the checkpoint from each pool;
    ``learned`` holds past runs' (preemptions, node-hours) per (cloud, region, type) (default: the
    store of :mod:`pricing.learned`); ``now`` (default: the system clock) is the moment a held
    reservation's remaining hours count from.
    """
    check_gpu_names(job, catalog)
    now = now or dt.datetime.now(dt.UTC)
    rates = interruption_rates or {}
    store_warnings: list[str] = []
    if learned is None:
        try:
            learned = learned_store.load()
        except learned_store.LearnedRatesError as exc:  # old evidence must not block a quote
            learned, store_warnings = {}, [f"past runs' interruption counts ignored: {exc}"]
    carbon_per_node_hour = carbon_per_node_hour or kg_co2e_per_node_hour
    allowed = {p for p in job.purchase.allow if purchase is None or p in purchase}
    offerings = catalog.filter(catalog_filter(job, work)).offerings
    warnings: list[str] = list(work.warnings) + store_warnings
    no_speed = sorted({o.gpu for o in offerings if work.speed(o.gpu) is None})
    if no_speed:
        warnings.append(f"no throughput figure for {', '.join(no_speed)}: those GPUs were not considered")

    transfers = transfers or Transfers()
    builder = _Builder(job, work, max_gpus=job.constraints.max_gpus or 10**9,
                       max_nodes=max_nodes or job.constraints.max_nodes, carbon=carbon_per_node_hour,
                       transfers=transfers)
    usable = [o for o in offerings if work.speed(o.gpu) is not None]
    pools: list[tuple[Pool, Offering]] = []
    if "spot" in allowed:
        pools += [(Pool.of(o, "spot"), o) for o in usable if o.spot]
    for o in _one_per_region(usable):
        for option in ("on_demand", "reserved_1y", "reserved_3y"):
            if option in allowed and o.price(option):
                pools.append((Pool.of(o, option), o))
    blocked = set(blocked)
    configs: list[Config] = []
    for pool, o in pools:
        if pool.key in blocked:
            continue
        risk = None
        if pool.purchase == "spot":
            risk = (RiskEstimate(rates[pool.id], "learned in this run") if rates.get(pool.id)
                    else estimate(o, learned=learned))
        configs += builder.configs(pool, o, risk)
    configs += _held_configs(job, work, catalog, now, builder, warnings)
    configs += cluster_configs(job, work, catalog, builder, warnings)
    considered = len(configs)
    carbon = (objective or job.objective.minimize) == "carbon"
    kept = prune_dominated(configs, carbon=carbon) if prune else configs
    return CandidateSet(kept, considered, considered - len(kept), warnings, transfers)


def _one_per_region(offerings: Iterable[Offering]) -> list[Offering]:
    """Zone rows collapsed to one per region: only spot is priced per zone."""
    best: dict[tuple[str, str, str], Offering] = {}
    for o in offerings:
        key = (o.cloud, o.region, o.instance_type)
        cur = best.get(key)
        if cur is None or (o.on_demand or math.inf) < (cur.on_demand or math.inf):
            best[key] = o
    return list(best.values())


@dataclass(frozen=True, slots=True)
class _Builder:
    """Configurations of one pool at every node count the job allows."""

    job: JobSpec
    work: WorkModel
    max_gpus: int
    max_nodes: int
    carbon: Callable[[Offering], float | None]
    transfers: Transfers = field(default_factory=Transfers)

    def configs(self, pool: Pool, offering: Offering, risk: RiskEstimate | None, *, max_nodes: int | None = None):
        out = []
        # Per pool, not per node count: a 128-node quote builds 50,000 configurations.
        kg = self.carbon(offering)
        estimated = kg is None
        if kg is None:
            kg = offering.gpus_per_node * 0.4 * FALLBACK_KG_PER_KWH  # 400 W per GPU when the power is unknown too
        site = Site(pool.cloud, pool.region)
        t = self.transfers
        spot = None
        if risk is not None:
            cw = capacity_wait(offering)
            spot = _SpotPool(risk.rate, notice_lead_s(pool.cloud) / 3600, cw,
                             cw.launch(self.job.overheads.capacity_patience_hours))
        charges = _Charges(*t.stage(site), *t.load(site), t.stream_usd_per_gb_total(site), t.write_usd(site))
        memory = self.work.memory
        for n in range(1, min(self.max_nodes, max_nodes or 10**9) + 1):
            if n * pool.gpus_per_node > self.max_gpus:
                break
            if memory is not None and not memory.fits(workers(self.job, pool.gpus_per_node, n),
                                                      workers(self.job, pool.gpus_per_node), offering.gpu_memory_gb):
                continue  # too few GPUs to shard the model states over (or TP does not divide the node)
            cfg = self._config(pool, offering, n, risk, spot, charges, kg, estimated)
            if cfg is not None:
                out.append(cfg)
        return out

    def _config(self, pool: Pool, o: Offering, n: int, estimated_risk: RiskEstimate | None, spot: _SpotPool | None,
                charges: _Charges, kg: float, estimated: bool) -> Config | None:
        job, work = self.job, self.work
        raw = work.rate(pool.gpu, workers(job, pool.gpus_per_node, n))
        ckpt_h = job.workload.checkpoint_gb / (job.overheads.checkpoint_write_gbps * n) / 3600.0
        overhead = None
        wall, p90 = 1.0, 1.0
        if spot is not None:
            overhead = spot_overhead(
                interruption_rate=spot.rate,
                nodes=n,
                checkpoint_hours=ckpt_h,
                # a restart reads the checkpoint back: from its store, when that is elsewhere
                restart_hours=job.overheads.restart_minutes / 60.0 + ckpt_h + charges.load_hours,
                notice_hours=spot.notice_hours,
                nominal_hours=work.work / raw,
            )
            if overhead is None:
                return None
            wall, p90 = overhead.wall_factor, overhead.p90_factor / overhead.wall_factor
        rate = raw / wall
        waits = {}
        if overhead is not None:
            whole = work.work / rate  # billed wall hours of the whole job on this configuration
            losses = spot.rate * n  # per billed wall hour
            loss_mean, loss_p90 = spot.capacity.after_losses(losses * whole, job.overheads.capacity_patience_hours)
            waits = dict(launch_wait_hours=spot.launch[0], launch_wait_p90_hours=spot.launch[1],
                         wait_per_hour=loss_mean / whole if whole else 0.0,
                         wait_p90_per_hour=loss_p90 / whole if whole else 0.0, capacity=spot.capacity)
        # Streamed reads are paid per unit of work done here; each expected restart reloads the checkpoint,
        # and every checkpoint written to a store in another region or cloud leaves this one.
        data_ph = charges.stream_usd_per_gb * rate / work.work if work.work > 0 else 0.0
        ckpt_ph = 0.0
        load_usd, load_h = charges.load_usd, charges.load_hours
        if overhead is not None:
            writes = spot.rate * n if math.isinf(overhead.interval_hours) else 1.0 / (overhead.interval_hours * wall)
            ckpt_ph = load_usd * spot.rate * n + charges.write_usd * writes
        resume = self.transfers.resume
        return Config(pool=pool, nodes=n, raw_rate=raw, rate=rate, p90_factor=p90, kg_per_hour=kg * n,
                      as_of=o.as_of, overhead=overhead, carbon_estimated=estimated, risk=estimated_risk,
                      stage_usd=charges.stage_usd, stage_hours=charges.stage_hours, entry_usd=load_usd,
                      entry_hours=load_h, start_usd=load_usd if resume else 0.0, start_hours=load_h if resume else 0.0,
                      data_usd_per_hour=data_ph, ckpt_usd_per_hour=ckpt_ph, **waits)


class _SpotPool(NamedTuple):
    """What a spot pool's configurations share, worked out once per pool."""

    rate: float  # interruptions per node-hour
    notice_hours: float
    capacity: CapacityWait
    launch: tuple[float, float]  # expected and P90 wait for capacity at a launch


class _Charges(NamedTuple):
    """A pool's data-gravity charges (planner.transfer), the same at every node count."""

    stage_usd: float
    stage_hours: float
    load_usd: float
    load_hours: float
    stream_usd_per_gb: float
    write_usd: float


def _held_configs(job, work, catalog, now: dt.datetime, builder: _Builder, warnings) -> list[Config]:
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
        hours_left = (held.usable_until - now).total_seconds() / 3600  # from this moment, not from midnight
        if hours_left <= 0:
            warnings.append(f"purchase.held[{i}]: {held.ended()}; not used")
            continue
        if not held.started(now):
            assert held.starts_at is not None
            warnings.append(f"purchase.held[{i}]: starts {when(held.starts_at)}; not in this plan (a run re-plans "
                            "then and moves onto it where that costs less)")
            continue
        pool = Pool.held(o, hours_left=hours_left, reservation=held.reservation_id)
        out += builder.configs(pool, o, None, max_nodes=held.count)
    return out


def prune_dominated(configs: list[Config], *, carbon: bool = False) -> list[Config]:
    """Drop configurations another one beats on every traded-off quantity (see module doc).

    Configurations are compared only with those that pay the same per-site transfer charges
    (one group without data gravity): a lower rate elsewhere may not beat a free dataset here."""
    groups: dict[tuple, list[Config]] = {}
    for c in configs:
        groups.setdefault(c.transfer_group, []).append(c)
    if len(groups) == 1:
        return _prune_group(configs, carbon=carbon)
    kept = [k for members in groups.values() for k in _prune_group(members, carbon=carbon)]
    return _prune_staged(kept, carbon=carbon)


def _criteria(configs: list[Config], carbon: bool) -> np.ndarray:
    rows = []
    for c in configs:
        burn = c.pool.hourly_usd * c.nodes
        rows.append((
            (burn + (c.data_usd_per_hour + c.ckpt_usd_per_hour)) / c.rate,  # burn + egress_per_hour
            (c.p90_factor + c.wait_p90_per_hour) / c.rate,
            (1.0 + c.wait_per_hour) / c.rate,
            burn,
            # once per phase: the wait for capacity at its launch
            c.launch_wait_hours,
            c.launch_wait_p90_hours,
            *((c.kg_per_hour / c.rate,) if carbon else ()),
        ))
    return np.array(rows, dtype=float).reshape(len(configs), 7 if carbon else 6)  # configs x criteria


def _prune_staged(configs: list[Config], *, carbon: bool) -> list[Config]:
    """Drop a configuration that pays for staging the data when one that needs no copy beats it.

    Replacing it by the stage-free one never adds a copy, so no plan gets worse; against another
    staged site that is not so (phases in one region share their copy), hence the groups above."""
    def loads(c: Config) -> tuple[float, ...]:
        return (c.entry_usd, c.entry_hours, c.start_usd, c.start_hours)

    plain = [c for c in configs if _plain(c)]
    free = [c for c in plain if not (c.stage_usd or c.stage_hours)]
    staged = [c for c in plain if c.stage_usd or c.stage_hours]
    if not free or not staged:
        return configs
    f, m = _criteria(free, carbon), _criteria(staged, carbon)
    fl, sl = np.array([loads(c) for c in free]), np.array([loads(c) for c in staged])
    eps = 1e-12
    # [staged, free]: the free configuration is at least as good on every criterion and every load
    better = np.all(f[None, :, :] <= m[:, None, :] + eps * np.abs(m[:, None, :]), axis=2)
    better &= np.all(fl[None, :, :] <= sl[:, None, :] + 1e-15, axis=2)
    beaten = better.any(axis=1)
    drop = {id(c) for c, b in zip(staged, beaten) if b}
    return [c for c in configs if id(c) not in drop]


def _plain(c: Config) -> bool:
    """Compared by dominance: no one-off charge, no cap on its hours, and not a team cluster
    (the plan takes it first, like held capacity, so a cloud pool cannot stand in for it)."""
    return c.fixed_usd == 0 and c.max_hours is None and c.purchase != CLUSTER


def _prune_group(configs: list[Config], *, carbon: bool) -> list[Config]:
    free = [c for c in configs if _plain(c)]
    rest = [c for c in configs if not _plain(c)]
    if len(free) < 2:
        return configs
    m = _criteria(free, carbon)
    keep = np.ones(len(free), dtype=bool)
    order = np.lexsort(m.T[::-1])  # best-first on the first criterion: dominators come early
    eps = 1e-12
    alive = np.arange(len(free))  # the configurations still kept: each dominator is compared with these only
    for idx in order:
        if not keep[idx]:
            continue
        row = m[idx]
        # at least as bad everywhere: dominated, or an exact duplicate (the first seen stays)
        beaten = np.all(m[alive] >= row - eps * np.abs(row), axis=1) & (alive != idx)
        keep[alive[beaten]] = False
        alive = alive[~beaten]
    return [c for c, k in zip(free, keep) if k] + rest
