"""The MILP: which configurations to run, for how long, in which order.

Variables, per candidate configuration k (a pool at a node count):
``h_k >= 0`` expected wall hours on k, ``y_k`` in {0,1} (k is a phase of the plan),
``f_k`` in {0,1} (k is the first phase), ``u_c`` in {0,1} (a phase of purchase class c
is used).  A plan is a sequence of at most ``max_phases`` phases, run one after the
other (a DDP job runs on one homogeneous pool at a time), ordered held reservations,
then new reservations, then spot, then on-demand: the on-demand phase is the fallback
that keeps the deadline safe.

    work       sum rate_k h_k                      >= W
    link       h_k                                  <= (W / rate_k, or the term) y_k
    capacity   sum of h_k over one reservation's configurations <= its hours left
    deadline   sum p90_k h_k + R sum (y_k - f_k)    <= D        (P90 wall time)
    budget     sum burn_k h_k + fixed_k y_k + R burn_k (y_k - f_k) <= B
    first      sum f_k = 1,  f_k <= y_k,  f_k + u_c <= 1 for classes c before k's,  y_k <= u_class(k)
    phases     sum y_k <= max_phases

Every phase after the first pays a switch of R hours (restart and checkpoint load) at its
own burn rate; a cluster phase also waits its queue (``wait_k`` hours, unbilled) when used.  Objectives: expected cost; expected hours (time); P90 hours (p90_time, for
deadline relaxations); kg CO2e (carbon); all but cost break ties by cost.  HiGHS solves it, CBC is the fallback.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pulp

from planner.errors import SolverError
from planner.pools import Config
from pricing.pool import CLUSTER, HELD

# A team's own cluster is used first like held capacity: "the cluster, then the cloud".
PURCHASE_CLASS = {HELD: 0, CLUSTER: 0, "reserved_1y": 1, "reserved_3y": 1, "spot": 2, "on_demand": 3}
TIE_BREAK = 1e-6
OBJECTIVES = ("cost", "time", "p90_time", "carbon", "simple")
CAPPED_ROWS = ("deadline", "budget", "hours", "carbon")
"""Rows whose upper bound a solve sets: P90 hours, cost, expected hours, kg CO2e."""


@dataclass(frozen=True, slots=True)
class Limits:
    deadline_hours: float | None = None
    budget_usd: float | None = None
    switch_hours: float = 0.0
    max_phases: int = 3


@dataclass(frozen=True, slots=True)
class Phase:
    config: Config
    hours: float  # expected wall hours: the switch into this phase, its checkpoint load and data staging included
    switch_hours: float
    load_hours: float = 0.0  # loading a checkpoint stored in another region or cloud (nodes running)
    stage_hours: float = 0.0  # copying the dataset into this phase's region first (no nodes yet)
    data_usd: float = 0.0  # data egress: the staging copy, or streamed reads
    checkpoint_usd: float = 0.0  # checkpoint egress: the load on entry and the reloads after preemptions
    wait_hours: float = 0.0  # expected wait for spot capacity (launch and losses) or a cluster queue: not billed
    wait_p90_hours: float = 0.0

    @property
    def billed_hours(self) -> float:
        return self.hours - self.stage_hours - self.wait_hours

    @property
    def cost(self) -> float:
        return self.config.burn * self.billed_hours + self.config.fixed_usd + self.data_usd + self.checkpoint_usd

    @property
    def work_hours(self) -> float:
        return self.hours - self.switch_hours - self.load_hours - self.stage_hours - self.wait_hours

    @property
    def egress_usd(self) -> float:
        return self.data_usd + self.checkpoint_usd


@dataclass(frozen=True, slots=True)
class Solution:
    phases: tuple[Phase, ...]

    @property
    def cost(self) -> float:
        return sum(p.cost for p in self.phases)

    @property
    def hours(self) -> float:
        return sum(p.hours for p in self.phases)

    @property
    def p90_hours(self) -> float:
        return sum(p.work_hours * p.config.p90_factor + p.hours - p.work_hours - p.wait_hours + p.wait_p90_hours
                   for p in self.phases)

    @property
    def kg_co2e(self) -> float:
        return sum(p.config.kg_per_hour * p.hours for p in self.phases)

    @property
    def main_config(self) -> Config:
        """The configuration that does most of the plan's work."""
        return max(self.phases, key=lambda p: p.work_hours * p.config.rate).config

    @property
    def families(self) -> frozenset[tuple[str, str]]:
        return frozenset(p.config.family for p in self.phases)


