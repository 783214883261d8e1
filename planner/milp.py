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
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pulp

from planner.errors import SolverError
from planner.pools import Config
from pricing.pool import CLUSTER, HELD

# A team's own cluster is used first like held capacity: "the cluster, then the cloud".
PURCHASE_CLASS = {HELD: 0, CLUSTER: 0, "reserved_1y": 1, "reserved_3y": 1, "spot": 2, "on_demand": 3}
TIE_BREAK = 1e-6


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
    wait_hours: float = 0.0  # a cluster's queue before its pods start (not billed)
    data_usd: float = 0.0  # data egress: the staging copy, or streamed reads
    checkpoint_usd: float = 0.0  # checkpoint egress: the load on entry and the reloads after preemptions

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
        return sum(p.work_hours * p.config.p90_factor + p.hours - p.work_hours for p in self.phases)

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
    if not configs or work <= 0 or not _may_be_feasible(configs, work, limits):
        return None
    prob = pulp.LpProblem("danlu_plan", pulp.LpMinimize)
    idx = range(len(configs))
    var = _variable_factory(prob)
    h = [var(f"h{k}", 0, None, pulp.LpContinuous) for k in idx]
    y = [var(f"y{k}", 0, 1, pulp.LpBinary) for k in idx]
    f = [var(f"f{k}", 0, 1, pulp.LpBinary) for k in idx]
    classes = sorted({PURCHASE_CLASS[c.purchase] for c in configs})
    u = {c: var(f"u{c}", 0, 1, pulp.LpBinary) for c in classes}
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
        (R + c.entry_hours) * (y[k] - f[k]) + c.start_hours * f[k] + c.wait_hours * y[k]
        for k, c in enumerate(configs)
    ) + pulp.lpSum(hrs * z[site] for site, (_, hrs) in staged.items())
    hours = pulp.lpSum(h) + extra_hours
    p90_hours = pulp.lpSum(c.p90_factor * h[k] for k, c in enumerate(configs)) + extra_hours
    if objective == "cost":
        prob += cost
    elif objective == "time":
        prob += hours + TIE_BREAK * cost
    elif objective == "p90_time":
        prob += p90_hours + TIE_BREAK * cost
    elif objective == "carbon":
        prob += (
            pulp.lpSum(c.kg_per_hour * (h[k] + (R + c.entry_hours) * (y[k] - f[k]) + c.start_hours * f[k])
                       for k, c in enumerate(configs))
            + TIE_BREAK * cost
        )
    else:
        raise ValueError(f"unknown objective {objective!r}")

    prob += pulp.lpSum(c.rate * h[k] for k, c in enumerate(configs)) >= work, "work"
    for k, c in enumerate(configs):
        cap = work / c.rate
        if c.max_hours is not None:
            cap = min(cap, c.max_hours)
        prob += h[k] <= cap * y[k], f"link{k}"
        prob += f[k] <= y[k], f"first_used{k}"
        cls = PURCHASE_CLASS[c.purchase]
        prob += y[k] <= u[cls], f"class{k}"
        for earlier in (e for e in classes if e < cls):
            prob += f[k] + u[earlier] <= 1, f"order{k}_{earlier}"
        if c.site in z:
            prob += y[k] <= z[c.site], f"staged{k}"
    # Phases run one after another, so configurations of one reservation share its hours.
    capped: dict[tuple, list[int]] = {}
    for k, c in enumerate(configs):
        if c.max_hours is not None:
            capped.setdefault(c.family, []).append(k)
    for i, members in enumerate(capped.values()):
        prob += pulp.lpSum(h[k] for k in members) <= configs[members[0]].max_hours, f"reservation{i}"
    prob += pulp.lpSum(f) == 1, "one_first"
    prob += pulp.lpSum(y) <= limits.max_phases, "phases"
    if limits.deadline_hours is not None:
        prob += p90_hours <= limits.deadline_hours, "deadline"
    if limits.budget_usd is not None:
        prob += cost <= limits.budget_usd, "budget"
    for i, fam in enumerate(exclude_families):
        members = [y[k] for k, c in enumerate(configs) if c.family in fam]
        if members:
            prob += pulp.lpSum(members) <= 0, f"exclude{i}"

    status = _run(prob)
    if status != pulp.LpStatusOptimal:
        return None
    used = []
    for k, c in enumerate(configs):
        # A phase does a share of the work; a used-but-idle first phase (h = 0) is not one. Relative to
        # the work, so a job of seconds is not lost below an absolute tolerance.
        if (y[k].value() or 0) > 0.5 and (h[k].value() or 0) * c.rate > 1e-6 * work:
            used.append((c, h[k].value(), round(f[k].value() or 0) == 1))
    return solution_of(used, R)


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
        phases.append(Phase(config=c, hours=h + switch + load_h + stage_h + c.wait_hours, switch_hours=switch,
                            load_hours=load_h, stage_hours=stage_h, wait_hours=c.wait_hours,
                            data_usd=c.data_usd_per_hour * h + stage_usd,
                            checkpoint_usd=c.ckpt_usd_per_hour * h + load_usd))
    return Solution(tuple(phases))


def _staged_sites(configs: list[Config]) -> dict:
    """Sites whose configurations pay a one-off staging copy: site -> (USD, hours)."""
    out = {}
    for c in configs:
        if c.stage_usd or c.stage_hours:
            out.setdefault(c.site, (c.stage_usd, c.stage_hours))
    return out


def _may_be_feasible(configs: list[Config], work: float, limits: Limits) -> bool:
    """A necessary condition, checked before the MILP because proving infeasibility can take
    HiGHS seconds.  Without switch overheads, caps and the whole-term charge, a plan is a
    convex mix of "whole job on k" points (cost_k, P90 time_k), so some mix must fit in the
    box budget x deadline: the cheapest mix that meets the deadline lies on a segment
    between a point inside the deadline and one outside it."""
    # A phase's one-off transfers (staging, a resumed checkpoint's load) belong to its point: a mix
    # pays at least the convex combination of them, so the condition stays necessary.
    cost = np.array([work * (c.burn + c.egress_per_hour) / c.rate + c.fixed_usd + c.stage_usd + c.start_cost
                     for c in configs])
    time = np.array([work * c.p90_factor / c.rate + c.stage_hours + c.start_hours + c.wait_hours for c in configs])
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
