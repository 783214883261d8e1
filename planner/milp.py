"""The MILP: which configurations to run, for how long, in which order.

Variables, per candidate configuration k (a pool at a node count):
``h_k >= 0`` expected wall hours on k, ``y_k`` in {0,1} (k is a phase of the plan),
``f_k`` in {0,1} (k is the first phase), ``g_k`` in {0,1} (k alone is the whole plan),
``u_c`` in {0,1} (a phase of purchase class c is used), ``m = 1 - sum g_k`` (the plan has
more than one phase).  A plan is a sequence of at most ``max_phases`` phases, run one after
the other (a DDP job runs on one homogeneous pool at a time), ordered held reservations,
then new reservations, then spot, then on-demand: the on-demand phase is the fallback
that keeps the deadline safe.

    work       sum rate_k h_k                      >= W        (in thousandths of W)
    link       h_k                                  <= (W / rate_k, or the term) y_k
    capacity   sum of h_k over one reservation's configurations <= its hours left
    deadline   sum p90_k h_k + R sum (y_k - f_k)    <= D        (P90 wall time)
    budget     sum burn_k h_k + fixed_k y_k + R burn_k (y_k - f_k) + r <= B
    reserve    r >= S burn_k y_k   (a run's hard cap keeps S hours of a launch's burn back; S = 0 in a quote)
    first      sum f_k = 1,  f_k <= y_k,  f_k + u_c <= 1 for classes c before k's,  y_k <= u_class(k)
    phases     sum y_k <= max_phases
    alone      g_k <= f_k,  h_k >= (W / rate_k) g_k,  sum (y_k - f_k) >= m
    bound      cost >= sum (cost of k alone) g_k + (a bound on plans of 2+ phases) m

Every phase after the first pays a switch of R hours (restart and checkpoint load) at its
own burn rate; a cluster phase also waits its queue (``wait_k`` hours, unbilled) when used.
The ``alone`` and ``bound`` rows change no plan, only how fast HiGHS proves one optimal
(:func:`_formulate`).  Objectives: expected cost; expected hours (time); P90 hours (p90_time,
for deadline relaxations); kg CO2e (carbon); all but cost break ties by cost.  HiGHS solves
it (:mod:`planner.highs`), PuLP's CBC is the fallback (:mod:`planner.mip`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from planner.mip import MipModel, solve_with_pulp
from planner.pools import Config
from pricing.pool import CLUSTER, HELD

# A team's own cluster is used first like held capacity: "the cluster, then the cloud".
PURCHASE_CLASS = {HELD: 0, CLUSTER: 0, "reserved_1y": 1, "reserved_3y": 1, "spot": 2, "on_demand": 3}
TIE_BREAK = 1e-6
OBJECTIVES = ("cost", "time", "p90_time", "carbon", "simple")
CAPPED_ROWS = ("deadline", "budget", "hours", "carbon", "cost")
"""Rows whose upper bound a solve sets: P90 hours, cost with the cap's reserve, expected hours, kg CO2e,
cost (one row with the budget's when there is no reserve)."""


@dataclass(frozen=True, slots=True)
class Limits:
    deadline_hours: float | None = None
    budget_usd: float | None = None
    switch_hours: float = 0.0
    max_phases: int = 3
    # Hours of a launch's burn that a run's hard budget cap keeps back for its stop
    # (runtime.accounting.forecast): the budget must cover the plan's cost and that reserve of its
    # dearest phase, or the cap stops the run before the plan ends. 0 for a quote: the expected cost fits.
    stop_reserve_hours: float = 0.0


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
WORK_SCALE = 1000.0
FEASIBILITY = 1e-6
"""The solvers' absolute tolerance on a row (HiGHS's default; CBC's is tighter): a bound is met within it."""


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where the plan model's variables and rows are, and what each configuration alone gives."""

    h: np.ndarray  # column of h_k, by configuration k
    y: np.ndarray
    f: np.ndarray
    g: np.ndarray
    multi: int  # column of m = 1 - sum(g): the plan has more than one phase
    capped: dict[str, int]  # row of each of CAPPED_ROWS
    bound_row: int  # the cost objective >= sum(single_k g_k) + (a bound on plans of 2+ phases) m
    points: np.ndarray  # (configs x columns) the plan "k alone does all the work"
    single: np.ndarray  # (configs x CAPPED_ROWS) each capped row's value at that plan (inf: none)
    # For the bound on plans of two or more phases, per configuration: the cost objective and P90
    # hours of doing all the work on k (no per-phase terms), and what a phase on k adds to them
    # as a later phase and as the first.
    whole_cost: np.ndarray
    whole_p90: np.ndarray
    phase_cost: np.ndarray
    phase_p90: np.ndarray
    first_cost: np.ndarray
    first_p90: np.ndarray
    purchase_class: np.ndarray


class PlanModel:
    """The MILP of one candidate set, formulated once (as arrays, :mod:`planner.mip`) and solved many times.

    A quote solves the same model a dozen times: the plan, alternatives without a pool, the
    frontier's deadlines, the simplest plan within a tolerance.  Only the objective, the deadline
    and budget bounds and the excluded pools change, so the model is loaded into HiGHS once
    (:mod:`planner.highs`) and each solve changes bounds and costs and starts from the best known
    plan that is still feasible (a MIP start), e.g. the frontier's previous, tighter point, or the
    best configuration alone.  Without highspy every solve goes through PuLP to CBC.
    """

    def __init__(self, configs: list[Config], work: float, limits: Limits) -> None:
        self.configs, self.work, self.limits = configs, work, limits
        self._best: np.ndarray | None = None  # columns of the last plan found: a MIP start
        self.last_gap = 0.0
        self.model, self._at = _formulate(configs, work, limits)
        self._costs = {name: self.model.cost_vector(name) for name in self.model.objectives}
        self._highs = _highs_model(self.model)

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
        bounds = {"deadline": deadline, "budget": budget, **(caps or {})}
        at = self._at
        limit = np.array([np.inf if bounds.get(name) is None else bounds[name] for name in CAPPED_ROWS])
        row_upper = dict.fromkeys(at.capped.values(), _NO_LIMIT)
        for name, b in zip(CAPPED_ROWS, limit):  # "budget" and "cost" may be one row: the tighter bound
            if np.isfinite(b):
                row_upper[at.capped[name]] = min(row_upper[at.capped[name]], b * (1 + 1e-12))
        # Also out: configurations whose data copy alone outlasts the deadline (exact, and it spares
        # HiGHS a search over staging sites no plan can use: seconds for a 3 TB dataset elsewhere).
        allowed = np.array([not any(c.family in fam for fam in exclude_families)
                            and (deadline is None or c.stage_hours + c.start_hours + c.launch_wait_p90_hours <= deadline)
                            for c in self.configs], dtype=bool)
        column_upper = {int(col): 0.0 for col in at.y[~allowed]}
        # A configuration that alone breaks a bound is no plan of one phase (exact: that plan is infeasible).
        alone = (allowed & np.isfinite(at.single).all(axis=1)
                 & (at.single <= limit * (1 + 1e-9) + FEASIBILITY).all(axis=1))
        column_upper.update((int(col), 0.0) for col in at.g[~alone])
        costs = self._costs[objective]
        if cost_weight:
            costs = costs + cost_weight * self._costs["cost"]
        if self._highs is not None:
            # The bound is as tight as HiGHS's own figures: CBC (the fallback) reads them back to 8
            # digits, so there a frontier deadline may lie a rounding below the plan it came from.
            bound, pair = self._multi_bound(allowed, limit[0]) if objective == "cost" and not cost_weight else (0, None)
            if np.isinf(bound):
                column_upper[at.multi] = 0.0  # no plan of two phases or more meets the deadline
                bound = 0.0
            values = self._highs.solve(costs, row_upper=row_upper, column_upper=column_upper,
                                       coefficients={(at.bound_row, at.multi): -bound},
                                       start=self._start(costs, alone, allowed, limit, pair), gap=gap,
                                       node_limit=node_limit)
        else:
            values = solve_with_pulp(self.model, costs, row_upper, column_upper, {(at.bound_row, at.multi): 0.0})
        if values is None:
            return None
        self.last_gap = values.gap
        if values.start:
            self._best = values.columns
        x = values.columns
        hours, used_y, first = x[at.h], x[at.y], x[at.f]
        work = self.work
        # A phase does a share of the work; a used-but-idle first phase (h = 0) is not one. Relative to
        # the work, so a job of seconds is not lost below an absolute tolerance.
        used = [(c, float(hours[k]), round(first[k]) == 1) for k, c in enumerate(self.configs)
                if used_y[k] > 0.5 and hours[k] * c.rate > 1e-6 * work]
        return solution_of(used, self.limits.switch_hours)

    def _multi_bound(self, allowed: np.ndarray, deadline: float) -> tuple[float, np.ndarray | None]:
        """A lower bound on the cost objective of every plan of two phases or more (inf: none meets
        the deadline), and the plan of two phases it comes from when that is one (a MIP start).

        The bound is the best mix of two allowed configurations, one first and one later (the
        purchase classes allowing), each paying what the model charges it as such once, within
        the P90 hours left.  A plan of three phases costs at least the best mix of two of its
        configurations (an LP over shares with two rows has a solution with two shares), each
        charged at least as a first or later phase, so the bound holds for it too; the caps and
        the staging copies are left out, which only lowers it.  Without caps and staging the
        bound is the best plan of two phases itself, and HiGHS proves the optimum at the root.

        With it the relaxation is as tight as "the best configuration alone, or the best mix of
        two with a switch", where without it the relaxation mixed a fast configuration with one
        too slow to meet the deadline at no switch cost (a 128-node frontier point: a bound of
        283 against an optimum of 392, seconds of branching)."""
        at = self._at
        idx = np.flatnonzero(allowed)
        if len(idx) < 2:
            return np.inf, None
        cost, p90, cls = at.whole_cost[idx], at.whole_p90[idx], at.purchase_class[idx]
        cp, cq = cost[:, None], cost[None, :]
        tp, tq = p90[:, None], p90[None, :]
        later_cost, later_p90 = at.phase_cost[idx], at.phase_p90[idx]
        # (charges of p, charges of q, where that order is possible): p first, q first, or neither
        # (both later phases of a plan of three).
        orders = (
            (at.first_cost[idx][:, None], at.first_p90[idx][:, None], later_cost[None, :], later_p90[None, :],
             cls[:, None] <= cls[None, :]),
            (later_cost[:, None], later_p90[:, None], at.first_cost[idx][None, :], at.first_p90[idx][None, :],
             cls[:, None] >= cls[None, :]),
            (later_cost[:, None], later_p90[:, None], later_cost[None, :], later_p90[None, :], True),
        )
        bound, plan = np.inf, None
        with np.errstate(divide="ignore", invalid="ignore"):
            for order, (pay_p, wait_p, pay_q, wait_q, possible) in enumerate(orders):
                # P90 hours left for the work; the relative slack covers rounding, not a looser deadline
                left = deadline * (1 + 1e-9) - wait_p - wait_q
                inside_p, inside_q = tp <= left, tq <= left
                # share of the work on p: all on the cheaper one within the deadline, or a mix of one
                # within and one past it that lands exactly on the deadline
                ends = (inside_p & (~inside_q | (cp <= cq))).astype(float)
                mixed = (tq - left) / (tq - tp)
                end_value = np.where(inside_p | inside_q, cq + (cp - cq) * ends, np.inf)
                mixed_value = np.where(inside_p != inside_q, cq + (cp - cq) * mixed, np.inf)
                share = np.where(mixed_value < end_value, mixed, ends)
                value = np.where(possible, np.minimum(end_value, mixed_value) + pay_p + pay_q, np.inf)
                np.fill_diagonal(value, np.inf)  # two phases are two configurations
                best = int(np.argmin(value))
                if value.flat[best] < bound:
                    p, q = divmod(best, len(idx))
                    bound = float(value.flat[best])
                    plan = None if order == 2 else self._pair(idx[p], idx[q], float(share[p, q]), order == 0)
        # Shaved by a relative 1e-9 so that rounding never cuts off the plan it bounds.
        return bound * (1 - 1e-9), plan

    def _pair(self, p: int, q: int, share: float, p_first: bool) -> np.ndarray:
        """The columns of the plan "``share`` of the work on p, the rest on q", p first or q."""
        at = self._at
        x = np.maximum(at.points[p], at.points[q])  # both used: their classes, clouds and sites
        x[at.h[p]] *= share
        x[at.h[q]] *= 1 - share
        x[at.f[q if p_first else p]] = 0.0
        x[at.g[p]] = x[at.g[q]] = 0.0
        x[at.multi] = 1.0
        return x

    def _start(self, costs: np.ndarray, alone: np.ndarray, allowed: np.ndarray, limit: np.ndarray,
               pair: np.ndarray | None) -> np.ndarray | None:
        """The best of the last plan found (when it is still feasible), the best configuration alone
        and the best plan of two phases the bound found (HiGHS checks whichever is given)."""
        at, best, value = self._at, None, np.inf
        if alone.any():
            objective = at.points @ costs
            k = int(np.flatnonzero(alone)[np.argmin(objective[alone])])
            best, value = at.points[k], objective[k]
        if pair is not None and pair @ costs < value:
            best, value = pair, pair @ costs
        last = self._best
        if last is not None and last @ costs < value and not (last[at.y] > 0.5)[~allowed].any():
            capped = np.array([self.model.activity(at.capped[name], last[None, :])[0] for name in CAPPED_ROWS])
            if (capped <= limit * (1 + 1e-9) + FEASIBILITY).all():
                best = last
        return best


def _highs_model(model: MipModel):
    try:
        from planner.highs import HighsModel
    except ImportError:  # no highspy: PuLP and CBC
        return None
    return HighsModel(model)


def _formulate(configs: list[Config], work: float, limits: Limits) -> tuple[MipModel, _Layout]:
    """The plan model (see the module doc): rows whose bound a solve sets (:data:`CAPPED_ROWS`)
    start without a limit, the objectives are named as in :data:`OBJECTIVES`.

    ``g_k`` (k alone is the whole plan) and ``m = 1 - sum(g)`` change no plan, only the LP
    relaxation: a plan is one configuration doing all the work (``h_k >= W / rate_k``), or pays
    at least one switch (``sum(y - f) >= m``), and the cost objective is at least the cost of
    the configuration alone, or a bound on plans of more phases (:meth:`PlanModel._multi_bound`)."""
    m = MipModel()
    n = len(configs)
    R = limits.switch_hours
    h = np.array([m.column(f"h{k}") for k in range(n)])
    y = np.array([m.binary(f"y{k}") for k in range(n)])
    f = np.array([m.binary(f"f{k}") for k in range(n)])
    g = np.array([m.binary(f"g{k}") for k in range(n)])
    multi = m.column("m", 0.0, 1.0)
    classes = sorted({PURCHASE_CLASS[c.purchase] for c in configs})
    u = {cls: m.binary(f"u{cls}") for cls in classes}
    clouds = sorted({c.pool.cloud for c in configs})
    v = {cloud: m.binary(f"v{i}") for i, cloud in enumerate(clouds)}  # cloud used
    # Data staged once per site a plan uses (z), whatever number of phases run there.
    staged = _staged_sites(configs)
    z = {site: m.binary(f"z{i}") for i, site in enumerate(staged)}

    cost, extra, waits, waits_p90, carbon, nodes = [], [], [], [], [], []
    for k, c in enumerate(configs):
        switch = R * c.burn + c.entry_cost
        cost += [(h[k], c.burn + c.egress_per_hour), (y[k], c.fixed_usd + switch), (f[k], c.start_cost - switch)]
        switch_h = R + c.entry_hours
        extra += [(y[k], switch_h), (f[k], c.start_hours - switch_h)]
        waits += [(h[k], c.wait_per_hour), (y[k], c.launch_wait_hours)]
        waits_p90 += [(h[k], c.wait_p90_per_hour), (y[k], c.launch_wait_p90_hours)]
        carbon += [(h[k], c.kg_per_hour), (y[k], c.kg_per_hour * switch_h),
                   (f[k], c.kg_per_hour * (c.start_hours - switch_h))]
        nodes.append((y[k], c.nodes))
    for site, (usd, hrs) in staged.items():
        cost.append((z[site], usd))
        extra.append((z[site], hrs))
    hours = [(h[k], 1.0) for k in range(n)] + extra + waits
    p90_hours = [(h[k], c.p90_factor) for k, c in enumerate(configs)] + extra + waits_p90
    # "simple": what a person reads as a simpler plan, in strict order (the weights keep
    # one more phase dearer than any clouds-and-nodes saving): phases, clouds, total nodes.
    node_weight = limits.max_phases * max(c.nodes for c in configs) + 1
    simple = ([(y[k], node_weight * (len(clouds) + 1)) for k in range(n)]
              + [(col, node_weight) for col in v.values()] + nodes)
    m.objective("cost", cost + [(col, TIE_BREAK * coef) for col, coef in hours])  # cost ties go to the faster plan
    m.objective("time", hours + [(col, TIE_BREAK * coef) for col, coef in cost])
    m.objective("p90_time", p90_hours + [(col, TIE_BREAK * coef) for col, coef in cost])
    m.objective("carbon", carbon + [(col, TIE_BREAK * coef) for col, coef in cost])
    m.objective("simple", simple)

    # In thousandths of the work: in tokens (1e10) the row's rounding alone broke the solver's 1e-6
    # feasibility tolerance (an infeasible plan model ended in HiGHS's "Solve error"); in shares that
    # tolerance would let a plan do a millionth less than the work.
    m.row("work", [(h[k], WORK_SCALE * c.rate / work) for k, c in enumerate(configs)], lower=WORK_SCALE)
    whole = np.array([work / c.rate for c in configs])
    single_ok = np.array([c.max_hours is None or c.max_hours >= w for c, w in zip(configs, whole)])
    for k, c in enumerate(configs):
        cap = whole[k] if c.max_hours is None else min(whole[k], c.max_hours)
        m.row(f"link{k}", [(h[k], 1.0), (y[k], -cap)], upper=0.0)
        m.row(f"first_used{k}", [(f[k], 1.0), (y[k], -1.0)], upper=0.0)
        cls = PURCHASE_CLASS[c.purchase]
        m.row(f"class{k}", [(y[k], 1.0), (u[cls], -1.0)], upper=0.0)
        m.row(f"cloud{k}", [(y[k], 1.0), (v[c.pool.cloud], -1.0)], upper=0.0)
        for earlier in (e for e in classes if e < cls):
            m.row(f"order{k}_{earlier}", [(f[k], 1.0), (u[earlier], 1.0)], upper=1.0)
        if c.site in z:
            m.row(f"staged{k}", [(y[k], 1.0), (z[c.site], -1.0)], upper=0.0)
        # g_k: k is the first phase and does all the work (not possible past a reservation's hours)
        m.row(f"single{k}", [(g[k], 1.0), (f[k], -1.0)], upper=0.0)
        if single_ok[k]:
            m.row(f"whole{k}", [(h[k], 1.0), (g[k], -whole[k])], lower=0.0)
        else:
            m.upper[g[k]] = 0.0
    m.row("multi", [*((g[k], 1.0) for k in range(n)), (multi, 1.0)], lower=1.0, upper=1.0)
    m.row("switch", [*((y[k], 1.0) for k in range(n)), *((f[k], -1.0) for k in range(n)), (multi, -1.0)],
          lower=0.0)
    # A site's copy is needed as soon as any work runs there: z >= the share of the work done
    # in the site.  Implied by the rows above for integral z, but it makes the LP relaxation
    # pay for staging in proportion, instead of next to nothing (found by the 3 TB dataset
    # in another cloud, whose solves took seconds).
    for i, site in enumerate(staged):
        m.row(f"staged_share{i}", [*((h[k], c.rate / work) for k, c in enumerate(configs) if c.site == site),
                                   (z[site], -1.0)], upper=0.0)
    # Phases run one after another, so configurations of one reservation share its hours.
    reserved: dict[tuple, list[int]] = {}
    for k, c in enumerate(configs):
        if c.max_hours is not None:
            reserved.setdefault(c.family, []).append(k)
    for i, members in enumerate(reserved.values()):
        m.row(f"reservation{i}", [(h[k], 1.0) for k in members], upper=configs[members[0]].max_hours)
    m.row("one_first", [(f[k], 1.0) for k in range(n)], lower=1.0, upper=1.0)
    m.row("phases", [(y[k], 1.0) for k in range(n)], upper=limits.max_phases)
    # Always present, so a HiGHS re-solve only moves their bounds (a huge bound = no limit).
    # hours and carbon: caps for the simplest plan within a tolerance of the optimum.
    # The cap's reserve of the dearest phase: r >= S burn_k y_k, in the budget row only (not a cost).
    reserve, r = [], None
    if limits.stop_reserve_hours > 0:
        r = m.column("r")
        for k, c in enumerate(configs):
            m.row(f"reserve{k}", [(y[k], limits.stop_reserve_hours * c.burn), (r, -1.0)], upper=0.0)
        reserve = [(r, 1.0)]
    capped = {name: m.row(name, terms, upper=_NO_LIMIT)
              for name, terms in (("deadline", p90_hours), ("budget", cost + reserve), ("hours", hours),
                                  ("carbon", carbon))}
    capped["cost"] = m.row("cost", cost, upper=_NO_LIMIT) if reserve else capped["budget"]

    # Each configuration alone as a plan: its own columns set, as the rows above read them.
    points = np.zeros((n, len(m.names)))
    ks = np.arange(n)
    points[ks, h] = whole
    points[ks, y] = points[ks, f] = points[ks, g] = 1.0
    for k, c in enumerate(configs):
        points[k, u[PURCHASE_CLASS[c.purchase]]] = points[k, v[c.pool.cloud]] = 1.0
        if c.site in z:
            points[k, z[c.site]] = 1.0
        if r is not None:
            points[k, r] = limits.stop_reserve_hours * c.burn
    single = np.column_stack([m.activity(capped[name], points) for name in CAPPED_ROWS])
    single[~single_ok] = np.inf
    objective = m.cost_vector("cost")
    alone = points @ objective
    # Its coefficient of m is the bound each solve sets (0: none).
    bound_row = m.row("plan_bound", [*((col, coef) for col, coef in enumerate(objective)),
                                     *((g[k], -alone[k]) for k in range(n) if single_ok[k])], lower=0.0)
    p90 = np.zeros(len(m.names))
    for col, coef in m.row_terms(capped["deadline"]):
        p90[col] = coef
    return m, _Layout(h=h, y=y, f=f, g=g, multi=multi, capped=capped, bound_row=bound_row, points=points,
                      single=single, whole_cost=objective[h] * whole, whole_p90=p90[h] * whole,
                      phase_cost=objective[y], phase_p90=p90[y], first_cost=objective[y] + objective[f],
                      first_p90=p90[y] + p90[f],
                      purchase_class=np.array([PURCHASE_CLASS[c.purchase] for c in configs]))


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
    box budget x deadline."""
    # A phase's one-off transfers (staging, a resumed checkpoint's load) belong to its point: a mix
    # pays at least the convex combination of them, so the condition stays necessary.
    cost = np.array([work * (c.burn + c.egress_per_hour) / c.rate + c.fixed_usd + c.stage_usd + c.start_cost
                     for c in configs])
    time = np.array([work * (c.p90_factor + c.wait_p90_per_hour) / c.rate + c.stage_hours + c.start_hours
                     + c.launch_wait_p90_hours for c in configs])
    deadline = limits.deadline_hours * (1 + 1e-9) if limits.deadline_hours is not None else np.inf
    budget = limits.budget_usd * (1 + 1e-9) if limits.budget_usd is not None else np.inf
    return cheapest_mix(cost, time, deadline) <= budget


def cheapest_mix(cost: np.ndarray, time: np.ndarray, limit: float) -> float:
    """The least ``sum(s * cost)`` over shares ``s >= 0`` summing to 1 with ``sum(s * time) <= limit``
    (inf when none): one point within the limit, or a mix of one within and one past it that
    lands exactly on it."""
    inside = time <= limit
    if not inside.any():
        return np.inf
    best = float(cost[inside].min())
    if inside.all():
        return best
    ti, ci = time[inside][:, None], cost[inside][:, None]
    tj, cj = time[~inside][None, :], cost[~inside][None, :]
    share = (tj - limit) / (tj - ti)  # weight on the inside point that lands exactly on the limit
    return min(best, float((share * ci + (1 - share) * cj).min()))