def solve(
    configs: list[Config],
    work: float,
    limits: Limits,
    objective: str = "cost",
    *,
    exclude_families: Iterable[frozenset] = (),
) -> Solution | None:
    """The best plan, or ``None`` when no plan satisfies the limits."""
    if not configs or work <= 0 or not may_be_feasible(configs, work, limits):
        return None
    return PlanModel(configs, work, limits).solve(objective, exclude_families=exclude_families)


class _Same:
    """The model's own limit (a sentinel: ``None`` means no limit)."""


SAME = _Same()
_NO_LIMIT = 1e30


class PlanModel:
    """The MILP of one candidate set, formulated once (PuLP) and solved many times.

    A quote solves the same model a dozen times: the plan, alternatives without a pool, the
    frontier's deadlines, the simplest plan within a tolerance.  Only the objective, the
    deadline and budget bounds and the excluded pools change, so the model is compiled into
    HiGHS once (:class:`_HighsModel`: one bulk load instead of PuLP's row-by-row bridge) and each
    solve changes bounds and costs and starts from the best known plan that is still feasible
    (a MIP start), e.g. the frontier's previous, tighter point.  Without highspy every solve goes
    through PuLP to CBC, as before.
    """

    def __init__(self, configs: list[Config], work: float, limits: Limits) -> None:
        self.configs, self.work, self.limits = configs, work, limits
        self._best: list[float] | None = None  # columns of the last plan found: the next MIP start
        self.last_gap = 0.0
        self._highs = None
        if _highs_available():
            prob, objectives = self._formulate({}, ())
            self._highs = _HighsModel.compile(prob, objectives)

    def _formulate(self, bounds: Mapping[str, float | None], banned: Collection[int]):
        """The PuLP problem (no objective yet) and its objectives by name; ``bounds`` are the upper
        bounds of the rows :data:`CAPPED_ROWS` (missing or None: no limit)."""
        configs, work, limits = self.configs, self.work, self.limits
        prob = pulp.LpProblem("danlu_plan", pulp.LpMinimize)
        idx = range(len(configs))
        var = _variable_factory(prob)
        h = [var(f"h{k}", 0, None, pulp.LpContinuous) for k in idx]
        y = [var(f"y{k}", 0, 1, pulp.LpBinary) for k in idx]
        f = [var(f"f{k}", 0, 1, pulp.LpBinary) for k in idx]
        classes = sorted({PURCHASE_CLASS[c.purchase] for c in configs})
        u = {c: var(f"u{c}", 0, 1, pulp.LpBinary) for c in classes}
        clouds = sorted({c.pool.cloud for c in configs})
        v = {cloud: var(f"v{i}", 0, 1, pulp.LpBinary) for i, cloud in enumerate(clouds)}  # cloud used
        R = limits.switch_hours
        # Data staged once per site a plan uses (z), whatever number of phases run there.
        staged = _staged_sites(configs)
        z = {site: var(f"z{i}", 0, 1, pulp.LpBinary) for i, site in enumerate(staged)}

        cost = pulp.lpSum(
            (c.burn + c.egress_per_hour) * h[k] + c.fixed_usd * y[k] + (R * c.burn + c.entry_cost) * (y[k] - f[k])
            + c.start_cost * f[k]
            for k, c in enumerate(configs)
        ) + pulp.lpSum(usd * z[site] for site, (usd, _) in staged.items())
        extra_hours = pulp.lpSum(
            (R + c.entry_hours) * (y[k] - f[k]) + c.start_hours * f[k] for k, c in enumerate(configs)
        ) + pulp.lpSum(hrs * z[site] for site, (_, hrs) in staged.items())
        # Waits for spot capacity: unbilled time, once per phase at its launch and after each loss.
        waits = pulp.lpSum(c.wait_per_hour * h[k] + c.launch_wait_hours * y[k]
                           for k, c in enumerate(configs) if c.wait_per_hour or c.launch_wait_hours)
        waits_p90 = pulp.lpSum(c.wait_p90_per_hour * h[k] + c.launch_wait_p90_hours * y[k]
                               for k, c in enumerate(configs) if c.wait_p90_per_hour or c.launch_wait_p90_hours)
        hours = pulp.lpSum(h) + extra_hours + waits
        p90_hours = pulp.lpSum(c.p90_factor * h[k] for k, c in enumerate(configs)) + extra_hours + waits_p90
        carbon = pulp.lpSum(c.kg_per_hour * (h[k] + (R + c.entry_hours) * (y[k] - f[k]) + c.start_hours * f[k])
                            for k, c in enumerate(configs))
        # "simple": what a person reads as a simpler plan, in strict order (the weights keep
        # one more phase dearer than any clouds-and-nodes saving): phases, clouds, total nodes.
        node_total = pulp.lpSum(c.nodes * y[k] for k, c in enumerate(configs))
        node_weight = limits.max_phases * max(c.nodes for c in configs) + 1
        simple = (node_weight * (len(clouds) + 1) * pulp.lpSum(y)
                  + node_weight * pulp.lpSum(v.values()) + node_total)
        objectives = {
            # ties in cost (free held capacity, equal prices) go to the faster plan
            "cost": cost + TIE_BREAK * hours, "time": hours + TIE_BREAK * cost, "p90_time": p90_hours + TIE_BREAK * cost,
            "carbon": carbon + TIE_BREAK * cost, "simple": simple,
        }

        prob += pulp.lpSum(c.rate * h[k] for k, c in enumerate(configs)) >= work, "work"
        for k, c in enumerate(configs):
            cap = work / c.rate
            if c.max_hours is not None:
                cap = min(cap, c.max_hours)
            prob += h[k] <= cap * y[k], f"link{k}"
            prob += f[k] <= y[k], f"first_used{k}"
            cls = PURCHASE_CLASS[c.purchase]
            prob += y[k] <= u[cls], f"class{k}"
            prob += y[k] <= v[c.pool.cloud], f"cloud{k}"
            for earlier in (e for e in classes if e < cls):
                prob += f[k] + u[earlier] <= 1, f"order{k}_{earlier}"
            if c.site in z:
                prob += y[k] <= z[c.site], f"staged{k}"
        # A site's copy is needed as soon as any work runs there: z >= the share of the work done
        # in the site.  Implied by the rows above for integral z, but it makes the LP relaxation
        # pay for staging in proportion, instead of next to nothing (found by the 3 TB dataset
        # in another cloud, whose solves took seconds).
        for i, site in enumerate(staged):
            prob += (pulp.lpSum(c.rate / work * h[k] for k, c in enumerate(configs) if c.site == site)
                     <= z[site]), f"staged_share{i}"
        # Phases run one after another, so configurations of one reservation share its hours.
        capped: dict[tuple, list[int]] = {}
        for k, c in enumerate(configs):
            if c.max_hours is not None:
                capped.setdefault(c.family, []).append(k)
        for i, members in enumerate(capped.values()):
            prob += pulp.lpSum(h[k] for k in members) <= configs[members[0]].max_hours, f"reservation{i}"
        prob += pulp.lpSum(f) == 1, "one_first"
        prob += pulp.lpSum(y) <= limits.max_phases, "phases"
        # Always present, so a HiGHS re-solve only moves their bounds (a huge bound = no limit).
        # hours and carbon: caps for the simplest plan within a tolerance of the optimum.
        for name, expr in (("deadline", p90_hours), ("budget", cost), ("hours", hours), ("carbon", carbon)):
            limit = bounds.get(name)
            prob += expr <= (_NO_LIMIT if limit is None else limit), name
        for k in banned:
            y[k].upBound = 0
        return prob, objectives

    def solve(
        self,
        objective: str = "cost",
        *,
        deadline_hours: float | None | _Same = SAME,
        budget_usd: float | None | _Same = SAME,
        exclude_families: Iterable[frozenset] = (),
        gap: float = 1e-7,
        cost_weight: float = 0.0,
        caps: Mapping[str, float] | None = None,
        node_limit: int | None = None,
    ) -> Solution | None:
        """The best plan for ``objective`` with the model's limits, or these (``None``: no limit);
        ``cost_weight`` adds that multiple of the cost to the objective (a tie-break for "simple");
        ``caps`` bounds the plan's "cost", expected "hours" or "carbon" from above; ``node_limit``
        bounds HiGHS's branch and bound (a deterministic effort, not a time): the best plan found
        then, whose relative distance from the optimum's bound is :attr:`last_gap` (0 when proven)."""
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}")
        deadline = self.limits.deadline_hours if deadline_hours is SAME else deadline_hours
        budget = self.limits.budget_usd if budget_usd is SAME else budget_usd
        caps = dict(caps or {})
        if "cost" in caps:
            budget = caps.pop("cost") if budget is None else min(budget, caps.pop("cost"))
        bounds = {"deadline": deadline, "budget": budget, **caps}
        # Also out: configurations whose data copy alone outlasts the deadline (exact, and it spares
        # HiGHS a search over staging sites no plan can use: seconds for a 3 TB dataset elsewhere).
        banned = [k for k, c in enumerate(self.configs)
                  if any(c.family in fam for fam in exclude_families)
                  or (deadline is not None and c.stage_hours + c.start_hours + c.launch_wait_p90_hours > deadline)]
        if self._highs is not None:
            values = self._highs.solve(objective, bounds=bounds, banned=banned, start=self._best, gap=gap,
                                       cost_weight=cost_weight, node_limit=node_limit)
        else:
            values = self._solve_pulp(objective, bounds, banned, cost_weight)
        if values is None:
            return None
        self.last_gap = values.gap
        if values.columns is not None:
            self._best = values.columns
        used = []
        work, R = self.work, self.limits.switch_hours
        for k, c in enumerate(self.configs):
            # A phase does a share of the work; a used-but-idle first phase (h = 0) is not one. Relative to
            # the work, so a job of seconds is not lost below an absolute tolerance.
            hk = values.of(f"h{k}")
            if values.of(f"y{k}") > 0.5 and hk * c.rate > 1e-6 * work:
                used.append((c, hk, round(values.of(f"f{k}")) == 1))
        return solution_of(used, R)

    def _solve_pulp(self, objective: str, bounds, banned: list[int], cost_weight: float) -> _Values | None:
        prob, objectives = self._formulate(bounds, banned)
        goal = objectives[objective]
        prob.setObjective(goal + cost_weight * objectives["cost"] if cost_weight else goal)
        status = _run(prob)
        if status != pulp.LpStatusOptimal:
            return None
        return _Values({var.name: var.value() or 0.0 for var in prob.variables()}, None)


