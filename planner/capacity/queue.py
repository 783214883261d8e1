"""Queue mode: schedule a queue of jobs onto held reservations and elastic spot/on-demand, slot by slot.

Time is cut into slots of ``slot_hours``.  In each slot a job runs on at most one configuration:
``n`` nodes of one pool (a held reservation, or an elastic spot or on-demand pool), as a DDP job
runs on one homogeneous pool at a time.  The throughput of a job on a configuration is Gavel's
*effective throughput* (Narayanan et al., OSDI'20): its own per-GPU speed on that GPU type
(pricing/throughput.py or the job's ``[workload.throughput]``), scaled by the DDP rule and, on spot,
net of the expected preemption loss (planner/pools.py builds the same configurations for
`planner quote`).

The MILP (HiGHS): ``z[j,c,t]`` (binary) says job j holds configuration c in slot t, ``u[j,c,t]``
in [0, z] is the share of the slot it runs (a job that finishes mid-slot releases its nodes), and

* each job gets its whole work done inside its window: ``sum r[j,c] * slot_hours * u >= work_j``
  over the slots that start at or after its submission and end by its deadline, less
  ``r[j,c] * restart_hours`` each time it starts on a configuration (``started >= z[t] - z[t-1]``;
  the job's ``[overheads] restart_minutes``: provisioning, loading and warm-up), so hopping between
  pools costs what it costs a real run;
* one configuration per job and slot: ``sum_c z[j,c,t] <= 1``;
* held capacity: ``sum n_c * z[j,c,t] <= count`` per reservation and slot;
* a job's budget, when it has one, bounds its own cost;
* minimise the elastic spend ``sum nodes * hourly * slot_hours * u`` (held nodes cost $0 an
  hour), then, by a tie-break of a tenth of a cent per slot index, the earlier slot.

A job that cannot finish in time even alone is named with what it lacks; when every job could
alone but not all together, the report names the jobs the held capacity cannot fit.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from planner.capacity.errors import NoOfferError
from planner.capacity.queue_spec import QueuedJob, QueueSpec
from planner.capacity.sparse_milp import SparseMilp
from planner.errors import PlannerError, SolverError
from planner.job import HeldReservation
from planner.pools import Config, candidate_configs, prune_dominated
from planner.workload import work_model
from pricing.catalog import Catalog
from pricing.pool import HELD, Pool

TIE_BREAK_USD = 1e-3
"""Per slot index and share of a slot: prefers the earlier of two slots that cost the same (a tenth of a
cent per slot; the schedule's costs leave it out).  The solve's absolute gap is set far below it."""


class QueueInfeasibleError(PlannerError):
    """The queue cannot be scheduled; the message names the job(s) and what would make it work."""


@dataclass(frozen=True, slots=True)
class Option:
    """A configuration a job may use in a slot: ``nodes`` of ``pool``, its effective rate and cost."""

    pool: Pool
    nodes: int
    units_per_hour: float  # effective throughput (spot: net of the expected preemption loss)
    usd_per_hour: float
    held: int | None = None  # index of the held reservation it draws on


@dataclass(frozen=True, slots=True)
class Segment:
    """Consecutive slots in which a job runs on the same configuration."""

    start_slot: int
    end_slot: int  # exclusive
    option: Option
    hours: float  # hours of running inside these slots (the last may be partial)
    work: float
    cost_usd: float


@dataclass(slots=True)
class JobSchedule:
    job: QueuedJob
    unit: str
    work: float
    segments: list[Segment] = field(default_factory=list)

    @property
    def cost_usd(self) -> float:
        return sum(s.cost_usd for s in self.segments)


@dataclass(slots=True)
class QueueSchedule:
    spec: QueueSpec
    jobs: list[JobSchedule]
    held_pools: list[Pool | None]

    @property
    def cost_usd(self) -> float:
        return sum(j.cost_usd for j in self.jobs)

    def nodes_per_slot(self) -> list[dict[tuple[str, str], int]]:
        """Per slot, the nodes running per (pool label, purchase)."""
        out: list[dict[tuple[str, str], int]] = [{} for _ in range(self.spec.horizon_slots)]
        for j in self.jobs:
            for s in j.segments:
                key = (s.option.pool.label(), s.option.pool.purchase)
                for t in range(s.start_slot, s.end_slot):
                    out[t][key] = out[t].get(key, 0) + s.option.nodes
        return out


def job_options(job: QueuedJob, spec: QueueSpec, catalog: Catalog, *, today: dt.date) -> list[Option]:
    """What ``job`` may run on: the held reservations and the undominated elastic configurations."""
    horizon_hours = spec.horizon_slots * spec.slot_hours
    until = today + dt.timedelta(days=math.ceil(horizon_hours / 24) + 1)
    held = tuple(HeldReservation(cloud=r.cloud, region=r.region, instance_type=r.instance_type, count=r.count,
                                 until=until) for r in spec.reservations)
    constraints = job.spec.constraints.model_copy(update={
        "clouds": job.spec.constraints.clouds or spec.constraints.clouds,
        "regions": job.spec.constraints.regions or spec.constraints.regions})
    purchase = job.spec.purchase.model_copy(update={"held": held})
    job_spec = job.spec.model_copy(update={"constraints": constraints, "purchase": purchase})
    elastic_allowed = set(job.spec.purchase.allow) & set(spec.allow)  # the job's own allow narrows the queue's
    work = work_model(job_spec)
    found = candidate_configs(job_spec, catalog, work, now=dt.datetime.combine(today, dt.time(), tzinfo=dt.UTC), prune=False,
                              purchase=elastic_allowed).configs
    elastic = prune_dominated([c for c in found if c.pool.purchase != HELD and c.pool.purchase in elastic_allowed])
    out = _pareto([_option(c) for c in elastic])
    for c in found:
        if c.pool.purchase == HELD:
            index = next(i for i, r in enumerate(spec.reservations)
                         if (r.cloud, r.region, r.instance_type) == (c.pool.cloud, c.pool.region, c.pool.instance_type))
            out.append(_option(c, index))
    return out


def _pareto(options: list[Option]) -> list[Option]:
    """The elastic options no other one beats on both throughput and price: capacity is unlimited, so
    only those two matter here (the quote's pruning also keeps trade-offs in risk and carbon)."""
    kept: list[Option] = []
    for o in sorted(options, key=lambda o: (-o.units_per_hour, o.usd_per_hour, o.pool.label(o.nodes))):
        if all(o.usd_per_hour < k.usd_per_hour for k in kept):
            kept.append(o)
    return kept


def _option(c: Config, held: int | None = None) -> Option:
    return Option(c.pool, c.nodes, c.rate, c.nodes * c.pool.hourly_usd, held)


def window(job: QueuedJob, spec: QueueSpec) -> range:
    """The slots job may run in: starting at or after its submission, ending by its deadline."""
    h = spec.slot_hours
    first = math.ceil(job.submit_hours / h - 1e-9)
    end = spec.horizon_slots
    if job.deadline_at_hours is not None:
        end = min(end, int(job.deadline_at_hours / h + 1e-9))
    return range(first, max(first, end))


def schedule(spec: QueueSpec, catalog: Catalog, *, today: dt.date | None = None,
             options: Sequence[Sequence[Option]] | None = None) -> QueueSchedule:
    """The cheapest schedule of the whole queue; raises :class:`QueueInfeasibleError` naming the job(s)."""
    today = today or dt.date.today()
    if options is None:
        options = [job_options(j, spec, catalog, today=today) for j in spec.jobs]
    works = []
    for job, opts in zip(spec.jobs, options):
        w = work_model(job.spec)
        works.append((w.unit, w.work))
        if not opts:
            raise NoOfferError(f"{job.source}: job {job.name!r}: nothing in the catalog runs it under its "
                               "[constraints] and the queue's [purchase] allow; widen clouds/regions/gpus")
    picked = _solve(spec, list(spec.jobs), options, [w for _, w in works])
    if picked is None:  # which job: one that cannot make it even alone, else the first that does not fit
        for i, job in enumerate(spec.jobs):
            if _solve(spec, [job], [options[i]], [works[i][1]]) is None:
                raise QueueInfeasibleError(_why_alone(spec, job, options[i], works[i]))
        raise QueueInfeasibleError(_why_together(spec, options, works))
    held_pools: list[Pool | None] = [None] * len(spec.reservations)
    out = []
    for i, (job, (unit, work)) in enumerate(zip(spec.jobs, works)):
        js = JobSchedule(job, unit, work, _segments(picked[i], options[i], spec.slot_hours, restart_hours(job)))
        for s in js.segments:
            if s.option.held is not None:
                held_pools[s.option.held] = s.option.pool
        out.append(js)
    return QueueSchedule(spec, out, held_pools)


def _solve(spec: QueueSpec, jobs: Sequence[QueuedJob], options: Sequence[Sequence[Option]],
           works: Sequence[float]) -> list[dict[int, dict[int, float]]] | None:
    """Per job, {slot: {option index: share of the slot}}; None when infeasible."""
    h = spec.slot_hours
    milp = SparseMilp()
    held_rows: dict[tuple[int, int], dict[int, float]] = {}
    cols: list[list[tuple[int, int, int, int]]] = []  # per job: (slot, option, z, u)
    for job, opts, work in zip(jobs, options, works):
        mine = []
        work_row: dict[int, float] = {}
        cost_row: dict[int, float] = {}
        restart_h = restart_hours(job)
        previous: dict[int, int] = {}  # option -> its z in the slot before
        for t in window(job, spec):
            one: dict[int, float] = {}
            current: dict[int, int] = {}
            for k, o in enumerate(opts):
                if o.held is not None and not _held_in(spec, o.held, t):
                    continue
                z = milp.column(0.0, 0, 1, integer=True)
                u = milp.column(o.usd_per_hour * h + TIE_BREAK_USD * t, 0, 1)
                milp.row({u: 1.0, z: -1.0}, upper=0.0)
                one[z] = 1.0
                work_row[u] = o.units_per_hour * h
                if restart_h > 0:
                    # started >= z[t] - z[t-1]: a configuration entered in this slot first loses its restart
                    started = milp.column(0.0, 0, 1)
                    row = {started: 1.0, z: -1.0}
                    if k in previous:
                        row[previous[k]] = 1.0
                    milp.row(row, lower=0.0)
                    work_row[started] = -o.units_per_hour * restart_h
                current[k] = z
                cost_row[u] = o.usd_per_hour * h
                if o.held is not None:
                    held_rows.setdefault((o.held, t), {})[z] = float(o.nodes)
                mine.append((t, k, z, u))
            if one:
                milp.row(one, upper=1.0)
            previous = current
        if not work_row:
            return None
        milp.row(work_row, lower=work)
        budget = job.spec.constraints.budget_usd
        if budget is not None and cost_row:
            milp.row(cost_row, upper=budget)
        cols.append(mine)
    for (r, _), row in held_rows.items():
        milp.row(row, upper=float(spec.reservations[r].count))
    try:
        values = milp.solve(gap=1e-6, abs_gap=TIE_BREAK_USD / 100)
    except SolverError:
        return None
    out = []
    for mine in cols:
        plan: dict[int, dict[int, float]] = {}
        for t, k, z, u in mine:
            if values[z] > 0.5 and values[u] > 1e-9:
                plan.setdefault(t, {})[k] = min(1.0, float(values[u]))
        out.append(plan)
    return out


def restart_hours(job: QueuedJob) -> float:
    """Hours a job loses each time it starts on a configuration (provisioning, loading, warm-up):
    its ``[overheads] restart_minutes``, as `planner quote` charges a spot restart."""
    return job.spec.overheads.restart_minutes / 60.0


def _held_in(spec: QueueSpec, index: int, t: int) -> bool:
    r = spec.reservations[index]
    return r.from_slot <= t < (r.until_slot if r.until_slot is not None else spec.horizon_slots)


def _segments(plan: dict[int, dict[int, float]], opts: Sequence[Option], h: float, restart_h: float) -> list[Segment]:
    """Consecutive slots on one configuration as one segment; its work is net of the restart it starts with."""
    segments: list[Segment] = []
    for t in sorted(plan):
        (k, share), = plan[t].items()
        o = opts[k]
        hours, work, cost = share * h, share * h * o.units_per_hour, share * h * o.usd_per_hour
        last = segments[-1] if segments else None
        if last is not None and last.end_slot == t and last.option == o:
            segments[-1] = Segment(last.start_slot, t + 1, o, last.hours + hours, last.work + work, last.cost_usd + cost)
        else:
            segments.append(Segment(t, t + 1, o, hours, work - o.units_per_hour * restart_h, cost))
    return segments


def _why_alone(spec: QueueSpec, job: QueuedJob, opts: Sequence[Option], work: tuple[str, float]) -> str:
    unit, amount = work
    slots = window(job, spec)
    fastest = max(opts, key=lambda o: o.units_per_hour)
    need_h = amount / fastest.units_per_hour
    have_h = len(slots) * spec.slot_hours
    if need_h > have_h + 1e-9:
        lead = f"needs {need_h:.2f} h on its fastest configuration ({fastest.pool.label(fastest.nodes)})"
        end = (slots.start + math.ceil(need_h / spec.slot_hours - 1e-9)) * spec.slot_hours
        if job.deadline_at_hours is not None:
            fix = f"extend its constraints.deadline_hours to {end - job.submit_hours:g}"
        else:
            fix = f"raise horizon_slots to {math.ceil(end / spec.slot_hours - 1e-9)}"
        return (f"{job.source}: job {job.name!r} cannot finish its {amount:,.0f} {unit} in time: it {lead} and "
                f"has {have_h:g} h of slots; {fix}, or allow faster capacity")
    budget = job.spec.constraints.budget_usd
    cheapest = min(amount / o.units_per_hour * o.usd_per_hour for o in opts)
    if budget is not None and cheapest > budget:
        return (f"{job.source}: job {job.name!r} costs at least ${cheapest:,.2f} (its budget_usd is ${budget:,.2f}); "
                f"raise constraints.budget_usd to {math.ceil(cheapest * 100) / 100:.2f}")
    return (f"{job.source}: job {job.name!r} cannot be scheduled in its slots within its budget and the held "
            "capacity; extend constraints.deadline_hours, raise budget_usd or allow spot/on_demand")


def _why_together(spec: QueueSpec, options: Sequence[Sequence[Option]], works: Sequence[tuple[str, float]]) -> str:
    # Each job fits alone, so the held capacity is what they compete for: add jobs in queue order and
    # name the first that no longer fits with those before it.
    for n in range(2, len(spec.jobs) + 1):
        if _solve(spec, spec.jobs[:n], options[:n], [w for _, w in works[:n]]) is None:
            job = spec.jobs[n - 1]
            others = ", ".join(repr(j.name) for j in spec.jobs[:n - 1])
            return (f"{job.source}: job {job.name!r} cannot meet its deadline together with {others}: the held "
                    "reservations cannot fit them all in time; extend its constraints.deadline_hours, add "
                    "[[reservation]] capacity or allow spot/on_demand in [purchase] allow")
    return "the queue cannot be scheduled"  # unreachable: the whole queue was infeasible
