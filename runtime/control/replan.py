"""Re-planning after a preemption: the planner's MILP on what is left of the job.

The controller hands over what it has learned and :func:`planner.plan.plan` solves the
job again, with all of it as arguments (the job and the catalog stay as they are):

* the work, budget and deadline that remain (the restart about to be paid is taken off
  the deadline first);
* the throughput it measured, blended with the table's (:func:`planner.workload.blend_rate`:
  a few steps barely move it, a long stretch replaces it); the measured GPU gets the
  blended per-GPU speed and every other GPU is scaled by the same blended/table ratio
  (the table's relative speeds are kept, its absolute level is corrected);
* pools on cool-down: their spot capacity is blocked until the cool-down ends
  (on-demand of the same type and region stays available);
* raised interruption estimates for pools that were preempted (:func:`raised_rate`);
* optionally, the purchase options the switching policy allows (on-demand only once
  the deadline leaves no room for another spot loss).

When no plan meets the deadline any more, :func:`replan_or_late` falls back to the
fastest plan within the budget and says by how much the deadline will be missed.

A timeline, with a cool-down of 30 min::

    t=0     plan: 2x g4dn.xlarge spot aws:us-east-1/use1-az1
    t=1.2h  preempted at step 540 of 1000; measured 0.11 steps/s/GPU over 540 steps (table: 0.10)
    t=1.2h  re-plan: use1-az1 spot blocked until t=1.7h, its rate 0.54/h -> 1.31/h,
            T4 speed 0.107 (blended), 460 steps, $3.20 and 2.8 h left
            -> 2x g4dn.xlarge spot aws:us-east-1/use1-az2
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from planner.job import JobSpec
from planner.milp import Limits, Solution
from planner.plan import Planned, plan
from planner.policy import ON_DEMAND, REPLAN_TARGET, Decision, Policy, PolicyMemory, PolicyState
from planner.pools import catalog_filter
from planner.quote import PlanView, make_quote, view
from planner.workload import WorkModel, blend_rate, work_model, workers
from pricing import learned, risk
from pricing.catalog import Catalog
from pricing.egress import Site
from pricing.pool import Pool

__all__ = [
    "Measured",
    "ReplanRequest",
    "ReplanResult",
    "config_rate",
    "decide",
    "elsewhere_usd_per_hour",
    "first_plan",
    "measured_speeds",
    "pool_interruption_rate",
    "raised_rate",
    "relative_prices",
    "replan",
    "replan_or_late",
    "spot_interruption_rates",
    "within_cap",
]


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
    """Throughput the controller measured: ``units_per_hour`` of work (the job file's unit)
    on ``gpus`` GPUs of ``gpu``, over ``steps`` training steps."""

    gpu: str
    gpus: int
    units_per_hour: float
    steps: float


@dataclass(frozen=True, slots=True)
class ReplanRequest:
    """What is left and what was learned (hours are simulated hours).

    ``cooling`` holds spot pool ids (:attr:`Pool.id`) on cool-down, ``refused`` the
    :attr:`Pool.key` of other pools that refused a launch, ``rates`` learned
    interruption rates per pool id; ``allow_late=False`` asks :func:`replan_or_late` not
    to fall back to a plan that misses the deadline.  ``checkpoint_location`` is the region
    the last checkpoint is in (the object store's, or the pool's that wrote it to its
    disks): a next pool elsewhere pays its egress and load time; ``data_location`` replaces
    the job's ``[data]`` location (e.g. a copy the run already made)."""

    job: JobSpec
    catalog: Catalog
    work_left: float
    budget_left_usd: float | None
    hours_left: float | None
    restart_hours: float = 0.0
    measured: Measured | None = None
    cooling: frozenset[str] = frozenset()
    refused: frozenset[tuple[str, str]] = frozenset()
    rates: Mapping[str, float] = field(default_factory=dict)
    purchase: tuple[str, ...] | None = None
    allow_late: bool = True
    checkpoint_location: Site | None = None
    data_location: Site | None = None
    now: dt.datetime | None = None  # on the run's clock: held reservations' hours count from it (default: the system's)
    stop_reserve_hours: float = 0.0  # hours of a launch's burn the budget cap keeps back (planner.milp.Limits)


@dataclass(frozen=True, slots=True)
class ReplanResult:
    """The new plan and the pool and node count of its first phase (all ``None`` when
    nothing fits, ``reason`` saying why); ``late`` when the plan misses the deadline,
    ``note`` saying by how much."""

    plan: PlanView | None
    pool: Pool | None
    nodes: int | None
    reason: str = ""
    late: bool = False
    note: str = ""

    @classmethod
    def of(cls, planned: Planned, *, late: bool = False, note: str = "") -> ReplanResult:
        if planned.solution is None:
            raise ValueError("no solution to report")
        first = planned.solution.phases[0].config
        return cls(view(planned.solution), first.pool, first.nodes, late=late, note=note)

    @classmethod
    def none(cls, reason: str) -> ReplanResult:
        return cls(None, None, None, reason)


def measured_speeds(work: WorkModel, measured: Measured) -> dict[str, float]:
    """Per-GPU speeds (the work model's units per second) with the measurement blended in."""
    seen = work.per_gpu_speed(measured.units_per_hour * work.per_unit, measured.gpus)
    table = work.speed(measured.gpu)
    if not table:
        return {measured.gpu.lower(): seen}
    ratio = blend_rate(table, seen, measured.steps) / table
    return {gpu: value * ratio for gpu, value in work.speeds.items()}


def _unplannable(request: ReplanRequest) -> str | None:
    """Why nothing can be planned whatever the deadline, or None."""
    if request.work_left <= 0:
        return "no work left"
    if request.budget_left_usd is not None and request.budget_left_usd <= 0:
        return "the budget is spent"
    if request.purchase is not None and not set(request.purchase) & set(request.job.purchase.allow):
        return f"the job allows none of {', '.join(request.purchase)}"
    return None


def _solve(request: ReplanRequest, deadline_hours: float | None, objective: str | None = None) -> Planned:
    job = request.job
    speeds = measured_speeds(work_model(job), request.measured) if request.measured else None
    limits = Limits(deadline_hours=deadline_hours, budget_usd=request.budget_left_usd,
                    switch_hours=job.overheads.restart_minutes / 60.0,
                    stop_reserve_hours=request.stop_reserve_hours if request.budget_left_usd is not None else 0.0)
    blocked = {(pool_id, "spot") for pool_id in request.cooling} | request.refused
    return plan(job, request.catalog, limits=limits, work=request.work_left, blocked=blocked,
                interruption_rates=request.rates, speeds=speeds, purchase=request.purchase, objective=objective,
                data_location=request.data_location, checkpoint_location=request.checkpoint_location,
                resume=True, now=request.now)


def replan(request: ReplanRequest) -> ReplanResult:
    """Solve what is left of the job (see the module docstring)."""
    reason = _unplannable(request)
    if reason:
        return ReplanResult.none(reason)
    deadline = None
    if request.hours_left is not None:
        deadline = request.hours_left - request.restart_hours
        if deadline <= 0:
            return ReplanResult.none(f"the deadline leaves {request.hours_left:.2f} h, less than one restart")
    planned = _solve(request, deadline)
    if planned.solution is None:
        return ReplanResult.none(_why_not(request, deadline))
    return ReplanResult.of(planned)


def first_plan(job: JobSpec, catalog: Catalog, *, now: dt.datetime | None = None) -> ReplanResult:
    """The plan a run starts with: exactly what ``planner quote`` says for the job (at ``now``)."""
    quote = make_quote(job, catalog, top=0, frontier_points=0, now=now)
    if quote.plan is not None:
        first = quote.plan.solution.phases[0].config
        return ReplanResult(quote.plan, first.pool, first.nodes)
    inf = quote.infeasible
    why = "; ".join([r.message for r in inf.relaxations] or inf.reasons) if inf else "no candidate pool"
    return ReplanResult.none(f"the job cannot be planned: {why}")


def within_cap(solution: Solution, request: ReplanRequest) -> bool:
    """Whether the budget left covers ``solution``'s cost and the cap's stop reserve on its dearest phase
    (the row the re-plan's MILP holds plans to, :class:`planner.milp.Limits`)."""
    if request.budget_left_usd is None:
        return True
    reserve = request.stop_reserve_hours * max(p.config.burn for p in solution.phases)
    return solution.cost + reserve <= request.budget_left_usd * (1 + 1e-9)


def replan_or_late(request: ReplanRequest) -> ReplanResult:
    """:func:`replan`; when no plan meets the deadline, the fastest plan within the budget,
    marked ``late`` with a note on how late it will finish (unless ``allow_late`` is off).

    A job that can no longer meet its deadline is usually still worth finishing, and
    finishing it as early as the budget allows keeps the miss smallest.
    """
    result = replan(request)
    if result.plan is not None or not request.allow_late or request.hours_left is None:
        return result
    if _unplannable(request):
        return result
    planned = _solve(request, None, objective="time")
    if planned.solution is None:
        return result
    end = request.restart_hours + planned.solution.hours
    note = (f"the deadline will be missed: the fastest plan within the budget is expected to end in {end:.2f} h, "
            f"{end - request.hours_left:.2f} h after the deadline ({request.hours_left:.2f} h from now)")
    return ReplanResult.of(planned, late=True, note=note)


def _why_not(request: ReplanRequest, deadline_hours: float | None) -> str:
    parts = [f"{request.work_left:g} {request.job.workload.unit} left"]
    if deadline_hours is not None:
        parts.append(f"{deadline_hours:.2f} h to the deadline after a restart")
    if request.budget_left_usd is not None:
        parts.append(f"${request.budget_left_usd:,.2f} of budget" + (
            f" (the budget cap keeps {request.stop_reserve_hours * 60:.1f} min of a launch's cost back for its stop)"
            if request.stop_reserve_hours > 0 else ""))
    if request.cooling:
        parts.append(f"{len(request.cooling)} pool(s) cooling down")
    if request.refused:
        parts.append(f"{len(request.refused)} pool(s) without capacity")
    return "no plan fits: " + ", ".join(parts)


def config_rate(job: JobSpec, pool: Pool, nodes: int) -> float | None:
    """Work units (the job file's unit) per failure-free hour of ``nodes`` nodes of ``pool``
    from the job's throughput figures."""
    work = work_model(job)
    rate = work.rate(pool.gpu, workers(job, pool.gpus_per_node, nodes))
    return None if rate is None else rate / work.per_unit


def relative_prices(job: JobSpec, catalog: Catalog, cooling: frozenset[str]) -> tuple[dict[str, float], float]:
    """Spot pools the job could use now, and the cheapest on-demand, per unit of table speed.

    The switching policy ranks pools by price; dividing by speed makes a fast expensive
    GPU and a slow cheap one comparable.
    """
    work = work_model(job)
    spot: dict[str, float] = {}
    on_demand = math.inf
    for o in catalog.filter(catalog_filter(job, work)):
        speed = work.speed(o.gpu)
        if not speed:
            continue
        pool_id = Pool.of(o, "spot").id if o.spot else None
        if o.spot and "spot" in job.purchase.allow and pool_id not in cooling:
            spot[pool_id] = min(spot.get(pool_id, math.inf), o.spot / (speed * workers(job, o.gpus_per_node)))
        if o.on_demand and "on_demand" in job.purchase.allow:
            on_demand = min(on_demand, o.on_demand / (speed * workers(job, o.gpus_per_node)))
    return spot, on_demand


def elsewhere_usd_per_hour(job: JobSpec, catalog: Catalog, pool: Pool, nodes: int) -> float | None:
    """What an hour of the work of ``nodes`` nodes of ``pool`` costs the job on the cheapest paid capacity
    it may use instead: on-demand, or spot for a job that allows no on-demand (table speeds per GPU, as
    :func:`relative_prices` compares them). None when the job has no speed for ``pool``'s GPU or nothing
    else to run on."""
    speed = work_model(job).speed(pool.gpu)
    spot, on_demand = relative_prices(job, catalog, frozenset())
    per_speed = on_demand if math.isfinite(on_demand) else min(spot.values(), default=math.inf)
    if not speed or not math.isfinite(per_speed):
        return None
    return per_speed * speed * workers(job, pool.gpus_per_node, nodes)


def decide(
    policy: Policy, *, job: JobSpec, catalog: Catalog, elapsed_hours: float, work_done: float, work_total: float,
    rate_per_hour: float, cooling: frozenset[str], preempted: str | None, memory: PolicyMemory,
    tick_hours: float = 1 / 60,
) -> Decision:
    """Where to run next: the switching policy's answer, except that a job never idles waiting for spot
    when it does not buy spot, or when capacity it already has is there to use: a team cluster
    (``[[purchase.cluster]]``, whenever its queue lets it) or held nodes (``[[purchase.held]]``, at no
    marginal cost). The MILP then re-plans over them and the cloud at once."""
    decision = _policy_decision(
        policy, job=job, catalog=catalog, elapsed_hours=elapsed_hours, work_done=work_done, work_total=work_total,
        rate_per_hour=rate_per_hour, cooling=cooling, preempted=preempted, memory=memory, tick_hours=tick_hours)
    if decision.target is None and (why := _no_wait(job)) is not None:
        return Decision(REPLAN_TARGET, f"{decision.reason}; but {why}: re-plan now", decision.memory)
    return decision


def _no_wait(job: JobSpec) -> str | None:
    """Why waiting for spot cannot pay for ``job``, or None when it may."""
    if "spot" not in job.purchase.allow:
        return "the job does not buy spot"
    if job.purchase.cluster:
        return "the team's cluster needs no wait"
    if job.purchase.held:
        return "its held nodes need no wait"
    return None


def _policy_decision(
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
        memory=memory, interruption_rates=spot_interruption_rates(catalog, prices),
    )
    return policy.decide(state)


def spot_interruption_rates(catalog: Catalog, pools: Mapping[str, float]) -> dict[str, float]:
    """Interruptions per running hour of each spot pool in ``pools`` (catalog, advisor bucket,
    trace or cloud default, and what past runs taught: :func:`pricing.risk.estimate`)."""
    try:
        past = learned.load()
    except learned.LearnedRatesError:  # old evidence must not block a decision (the quote warns)
        past = {}
    rates: dict[str, float] = {}
    for o in catalog:
        pool = Pool.of(o, "spot") if o.spot else None
        if pool is not None and pool.id in pools and pool.id not in rates:
            rates[pool.id] = risk.estimate(o, learned=past).rate
    return rates


def pool_interruption_rate(catalog: Catalog, pool: Pool) -> float | None:
    """The catalog's interruption rate for ``pool`` (None when the catalog lacks it)."""
    for o in catalog:
        if (o.cloud, o.region, o.instance_type) == (pool.cloud, pool.region, pool.instance_type) and (
            pool.zone is None or o.zone == pool.zone
        ):
            return risk.interruption_rate(o)
    return None