@dataclass(frozen=True, slots=True)
class _Values:
    """Column values of a solved model, by variable name."""

    by_name: dict[str, float]
    columns: list[float] | None
    gap: float = 0.0  # relative optimality gap when a node limit stopped the search

    def of(self, name: str) -> float:
        return self.by_name.get(name, 0.0)


def _highs_available() -> bool:
    try:
        import highspy  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(slots=True)
class _HighsModel:
    """A PuLP problem loaded into HiGHS in one call, re-solved with new costs and bounds."""

    highs: Any
    names: list[str]
    costs: dict[str, np.ndarray]
    offsets: dict[str, float]
    rows: dict[str, int]
    row_bounds: dict[str, tuple[float, float]]
    y_cols: list[int]
    upper: np.ndarray

    @classmethod
    def compile(cls, prob: pulp.LpProblem, objectives: dict[str, pulp.LpAffineExpression]) -> _HighsModel:
        import highspy

        variables = prob.variables()
        col = {var.name: i for i, var in enumerate(variables)}
        n = len(variables)
        lower = np.array([0.0 if v.lowBound is None else v.lowBound for v in variables])
        upper = np.array([highspy.kHighsInf if v.upBound is None else v.upBound for v in variables], dtype=float)
        integer = [v.cat == pulp.LpInteger for v in variables]
        starts, index, value, row_lo, row_hi, rows = [0], [], [], [], [], {}
        inf = highspy.kHighsInf
        # PuLP >= 3.3 lists them by prob.constraints() (the dict view is deprecated); older, a dict.
        constraints = prob.constraints() if callable(prob.constraints) else list(prob.constraints.values())
        for i, con in enumerate(constraints):
            rows[con.name] = i
            for var, coef in con.items():
                if coef:
                    index.append(col[var.name])
                    value.append(coef)
            starts.append(len(index))
            rhs = -con.constant
            row_lo.append(rhs if con.sense in (pulp.LpConstraintGE, pulp.LpConstraintEQ) else -inf)
            row_hi.append(rhs if con.sense in (pulp.LpConstraintLE, pulp.LpConstraintEQ) else inf)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, len(rows)
        lp.col_cost_ = np.zeros(n)
        lp.col_lower_, lp.col_upper_ = lower, upper
        lp.row_lower_, lp.row_upper_ = np.array(row_lo), np.array(row_hi)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
        lp.a_matrix_.value_ = np.array(value, dtype=float)
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                           for i in integer]
        with _quiet_stdout():
            highs = highspy.Highs()
        highs.setOptionValue("output_flag", False)
        # Presolve finds next to nothing to remove in this model (every column is a priced
        # configuration) and was most of the time of a solve: 2.0 s -> 0.9 s for the frontier
        # of a 128-node quote (bench/quote.py).
        highs.setOptionValue("presolve", "off")
        # A small cut pool: the root's separation rounds otherwise pile up thousands of cuts on the
        # staging rows (1.0 s -> 0.26 s for a frontier point of a 3 TB dataset in another cloud).
        highs.setOptionValue("mip_pool_soft_limit", 50)
        # Sub-MIP heuristics (RINS, RENS) and feasibility jump were most of a hard root's time; every
        # re-solve gets the last plan as a start instead.  The optimum is still proven (gap 1e-7).
        highs.setOptionValue("mip_heuristic_run_rins", False)
        highs.setOptionValue("mip_heuristic_run_rens", False)
        highs.setOptionValue("mip_heuristic_run_feasibility_jump", False)
        highs.passModel(lp)
        costs, offsets = {}, {}
        for key, expr in objectives.items():
            vec = np.zeros(n)
            for var, coef in expr.items():
                vec[col[var.name]] += coef
            costs[key], offsets[key] = vec, float(expr.constant)
        names = [v.name for v in variables]
        y_cols = [col[f"y{k}"] for k in range(sum(1 for name in col if name.startswith("y")))]  # y_k at k
        bounds = {name: (row_lo[i], row_hi[i]) for name, i in rows.items()}
        return cls(highs, names, costs, offsets, rows, bounds, y_cols, upper)

    def solve(self, objective: str, *, bounds: Mapping[str, float | None], banned: list[int], start, gap: float,
              cost_weight: float = 0.0, node_limit: int | None = None) -> _Values | None:
        import highspy

        h = self.highs
        h.setOptionValue("mip_rel_gap", gap)
        h.setOptionValue("mip_max_nodes", node_limit if node_limit is not None else highspy.kHighsIInf)
        # A bounded solve skips strong branching's reliability phase (thousands of LP iterations at a
        # hard root); an exact one keeps HiGHS's default.
        h.setOptionValue("mip_pscost_minreliable", 0 if node_limit is not None else 8)
        h.setOptionValue("mip_abs_gap", 1e-6)
        n = len(self.names)
        costs = self.costs[objective] + cost_weight * self.costs["cost"] if cost_weight else self.costs[objective]
        h.changeColsCost(n, np.arange(n, dtype=np.int32), costs)
        for row in CAPPED_ROWS:
            limit = bounds.get(row)
            hi = _NO_LIMIT if limit is None else limit * (1 + 1e-12)
            h.changeRowBounds(self.rows[row], self.row_bounds[row][0], hi)
        upper = self.upper.copy()
        ycols = np.array(self.y_cols, dtype=np.int32)
        if banned:
            upper[ycols[banned]] = 0.0
        h.changeColsBounds(len(ycols), ycols, np.zeros(len(ycols)), upper[ycols])
        if start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = list(start)
            h.setSolution(sol)  # HiGHS checks it and ignores it when it is infeasible now
        with _quiet_stdout():
            h.run()
        status = h.getModelStatus()
        info = h.getInfo()
        stopped = status == highspy.HighsModelStatus.kSolutionLimit and node_limit is not None
        if stopped and info.primal_solution_status == 2:  # a feasible plan within the effort allowed
            columns = list(h.getSolution().col_value)
            return _Values(dict(zip(self.names, columns)), columns, max(float(info.mip_gap), 0.0))
        if stopped:
            return None
        if status != highspy.HighsModelStatus.kOptimal:
            if status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
                return None
            if status == highspy.HighsModelStatus.kUnbounded:
                raise SolverError("the plan model is unbounded; this is a bug, please report it with the job file")
            raise SolverError(f"HiGHS could not solve the plan: {h.modelStatusToString(status)}")
        columns = list(h.getSolution().col_value)
        return _Values(dict(zip(self.names, columns)), columns)


