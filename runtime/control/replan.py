"""Re-planning after a preemption: the planner's MILP on what is left of the job.

The controller hands over what it has learned and the planner solves the job again:

* the work, budget and deadline that remain (the restart about to be paid is taken off
  the deadline first);
* the throughput it measured, in place of the table's: the measured GPU gets its
  measured per-GPU speed and every other GPU is scaled by the same measured/table
  ratio (the table's relative speeds are kept, its absolute level is corrected);
* pools on cool-down: their spot capacity is left out of the catalog until the
  cool-down ends (on-demand of the same type and region stays available);
* raised interruption estimates for pools that were preempted (:func:`raised_rate`);
* optionally, the purchase options the switching policy allows (on-demand only once
  the deadline leaves no room for another spot loss).

A timeline, with a cool-down of 30 min::

    t=0     plan: 2x g4dn.xlarge spot aws:us-east-1/use1-az1
    t=1.2h  preempted at step 540 of 1000; measured 0.11 steps/s/GPU (table: 0.10)
    t=1.2h  re-plan: use1-az1 spot unavailable until t=1.7h, its rate 0.54/h -> 1.31/h,
            T4 speed 0.11, 460 steps, $3.20 and 2.8 h left
            -> 2x g4dn.xlarge spot aws:us-east-1/use1-az2
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from planner.job import JobSpec
from planner.milp import solve
from planner.policy import ON_DEMAND, Decision, Policy, PolicyMemory, PolicyState
from planner.pools import Config, candidate_configs
from planner.quote import PlanView, limits_for, make_quote, view
from planner.workload import work_model
from pricing import risk
from pricing.catalog import Catalog, CatalogFilter, Offering, with_prices
from pricing.pool import Pool

__all__ = [
    "Measured",
    "ReplanRequest",
    "ReplanResult",
    "config_rate",
    "decide",
    "first_plan",
    "measured_speeds",
    "offering_pool_id",
    "pool_from_config",
    "pool_interruption_rate",
    "raised_rate",
    "relative_prices",
    "replan",
    "replan_or_late",
]


def offering_pool_id(offering: Offering, purchase: str) -> str:
    """The id a :class:`Pool` of this offering would have (zones count for spot only)."""
    zone = offering.zone if purchase == "spot" else None
    where = f"{offering.region}/{zone}" if zone else offering.region
    return f"{offering.cloud}:{where}:{offering.instance_type}"


def pool_from_config(config: Config) -> Pool:
    """The pool a plan phase runs on (its node count is ``config.nodes``)."""
    o = config.offering
    return Pool(
        cloud=o.cloud, region=o.region, zone=o.zone if config.purchase == "spot" else None,
        instance_type=o.instance_type, gpu=o.gpu, gpus_per_node=o.gpus_per_node, purchase=config.purchase,
        hourly_usd=config.hourly_usd,
    )


def raised_rate(prior_rate: float, *, preemptions: int, exposed_hours: float) -> float:
    """A pool's interruption rate after seeing ``preemptions`` in ``exposed_hours``.

    The prior counts as one interruption in ``1/prior_rate`` hours (a Gamma(1, 1/rate)
    prior on a Poisson rate); the posterior mean never falls below the prior, since one
    quiet stretch does not make a pool safer than the cloud says it is.
    """
    prior_rate = max(prior_rate, 1e-6)
    posterior = (1 + preemptions) / (1 / prior_rate + max(exposed_hours, 0.0))
    return max(prior_rate, posterior)


@dataclass(frozen=True, slots=True)
class Measured:
    """Throughput the controller measured: ``units_per_hour`` of work on ``gpus`` GPUs of ``gpu``."""

    gpu: str
    gpus: int
    units_per_hour: float


@dataclass(frozen=True, slots=True)
class ReplanRequest:
    """What is left and what was learned (hours are simulated hours)."""

    job: JobSpec
    catalog: Catalog
    work_left: float
    budget_left_usd: float | None
    hours_left: float | None
    restart_hours: float = 0.0
    measured: Measured | None = None
    cooling: frozenset[str] = frozenset()
    rates: Mapping[str, float] = field(default_factory=dict)
    purchase: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ReplanResult:
    """The new plan (``None`` when nothing fits, with ``reason`` saying why) and the job it solved."""

    plan: PlanView | None
    job: JobSpec | None
    reason: str = ""
    late: bool = False
    note: str = ""

    @property
    def pool(self) -> Pool | None:
        return pool_from_config(self.plan.solution.phases[0].config) if self.plan else None

    @property
    def nodes(self) -> int | None:
        return self.plan.solution.phases[0].config.nodes if self.plan else None


def measured_speeds(job: JobSpec, measured: Measured) -> dict[str, float]:
    """Per-GPU speeds (work units per second) with the measurement in place of the table's."""
    work = work_model(job)
    efficiency = work.efficiency_per_doubling ** math.log2(max(measured.gpus, 1))
    speed = measured.units_per_hour / 3600.0 / (measured.gpus * efficiency)
    table = work.speed(measured.gpu)
    ratio = speed / table if table else 1.0
    speeds = {gpu: value * ratio for gpu, value in work.speeds.items()}
    speeds[measured.gpu.lower()] = speed
    return speeds


