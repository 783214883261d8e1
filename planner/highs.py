"""The plan model in HiGHS: loaded once from :class:`~planner.mip.MipModel`'s arrays, re-solved with
new costs and bounds and a MIP start.

A quote solves one model a dozen times (the plan, the simplest plan within the tolerance,
alternatives without a pool, the frontier's deadlines); only the objective, a few row bounds and
the banned columns change, so HiGHS keeps the model and each solve changes just those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import highspy
import numpy as np

from planner.errors import SolverError
from planner.mip import MipModel, Values, quiet_stdout

OPTIONS = {
    "output_flag": False,
    # One thread: HiGHS's worker threads spin while they wait for tasks, which this model's small
    # solves rarely give them; with the default (half the cores) a quote burnt 0.2-0.3 s more CPU for
    # no shorter wall time, on a machine that also does other work (bench/quote.py).
    "threads": 1,
    # Presolve finds next to nothing to remove in this model (every column is a priced
    # configuration) and was most of the time of a solve: 2.0 s -> 0.9 s for the frontier of a
    # 128-node quote (bench/quote.py).
    "presolve": "off",
    # A small cut pool: the root's separation rounds otherwise pile up thousands of cuts on the
    # staging rows (1.0 s -> 0.26 s for a frontier point of a 3 TB dataset in another cloud).
    "mip_pool_soft_limit": 50,
    # Sub-MIP heuristics (RINS, RENS) and feasibility jump were most of a hard root's time; every
    # re-solve gets the last plan as a start instead.  The optimum is still proven (gap 1e-7).
    "mip_heuristic_run_rins": False,
    "mip_heuristic_run_rens": False,
    "mip_heuristic_run_feasibility_jump": False,
    # Each solve starts from the best configuration alone, the best two-phase plan or the last plan,
    # and the relaxation's bound is that of plans of one or two phases: the root's own heuristics and
    # symmetry detection (configurations are not interchangeable: pruning dropped the duplicates)
    # found nothing those had not, and cost a tenth of a solve.
    "mip_heuristic_effort": 0.0,
    "mip_heuristic_run_root_reduced_cost": False,
    "mip_detect_symmetry": False,
    "mip_abs_gap": 1e-6,
}


def rowwise_lp(*, cost: Sequence[float], lower: Sequence[float], upper: Sequence[float],
               row_lower: Sequence[float], row_upper: Sequence[float], starts: Sequence[int], index: Sequence[int],
               value: Sequence[float], integer: Sequence[bool], offset: float = 0.0) -> highspy.HighsLp:
    """A HiGHS model from its arrays, the matrix row by row (``starts`` into ``index`` and ``value``)."""
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(cost), len(row_lower)
    lp.col_cost_ = np.asarray(cost, dtype=float)
    lp.col_lower_ = np.asarray(lower, dtype=float)
    lp.col_upper_ = np.asarray(upper, dtype=float)
    lp.row_lower_ = np.asarray(row_lower, dtype=float)
    lp.row_upper_ = np.asarray(row_upper, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.asarray(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.asarray(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.asarray(value, dtype=float)
    lp.offset_ = offset
    if any(integer):
        kinds = highspy.HighsVarType
        lp.integrality_ = [kinds.kInteger if i else kinds.kContinuous for i in integer]
    return lp


def new_highs(options: Mapping[str, object]) -> highspy.Highs:
    """A silent HiGHS with ``options`` (its banner, printed from C++ on first use, would break ``--json``)."""
    with quiet_stdout():
        highs = highspy.Highs()
    highs.setOptionValue("output_flag", False)
    for key, value in options.items():
        highs.setOptionValue(key, value)
    return highs


def run_highs(highs: highspy.Highs) -> None:
    """Solve. HiGHS's thread pool is one per process, sized by the first solve: one from PuLP or another
    model with the default (half the cores) makes a solve asking for one thread refuse to start. Such a
    process solves on the pool it has."""
    with quiet_stdout():
        if highs.run() == highspy.HighsStatus.kError and highs.getModelStatus() == highspy.HighsModelStatus.kNotset:
            highs.setOptionValue("threads", 0)
            highs.run()


class HighsModel:
    """One :class:`MipModel` in HiGHS, re-solved with new costs and bounds."""

    def __init__(self, model: MipModel) -> None:
        n = len(model.names)
        lp = rowwise_lp(cost=np.zeros(n), lower=model.lower, upper=model.upper, row_lower=model.row_lower,
                        row_upper=model.row_upper, starts=model.starts, index=model.index, value=model.value,
                        integer=model.integer)
        self.highs = new_highs(OPTIONS)
        if self.highs.passModel(lp) != highspy.HighsStatus.kOk:
            raise SolverError("HiGHS refused the plan model; this is a bug, please report it with the job file")
        self.columns = n
        self._all = np.arange(n, dtype=np.int32)
        self._row_lower = model.row_lower
        self._lower = np.asarray(model.lower, dtype=float)
        self._upper = np.asarray(model.upper, dtype=float)
        self._changed_columns: set[int] = set()

    def solve(self, costs: np.ndarray, *, row_upper: Mapping[int, float], column_upper: Mapping[int, float],
              coefficients: Mapping[tuple[int, int], float], start: np.ndarray | None, gap: float,
              node_limit: int | None = None) -> Values | None:
        """Minimise ``costs`` with the rows of ``row_upper`` and the columns of ``column_upper`` given
        those upper bounds (every other column its own) and the matrix entries of ``coefficients``
        (row, column) set; ``None``: infeasible.  ``node_limit`` bounds the branch and bound (a
        deterministic effort, not a time): the best plan found by then, with its gap to the bound,
        or ``None`` when none was found."""
        h = self.highs
        h.setOptionValue("mip_rel_gap", gap)
        h.setOptionValue("mip_max_nodes", node_limit if node_limit is not None else highspy.kHighsIInf)
        h.changeColsCost(self.columns, self._all, costs)
        for row, upper in row_upper.items():
            h.changeRowBounds(row, self._row_lower[row], upper)
        for (row, col), value in coefficients.items():
            h.changeCoeff(row, col, value)
        # Columns the last solve bounded and this one does not get their own bounds back.  (Sets, not
        # np.union1d: np.unique imports numpy.ma, 60 ms of a quote's start.)
        changed = sorted(self._changed_columns | column_upper.keys())
        if changed:
            cols = np.array(changed, dtype=np.int32)
            upper = np.array([column_upper.get(c, self._upper[c]) for c in changed])
            h.changeColsBounds(len(cols), cols, self._lower[cols], upper)
        self._changed_columns = set(column_upper)
        if start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = list(start)
            h.setSolution(sol)  # HiGHS checks it and ignores it when it is infeasible now
        run_highs(h)
        status = h.getModelStatus()
        info = h.getInfo()
        if node_limit is not None and status == highspy.HighsModelStatus.kSolutionLimit:
            if info.primal_solution_status != 2:  # no feasible plan within the effort allowed
                return None
            return Values(np.asarray(h.getSolution().col_value), max(float(info.mip_gap), 0.0))
        if status == highspy.HighsModelStatus.kOptimal:
            return Values(np.asarray(h.getSolution().col_value))
        if status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
            return None
        if status == highspy.HighsModelStatus.kUnbounded:
            raise SolverError("the plan model is unbounded; this is a bug, please report it with the job file")
        raise SolverError(f"HiGHS could not solve the plan: {h.modelStatusToString(status)}")