def solution_of(used: Iterable[tuple[Config, float, bool]], switch_hours: float) -> Solution:
    """The plan of (configuration, expected work hours, is-first) triples, with its switches, checkpoint
    loads and data staging (charged to the first phase in each staged region)."""
    order = sorted(used, key=lambda u: (not u[2], PURCHASE_CLASS[u[0].purchase], -u[0].burn))
    phases, staged = [], set()
    for c, h, first in order:
        switch = 0.0 if first else switch_hours
        load_h = c.start_hours if first else c.entry_hours
        load_usd = c.start_usd if first else c.entry_usd
        stage_h = stage_usd = 0.0
        if (c.stage_usd or c.stage_hours) and c.site not in staged:
            staged.add(c.site)
            stage_h, stage_usd = c.stage_hours, c.stage_usd
        wait = c.wait_per_hour * h + c.launch_wait_hours
        phases.append(Phase(config=c, hours=h + switch + load_h + stage_h + wait, switch_hours=switch,
                            load_hours=load_h, stage_hours=stage_h, data_usd=c.data_usd_per_hour * h + stage_usd,
                            checkpoint_usd=c.ckpt_usd_per_hour * h + load_usd, wait_hours=wait,
                            wait_p90_hours=c.wait_p90_per_hour * h + c.launch_wait_p90_hours))
    return Solution(tuple(phases))