def _adjusted_job(request: ReplanRequest) -> JobSpec:
    job = request.job
    workload = job.model_dump()["workload"]
    workload[job.workload.unit] = request.work_left
    if request.measured is not None:
        workload["throughput"] = measured_speeds(job, request.measured)
    constraints: dict[str, float | None] = {}
    if request.hours_left is not None:
        constraints["deadline_hours"] = request.hours_left - request.restart_hours
    if request.budget_left_usd is not None:
        constraints["budget_usd"] = request.budget_left_usd
    changes: dict[str, object] = {"workload": workload, "constraints": constraints}
    if request.purchase is not None:
        changes["purchase"] = {"allow": [p for p in request.purchase if p in job.purchase.allow]}
    return job.with_changes(**changes)


def replan(request: ReplanRequest) -> ReplanResult:
    """Solve what is left of the job (see the module docstring)."""
    if request.work_left <= 0:
        return ReplanResult(None, None, "no work left")
    if request.hours_left is not None and request.hours_left - request.restart_hours <= 0:
        return ReplanResult(None, None, f"the deadline leaves {request.hours_left:.2f} h, less than one restart")
    if request.budget_left_usd is not None and request.budget_left_usd <= 0:
        return ReplanResult(None, None, "the budget is spent")
    if request.purchase is not None and not set(request.purchase) & set(request.job.purchase.allow):
        return ReplanResult(None, None, f"the job allows none of {', '.join(request.purchase)}")
    job = _adjusted_job(request)
    catalog = request.catalog.with_rows(
        with_prices(o, spot=None) if offering_pool_id(o, "spot") in request.cooling else o
        for o in request.catalog
    )

    def rate(offering: Offering) -> float:
        return request.rates.get(offering_pool_id(offering, "spot")) or risk.interruption_rate(offering)

    work = work_model(job)
    candidates = candidate_configs(job, catalog, work, interruption_rate=rate)
    best = solve(candidates.configs, work.work, limits_for(job), job.objective.minimize)
    if best is None:
        return ReplanResult(None, job, _why_not(job, request))
    return ReplanResult(view(best), job)


def first_plan(job: JobSpec, catalog: Catalog) -> ReplanResult:
    """The plan a run starts with: exactly what ``planner quote`` says for the job."""
    quote = make_quote(job, catalog, top=0, frontier_points=0)
    if quote.plan is not None:
        return ReplanResult(quote.plan, job)
    inf = quote.infeasible
    why = "; ".join([r.message for r in inf.relaxations] or inf.reasons) if inf else "no candidate pool"
    return ReplanResult(None, job, f"the job cannot be planned: {why}")


def replan_or_late(request: ReplanRequest) -> ReplanResult:
    """:func:`replan`; when only the deadline is in the way, the cheapest plan that ignores it.

    A job that can no longer meet its deadline is still worth finishing; the note says so.
    """
    result = replan(request)
    if result.plan is None and request.hours_left is not None and request.budget_left_usd != 0:
        late = replan(dataclasses.replace(request, hours_left=None))
        if late.plan is not None:
            return dataclasses.replace(
                late, late=True,
                note=f"the deadline can no longer be met ({result.reason}); finishing as cheaply as possible",
            )
    return result


