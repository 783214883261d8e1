"""A quote: the best plan for a job, its cost lines, alternatives, the cost/time frontier,
and, when nothing fits, the binding constraints with the smallest relaxation of each.

``make_quote(job, catalog)`` is the whole of ``planner quote`` minus the printing.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from planner.job import JobSpec
from planner.milp import Limits, PlanModel, Solution
from planner.plan import OBJECTIVE_VALUE, limits_for, plan
from planner.pools import CandidateSet
from planner.workload import WorkModel
from pricing.catalog import Catalog

if TYPE_CHECKING:
    from planner.relax import Infeasibility

__all__ = ["CostLine", "PlanView", "Quote", "frontier", "limits_for", "make_quote", "view"]


@dataclass(frozen=True, slots=True)
class CostLine:
    label: str
    usd: float


@dataclass(frozen=True, slots=True)
class PlanView:
    """A solved plan with the figures a user reads."""

    solution: Solution
    lines: tuple[CostLine, ...]
    p90_cost_usd: float
    note: str = ""  # e.g. that this alternative is the exact optimum the chosen plan is within tolerance of

    @property
    def expected_cost_usd(self) -> float:
        return self.solution.cost

    @property
    def expected_hours(self) -> float:
        return self.solution.hours

    @property
    def p90_hours(self) -> float:
        return self.solution.p90_hours


@dataclass(slots=True)
class Quote:
    job: JobSpec
    work: WorkModel
    catalog: Catalog
    plan: PlanView | None
    objective: str  # the job's, or the one the command line asked for
    alternatives: list[PlanView] = field(default_factory=list)
    frontier: list[tuple[float, float]] = field(default_factory=list)  # (P90 hours, expected cost)
    frontier_gaps: dict[float, float] = field(default_factory=dict)  # P90 hours -> gap, where not proven
    infeasible: Infeasibility | None = None
    candidates: CandidateSet | None = None
    exact: PlanView | None = None  # the exact optimum, when the plan is a simpler one within the tolerance
    tolerance: float = 0.0
    solve_seconds: float = 0.0
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))  # when the plan starts

    @property
    def today(self) -> dt.date:
        return self.now.date()

    @property
    def status(self) -> str:
        return "optimal" if self.plan else "infeasible"

    @property
    def runner_up(self) -> PlanView | None:
        """The first alternative that is another plan, not the exact optimum the plan is close to."""
        return next((a for a in self.alternatives if a.solution is not self.exact_solution), None)

    @property
    def exact_solution(self) -> Solution | None:
        return self.exact.solution if self.exact else None


def make_quote(
    job: JobSpec,
    catalog: Catalog,
    *,
    top: int = 3,
    frontier_points: int = 6,
    objective: str | None = None,
    now: dt.datetime | None = None,
) -> Quote:
    """Solve the job on the catalog: best plan, ``top`` alternatives, the frontier."""
    now = now or dt.datetime.now(dt.UTC)
    started = time.perf_counter()
    planned = plan(job, catalog, limits=limits_for(job), objective=objective, now=now)
    best, candidates, work, limits = planned.solution, planned.candidates, planned.work, planned.limits
    quote = Quote(job=job, work=work, catalog=catalog, plan=None, objective=planned.objective,
                  candidates=candidates, now=now, tolerance=job.objective.tolerance)
    if best is None:
        from planner.relax import explain_infeasible  # only a job with no plan needs it

        quote.infeasible = explain_infeasible(job, catalog, work, candidates, limits, now=now)
        quote.solve_seconds = time.perf_counter() - started
        return quote
    quote.plan = view(best)
    model = planned.model
    if planned.exact is not None:
        attribute = OBJECTIVE_VALUE[planned.objective][1]
        optimum, chosen = getattr(planned.exact, attribute), getattr(best, attribute)
        gap = chosen / optimum - 1 if optimum > 0 else 0.0
        quote.exact = replace(view(planned.exact), note=(
            f"exact optimum: the plan is simpler and {gap:.2%} above it on {planned.objective} "
            f"([objective] tolerance {job.objective.tolerance:.2%})"))
        if top:
            quote.alternatives.append(quote.exact)
    excluded: list[frozenset] = []
    previous = best
    for _ in range(top - len(quote.alternatives)):
        excluded.append(frozenset({previous.main_config.family}))
        alt = model.solve(planned.objective, exclude_families=excluded)
        if alt is None:
            break
        quote.alternatives.append(view(alt))
        previous = alt
    if frontier_points > 1:
        cheapest = (planned.exact or best) if planned.objective == "cost" else None
        quote.frontier = frontier(model, limits, frontier_points, gaps=quote.frontier_gaps, optimum=cheapest)
    quote.solve_seconds = time.perf_counter() - started
    return quote


def view(solution: Solution) -> PlanView:
    compute = ckpt = recovery = switch = terms = data = moved = loading = 0.0
    p90_cost = 0.0
    for p in solution.phases:
        c = p.config
        failure_free = p.work_hours * c.rate / c.raw_rate
        compute += c.burn * failure_free
        if c.overhead is not None:
            ckpt += c.burn * failure_free * c.overhead.checkpoint_share
            recovery += c.burn * failure_free * c.overhead.recovery_share
        switch += c.burn * p.switch_hours
        terms += c.fixed_usd
        data += p.data_usd
        moved += p.checkpoint_usd
        loading += c.burn * p.load_hours
        p90_cost += (c.burn * (p.work_hours * c.p90_factor + p.switch_hours + p.load_hours) + c.fixed_usd
                     + p.egress_usd)
    lines = [CostLine("compute", compute)]
    for label, usd in (
        ("checkpoint writes", ckpt),
        ("preemption recovery (restarts + rework)", recovery),
        ("phase switches (restart + checkpoint load)", switch),
        ("reserved terms bought for this job (whole term)", terms),
        ("data egress (dataset read from another region or cloud)", data),
        ("checkpoint egress (loaded from another region or cloud)", moved),
        ("checkpoint transfer time (nodes waiting for a remote checkpoint)", loading),
    ):
        if usd > 0.005:
            lines.append(CostLine(label, usd))
    return PlanView(solution=solution, lines=tuple(lines), p90_cost_usd=p90_cost)


FRONTIER_NODES = 20
"""Branch-and-bound nodes a frontier point may take: the plan found then is shown, with its gap to
the bound when it is not proven cheapest (a 128-node frontier point took 600 nodes, 5 s)."""


def frontier(model: PlanModel, limits: Limits, points: int, gaps: dict[float, float] | None = None,
             optimum: Solution | None = None) -> list[tuple[float, float]]:
    """Cheapest expected cost for a range of P90 deadlines: the cost-vs-time Pareto frontier.

    The deadlines are solved from the tightest up, so each solve starts from the plan of the one
    before (still feasible under a looser deadline: a MIP start HiGHS only has to improve), and
    each within :data:`FRONTIER_NODES`; ``gaps`` receives the P90 hours of every point not proven
    cheapest, with its relative gap.  ``optimum``, the cheapest plan within ``limits``, answers
    every deadline it meets without a solve (no plan within a tighter deadline is cheaper)."""
    cheapest = model.solve("cost", deadline_hours=None)
    fastest = model.solve("p90_time", deadline_hours=None)  # last: the start of the tightest point
    if fastest is None or cheapest is None:
        return []
    lo, hi = fastest.p90_hours, cheapest.p90_hours
    if limits.deadline_hours is not None:
        hi = min(hi, limits.deadline_hours)
    out: dict[float, float] = {}
    if hi <= lo * (1 + 1e-6):
        return [(lo, fastest.cost)]
    for i in range(points):
        t = lo * (hi / lo) ** (i / (points - 1))
        if i == points - 1 and hi == cheapest.p90_hours:
            sol = cheapest  # the loosest point is the cheapest plan itself
        elif optimum is not None and optimum.p90_hours <= t * (1 + 1e-9):
            sol = optimum
        else:
            sol = model.solve("cost", deadline_hours=t * (1 + 1e-9), node_limit=FRONTIER_NODES)
        if sol is not None:
            out[round(sol.p90_hours, 6)] = sol.cost
            if gaps is not None and sol is not cheapest and sol is not optimum and model.last_gap > 1e-6:
                gaps[round(sol.p90_hours, 6)] = model.last_gap
    pts = sorted(out.items())
    pareto, best = [], math.inf
    for hours, cost in pts:  # keep only points no faster point beats on cost
        if cost < best - 1e-9:
            pareto.append((hours, cost))
            best = cost
    return pareto