def _staged_sites(configs: list[Config]) -> dict:
    """Sites whose configurations pay a one-off staging copy: site -> (USD, hours)."""
    out = {}
    for c in configs:
        if c.stage_usd or c.stage_hours:
            out.setdefault(c.site, (c.stage_usd, c.stage_hours))
    return out


def may_be_feasible(configs: list[Config], work: float, limits: Limits) -> bool:
    """A necessary condition, checked before the MILP because proving infeasibility can take
    HiGHS seconds.  Without switch overheads, caps and the whole-term charge, a plan is a
    convex mix of "whole job on k" points (cost_k, P90 time_k), so some mix must fit in the
    box budget x deadline: the cheapest mix that meets the deadline lies on a segment
    between a point inside the deadline and one outside it."""
    # A phase's one-off transfers (staging, a resumed checkpoint's load) belong to its point: a mix
    # pays at least the convex combination of them, so the condition stays necessary.
    cost = np.array([work * (c.burn + c.egress_per_hour) / c.rate + c.fixed_usd + c.stage_usd + c.start_cost
                     for c in configs])
    time = np.array([work * (c.p90_factor + c.wait_p90_per_hour) / c.rate + c.stage_hours + c.start_hours
                     + c.launch_wait_p90_hours for c in configs])
    deadline = limits.deadline_hours * (1 + 1e-9) if limits.deadline_hours is not None else np.inf
    budget = limits.budget_usd * (1 + 1e-9) if limits.budget_usd is not None else np.inf
    inside = time <= deadline
    if not inside.any():
        return False
    best = cost[inside].min()
    if best <= budget or not np.isfinite(deadline):
        return bool(best <= budget)
    ti, ci = time[inside][:, None], cost[inside][None, :].T
    tj, cj = time[~inside][None, :], cost[~inside][None, :]
    share = (tj - deadline) / (tj - ti)  # weight on the inside point that lands exactly on the deadline
    mixed = share * ci + (1 - share) * cj
    return bool(mixed.size and mixed.min() <= budget)