def _why_not(job: JobSpec, request: ReplanRequest) -> str:
    parts = [f"{request.work_left:g} {job.workload.unit} left"]
    if job.constraints.deadline_hours is not None:
        parts.append(f"{job.constraints.deadline_hours:.2f} h to the deadline after a restart")
    if job.constraints.budget_usd is not None:
        parts.append(f"${job.constraints.budget_usd:,.2f} of budget")
    if request.cooling:
        parts.append(f"{len(request.cooling)} pool(s) cooling down")
    return "no plan fits: " + ", ".join(parts)


def config_rate(job: JobSpec, pool: Pool, nodes: int = 1) -> float | None:
    """Work units per failure-free hour of ``nodes`` of ``pool`` from the job's throughput figures."""
    work = work_model(job)
    speed = work.speed(pool.gpu)
    if speed is None:
        return None
    gpus = nodes * pool.gpus_per_node
    return gpus * speed * work.efficiency_per_doubling ** math.log2(gpus) * 3600.0


def relative_prices(job: JobSpec, catalog: Catalog, cooling: frozenset[str]) -> tuple[dict[str, float], float]:
    """Spot pools the job could use now, and the cheapest on-demand, per unit of table speed.

    The switching policy ranks pools by price; dividing by speed makes a fast expensive
    GPU and a slow cheap one comparable.
    """
    work = work_model(job)
    c = job.constraints
    flt = CatalogFilter(clouds=tuple(c.clouds), region_globs=tuple(c.regions),
                        min_gpu_memory_gb=work.min_gpu_memory_gb or None)
    spot: dict[str, float] = {}
    on_demand = math.inf
    for o in catalog.filter(flt):
        speed = work.speed(o.gpu)
        if not speed:
            continue
        pool_id = offering_pool_id(o, "spot")
        if o.spot and "spot" in job.purchase.allow and pool_id not in cooling:
            spot[pool_id] = min(spot.get(pool_id, math.inf), o.spot / (speed * o.gpus_per_node))
        if o.on_demand and "on_demand" in job.purchase.allow:
            on_demand = min(on_demand, o.on_demand / (speed * o.gpus_per_node))
    return spot, on_demand


def decide(
    policy: Policy, *, job: JobSpec, catalog: Catalog, elapsed_hours: float, work_done: float, work_total: float,
    rate_per_hour: float, cooling: frozenset[str], preempted: str | None, memory: PolicyMemory,
    tick_hours: float = 1 / 60,
) -> Decision:
    """Ask the switching policy where to run next (a spot pool id, on-demand, or wait).

    Work is measured in hours of the current pool (``rate_per_hour`` units an hour), as
    the policy's job length ``C`` is; without a deadline there is nothing to protect,
    so spot is used whenever the job allows it.
    """
    prices, on_demand_price = relative_prices(job, catalog, cooling)
    deadline = job.constraints.deadline_hours
    if deadline is None:
        if prices:
            best = min(prices, key=prices.__getitem__)
            return Decision(best, "no deadline: spot whenever it is available", memory)
        return Decision(ON_DEMAND, "no deadline and no spot pool available: on-demand", memory)
    if math.isinf(on_demand_price) and not prices:
        return Decision(None, "no spot pool available and on-demand is not allowed: wait", memory)
    state = PolicyState(
        elapsed_hours=elapsed_hours, work_done_hours=work_done / rate_per_hour,
        job_hours=work_total / rate_per_hour, deadline_hours=deadline,
        restart_hours=job.overheads.restart_minutes / 60.0, tick_hours=tick_hours, current=None,
        overhead_left_hours=0.0, spot_prices=prices, on_demand_price=on_demand_price, preempted=preempted,
        memory=memory,
    )
    return policy.decide(state)


def pool_interruption_rate(catalog: Catalog, pool: Pool) -> float | None:
    """The catalog's interruption rate for ``pool`` (None when the catalog lacks it)."""
    for o in catalog:
        if (o.cloud, o.region, o.instance_type) == (pool.cloud, pool.region, pool.instance_type) and (
            pool.zone is None or o.zone == pool.zone
        ):
            return risk.interruption_rate(o)
    return None
