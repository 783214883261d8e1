"""A mixed-integer linear model as arrays, and the PuLP/CBC fallback that solves it without highspy.

:mod:`planner.milp` formulates the plan model once into a :class:`MipModel` (named columns,
rows with bounds, a sparse row-wise matrix, named objectives); :mod:`planner.highs` loads those
arrays into HiGHS in one call and re-solves them.  Only when highspy is absent is the model
handed to PuLP, the modelling layer that reaches CBC: building PuLP expressions costs more than
the solves of a quote, so the HiGHS path never imports it.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from planner.errors import SolverError

INF = math.inf


@dataclass(slots=True)
class MipModel:
    """Columns and rows appended one by one, read as arrays (:meth:`matrix`).  Objectives are
    sparse ``{column: coefficient}`` maps plus a constant, by name."""

    names: list[str] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    row_names: list[str] = field(default_factory=list)
    row_lower: list[float] = field(default_factory=list)
    row_upper: list[float] = field(default_factory=list)
    starts: list[int] = field(default_factory=lambda: [0])
    index: list[int] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    objectives: dict[str, tuple[dict[int, float], float]] = field(default_factory=dict)

    def column(self, name: str, lower: float = 0.0, upper: float = INF, *, integer: bool = False) -> int:
        self.names.append(name)
        self.lower.append(lower)
        self.upper.append(upper)
        self.integer.append(integer)
        return len(self.names) - 1

    def binary(self, name: str) -> int:
        return self.column(name, 0.0, 1.0, integer=True)

    def row(self, name: str, terms: Iterable[tuple[int, float]], lower: float = -INF, upper: float = INF) -> int:
        """``lower <= sum(coef * column) <= upper``; a column's terms are summed, zeros left out."""
        coefs: dict[int, float] = {}
        for col, coef in terms:
            coefs[col] = coefs.get(col, 0.0) + coef
        for col, coef in coefs.items():
            if coef:
                self.index.append(col)
                self.value.append(coef)
        self.starts.append(len(self.index))
        self.row_names.append(name)
        self.row_lower.append(lower)
        self.row_upper.append(upper)
        return len(self.row_names) - 1

    def objective(self, name: str, terms: Iterable[tuple[int, float]], constant: float = 0.0) -> None:
        coefs: dict[int, float] = {}
        for col, coef in terms:
            coefs[col] = coefs.get(col, 0.0) + coef
        self.objectives[name] = (coefs, constant)

    def cost_vector(self, name: str) -> np.ndarray:
        vec = np.zeros(len(self.names))
        coefs, _ = self.objectives[name]
        if coefs:
            vec[np.fromiter(coefs.keys(), dtype=np.int64)] = np.fromiter(coefs.values(), dtype=float)
        return vec

    def row_terms(self, row: int) -> list[tuple[int, float]]:
        lo, hi = self.starts[row], self.starts[row + 1]
        return list(zip(self.index[lo:hi], self.value[lo:hi]))

    def activity(self, row: int, points: np.ndarray) -> np.ndarray:
        """The row's value at each of ``points`` (points x columns)."""
        lo, hi = self.starts[row], self.starts[row + 1]
        return points[:, self.index[lo:hi]] @ np.asarray(self.value[lo:hi])


@dataclass(frozen=True, slots=True)
class Values:
    """Column values of a solved model."""

    columns: np.ndarray
    gap: float = 0.0  # relative optimality gap when a node limit stopped the search
    start: bool = True  # the columns may start the next solve (HiGHS's own solution)


def solve_with_pulp(model: MipModel, costs: np.ndarray, row_upper: Mapping[int, float],
                    column_upper: Mapping[int, float], coefficients: Mapping[tuple[int, int], float]) -> Values | None:
    """Minimise ``costs`` over ``model`` with PuLP's CBC, the rows in ``row_upper`` and the columns in
    ``column_upper`` given those upper bounds and the (row, column) entries of ``coefficients`` set;
    ``None``: infeasible."""
    import pulp

    prob = pulp.LpProblem("danlu_plan", pulp.LpMinimize)
    var = _variable_factory(prob)
    cols = [
        var(name, lo, None if math.isinf(hi) else hi,
            pulp.LpBinary if integer and lo == 0 and hi == 1 else pulp.LpInteger if integer else pulp.LpContinuous)
        for name, lo, hi, integer in zip(model.names, model.lower, model.upper, model.integer)
    ]
    for i, hi in column_upper.items():
        cols[i].upBound = hi
    changed: dict[int, dict[int, float]] = {}
    for (r, c), v in coefficients.items():
        changed.setdefault(r, {})[c] = v
    for r, name in enumerate(model.row_names):
        terms = dict(model.row_terms(r)) | changed.get(r, {})
        expr = pulp.LpAffineExpression([(cols[c], v) for c, v in terms.items() if v])
        lo, hi = model.row_lower[r], row_upper.get(r, model.row_upper[r])
        if lo == hi:
            prob += expr == lo, name
            continue
        if not math.isinf(lo):
            prob += expr >= lo, f"{name}_lo"
        if not math.isinf(hi):
            prob += expr <= hi, name
    prob.setObjective(pulp.LpAffineExpression([(cols[i], c) for i, c in enumerate(costs) if c]))
    status = _run(prob)
    if status != pulp.LpStatusOptimal:
        return None
    return Values(np.array([v.value() or 0.0 for v in cols]), start=False)


def _variable_factory(prob):
    """PuLP >= 3.3 attaches variables to the model (the old constructor is deprecated)."""
    import pulp

    if hasattr(prob, "add_variable"):
        return lambda name, lo, hi, cat: prob.add_variable(name, lo, hi, cat=cat)
    return lambda name, lo, hi, cat: pulp.LpVariable(name, lo, hi, cat=cat)


@contextlib.contextmanager
def quiet_stdout():
    """Solvers print banners from C++ straight to fd 1; `--json` output must stay clean."""
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


def _run(prob) -> int:
    import pulp

    errors = []
    for solver in _solvers():
        try:
            with quiet_stdout():
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


def _solvers() -> list:
    import pulp

    solvers = []
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