def _variable_factory(prob: pulp.LpProblem):
    """PuLP >= 3.3 attaches variables to the model (the old constructor is deprecated)."""
    if hasattr(prob, "add_variable"):
        return lambda name, lo, hi, cat: prob.add_variable(name, lo, hi, cat=cat)
    return lambda name, lo, hi, cat: pulp.LpVariable(name, lo, hi, cat=cat)


@contextlib.contextmanager
def _quiet_stdout():
    """HiGHS prints a banner from C++ on first use, straight to fd 1; `--json` output must stay clean."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no real fd 1 (e.g. embedded interpreters): nothing to protect
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _run(prob: pulp.LpProblem) -> int:
    errors = []
    for solver in _solvers():
        try:
            with _quiet_stdout():
                prob.solve(solver)
        except pulp.PulpSolverError as exc:  # a broken solver install: try the next one
            errors.append(f"{solver.name}: {exc}")
            continue
        status = prob.status
        if status == pulp.LpStatusOptimal or status == pulp.LpStatusInfeasible:
            return status
        if status == pulp.LpStatusUnbounded:
            raise SolverError("the plan model is unbounded; this is a bug, please report it with the job file")
        errors.append(f"{solver.name}: status {pulp.LpStatus[status]}")
    if all("status Not Solved" in e or "status Undefined" in e for e in errors):
        return pulp.LpStatusInfeasible
    raise SolverError("no MILP solver could solve the plan: " + "; ".join(errors))


def _solvers() -> list[pulp.LpSolver]:
    solvers = []
    highs = pulp.HiGHS(msg=False, gapRel=1e-7, gapAbs=1e-6)
    if highs.available():
        solvers.append(highs)
    for name in ("COIN_CMD", "PULP_CBC_CMD"):  # PuLP 4 keeps only COIN_CMD (pulp[cbc])
        factory = getattr(pulp, name, None)
        if factory is None:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            cbc = factory(msg=False, gapRel=1e-7)
        if cbc.available():
            solvers.append(cbc)
            break
    if not solvers:
        raise SolverError("no MILP solver found: install highspy (`pip install highspy`) or PuLP's bundled CBC")
    return solvers
