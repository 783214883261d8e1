"""A small sparse MILP handed straight to HiGHS (highspy), for the capacity models.

The capacity models are a few thousand columns per GPU class and are solved many times per
report (plan, single-option baselines, +-20%, robust, replay); building them through PuLP's
expression objects cost as much as some of the solves, and PuLP's HiGHS interface cannot pass
a MIP start.  Columns and rows are collected as arrays and passed to HiGHS in one call.

Solver options (they change how HiGHS searches, not what it proves: the gap stays ``gap``,
1e-6 by default), each measured on the mixed-node-size benchmark (bench/capacity.py, synthetic
case; docs/capacity.md, "Speed"):

* a small cut pool and no restarts: HiGHS otherwise spends most of its time in root cut
  separation that barely moves the bound (thousands of cuts per round);
* no sub-MIP heuristics (RINS, RENS, root reduced cost): they were most of a hard class's root
  time, and the root's rounding heuristics and the first branches find the optimum anyway;
* pseudocosts trusted from the first branching (no strong branching to make them reliable): on
  the many near-identical reservation columns it cost more than the nodes it saved;
* one thread: HiGHS's worker threads spin while they wait for tasks these small models rarely
  give them, CPU time for no shorter wall time.  HiGHS keeps one thread pool per process, sized
  by its first solve; in a process whose pool another solver started with more threads, a
  solve asking for one refuses to start, and runs on the pool it has instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import highspy
import numpy as np

from planner.errors import SolverError
from planner.highs import new_highs, rowwise_lp, run_highs

SEARCH_OPTIONS = {"mip_pool_soft_limit": 20, "mip_allow_restart": False, "mip_heuristic_run_rins": False,
                  "mip_heuristic_run_rens": False, "mip_heuristic_run_root_reduced_cost": False, "threads": 1,
                  "mip_pscost_minreliable": 0}


class SparseMilp:
    """Minimise ``cost @ x + constant`` subject to row bounds; columns may be integer."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.integer: list[bool] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []
        self._starts: list[int] = [0]
        self._index: list[int] = []
        self._value: list[float] = []
        self.constant = 0.0

    @property
    def columns(self) -> int:
        return len(self.cost)

    def column(self, cost: float, lower: float, upper: float, *, integer: bool = False) -> int:
        self.cost.append(float(cost))
        self.lower.append(float(lower))
        self.upper.append(math.inf if upper is None else float(upper))
        self.integer.append(integer)
        return len(self.cost) - 1

    def relaxed(self) -> SparseMilp:
        """A copy with every column continuous (its LP relaxation); the copy's bounds may be changed."""
        out = SparseMilp()
        out.cost, out.lower, out.upper = self.cost, list(self.lower), list(self.upper)
        out.integer = [False] * self.columns
        out.row_lower, out.row_upper = self.row_lower, self.row_upper
        out._starts, out._index, out._value = self._starts, self._index, self._value
        out.constant = self.constant
        return out

    def row(self, coefficients: Mapping[int, float], lower: float = -math.inf, upper: float = math.inf) -> int:
        for j, v in coefficients.items():
            if v:
                self._index.append(j)
                self._value.append(float(v))
        self._starts.append(len(self._index))
        self.row_lower.append(float(lower))
        self.row_upper.append(float(upper))
        return len(self.row_lower) - 1

    def solve(self, *, gap: float = 1e-6, abs_gap: float | None = None, time_limit_s: float = 120.0,
              start: Mapping[int, float] | None = None) -> np.ndarray:
        """The optimal column values; ``start`` (column -> value, integers at least) is a MIP start."""
        options = {**SEARCH_OPTIONS, "mip_rel_gap": gap, "time_limit": float(time_limit_s)}
        if abs_gap is not None:
            options["mip_abs_gap"] = abs_gap
        h = new_highs(options)
        h.passModel(rowwise_lp(cost=self.cost, lower=self.lower, upper=self.upper, row_lower=self.row_lower,
                               row_upper=self.row_upper, starts=self._starts, index=self._index, value=self._value,
                               integer=self.integer, offset=self.constant))
        if start:
            index = np.fromiter(start.keys(), dtype=np.int32, count=len(start))
            value = np.fromiter(start.values(), dtype=float, count=len(start))
            h.setSolution(len(start), index, value)
        run_highs(h)
        status = h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise SolverError(f"the capacity model did not solve (HiGHS status {h.modelStatusToString(status)})")
        return np.asarray(h.getSolution().col_value, dtype=float)


def objective(milp: SparseMilp, values: Sequence[float]) -> float:
    return float(np.dot(milp.cost, values)) + milp.constant
