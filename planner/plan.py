"""The one way into the planner: a job, a catalog and what is known now -> the best plan.

``planner quote`` calls it with the job's own limits; a run's re-plan calls it with the
work, budget and deadline that remain and what the run has learned (pools on cool-down,
interruption rates, measured speeds, the purchase options the switching policy allows).
All of that arrives as arguments: neither the job nor the catalog is rewritten.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from planner.job import JobSpec
from planner.milp import Limits, PlanModel, Solution, may_be_feasible
from planner.pools import CandidateSet, candidate_configs
from planner.transfer import transfers_for
from planner.workload import WorkModel, work_model
from pricing.catalog import Catalog
from pricing.egress import Site


@dataclass(frozen=True, slots=True)
class Planned:
    """The best plan (``None`` when nothing meets ``limits``) and what it was solved over."""

    solution: Solution | None
    candidates: CandidateSet
    work: WorkModel
    limits: Limits
    objective: str
    model: PlanModel | None = None  # the MILP, for re-solves (alternatives, frontier); None: nothing can fit
    exact: Solution | None = None  # the exact optimum, when ``solution`` is a simpler plan within the tolerance


def limits_for(job: JobSpec) -> Limits:
    """The job file's own limits."""
    return Limits(
        deadline_hours=job.constraints.deadline_hours,
        budget_usd=job.constraints.budget_usd,
        switch_hours=job.overheads.restart_minutes / 60.0,
    )


def plan(
    job: JobSpec,
    catalog: Catalog,
    *,
    limits: Limits,
    work: float | None = None,
    blocked: Collection[tuple[str, str]] = (),
    interruption_rates: Mapping[str, float] | None = None,
    speeds: Mapping[str, float] | None = None,
    purchase: Collection[str] | None = None,
    objective: str | None = None,
    now: dt.datetime | None = None,
    data_location: Site | None = None,
    checkpoint_location: Site | None = None,
    resume: bool = False,
    tolerance: float | None = None,
) -> Planned:
    """Solve ``job`` on ``catalog`` within ``limits``.

    ``work`` is what is left, in the job file's unit (default: all of it); ``blocked``
    holds :attr:`Pool.key` values to leave out (a cooling spot pool is ``(id, "spot")``);
    ``interruption_rates`` are per spot pool id; ``speeds`` are per-GPU speeds in the work
    model's unit per second, in place of the job's figures for those GPUs; ``purchase``
    narrows ``purchase.allow``; ``objective`` defaults to the job's; ``now`` (default: the
    system clock) is when the plan starts, which held reservations' hours count from.

    Data gravity (:mod:`planner.transfer`): ``data_location`` is where the dataset is (default:
    the job's ``[data]``), ``checkpoint_location`` where the checkpoint is stored (default: the
    job's ``run.checkpoint_dir`` in ``run.checkpoint_region``); with ``resume`` a checkpoint exists
    now, so the first phase loads it too -- a re-plan onto a pool in another region or cloud pays
    its egress and transfer time.

    ``tolerance`` (default: the job's ``[objective] tolerance``): the plan returned is the simplest
    (fewest phases, then clouds, then nodes) whose objective is at most that fraction above the
    optimum; ``Planned.exact`` is then the optimum itself (None when it is the plan returned).
    """
    model = work_model(job)
    if work is not None:
        model = model.left(work)
    if speeds:
        model = model.with_speeds(speeds, "measured in this run")
    objective = objective or job.objective.minimize
    transfers = transfers_for(job, data_location=data_location, checkpoint_location=checkpoint_location,
                              resume=resume)
    candidates = candidate_configs(job, catalog, model, now=now, interruption_rates=interruption_rates,
                                   blocked=blocked, purchase=purchase, objective=objective, transfers=transfers)
    milp = None
    if candidates.configs and model.work > 0 and may_be_feasible(candidates.configs, model.work, limits):
        milp = PlanModel(candidates.configs, model.work, limits)
    best = milp.solve(objective) if milp is not None else None
    tolerance = job.objective.tolerance if tolerance is None else tolerance
    simple = simplest_within(milp, best, objective, tolerance) if best is not None and tolerance > 0 else None
    if simple is not None:
        return Planned(simple, candidates, model, limits, objective, milp, exact=best)
    return Planned(best, candidates, model, limits, objective, milp)


OBJECTIVE_VALUE = {"cost": ("cost", "cost"), "time": ("hours", "hours"), "carbon": ("carbon", "kg_co2e")}
"""Objective -> (the model's row that caps it, the Solution attribute that measures it)."""


def simplicity(solution: Solution) -> tuple[int, int, int]:
    """What a person reads as a simpler plan, most important first: phases, clouds, total nodes."""
    phases = solution.phases
    return len(phases), len({p.config.pool.cloud for p in phases}), sum(p.config.nodes for p in phases)


def simplest_within(model: PlanModel, best: Solution, objective: str, tolerance: float) -> Solution | None:
    """The simplest plan whose objective is at most ``tolerance`` above ``best``'s (the optimum), or
    None when none is simpler than ``best``.  The MILP minimises phases, clouds and nodes (in that
    order) with the objective capped, and the cost as the last tie-break."""
    row, attribute = OBJECTIVE_VALUE[objective]
    if getattr(best, attribute) <= 0:  # a free optimum (held capacity): a tolerance of it is no room at all
        return None
    cap = getattr(best, attribute) * (1 + tolerance)
    weight = 0.5 / (best.cost * (1 + tolerance)) if best.cost > 0 else 0.0  # < one node: only a tie-break
    simple = model.solve("simple", caps={row: cap}, cost_weight=weight, gap=1e-9)
    if simple is None or simplicity(simple) >= simplicity(best):
        return None
    return simple
