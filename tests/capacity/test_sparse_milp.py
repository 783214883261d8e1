"""The capacity models' solver wrapper: whole counts where the model leaves them continuous, and a
process whose HiGHS thread pool another solver started."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from planner.capacity.model import whole_purchases
from planner.capacity.sparse_milp import SparseMilp

REPO = Path(__file__).resolve().parents[2]


def test_a_solve_runs_on_a_thread_pool_another_solver_started_with_more_threads() -> None:
    # HiGHS sizes its one pool per process by the first solve; the capacity model asks for one
    # thread, which HiGHS refuses (kError, "Not Set") on a pool of two.  A fresh process: the pool
    # cannot be shrunk again.
    script = textwrap.dedent("""
        import highspy
        from planner.capacity.sparse_milp import SparseMilp
        first = highspy.Highs()
        first.setOptionValue("output_flag", False)
        first.setOptionValue("threads", 2)
        lp = highspy.HighsLp()
        lp.num_col_, lp.col_cost_, lp.col_lower_, lp.col_upper_ = 1, [1.0], [0.0], [1.0]
        first.passModel(lp)
        assert first.run() == highspy.HighsStatus.kOk
        m = SparseMilp()
        x = m.column(1.0, 0, 10, integer=True)
        m.row({x: 2.0}, lower=5.0)
        print(m.solve()[x])
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[-1]) == 3.0


def test_fractional_counts_from_the_solver_are_made_whole_at_the_same_cost() -> None:
    # Two unit columns a, b (continuous) and one integer column n: a + b + 2n >= 3 at costs 1, 1, 2.
    # (a, b, n) = (0.5, 0.5, 1) is optimal but not whole; the fix keeps n and re-solves the rest.
    m = SparseMilp()
    a, b = m.column(1.0, 0, 5), m.column(1.0, 0, 5)
    n = m.column(2.0, 0, 5, integer=True)
    m.row({a: 1.0, b: 1.0, n: 2.0}, lower=3.0)
    values = whole_purchases(m, np.array([0.5, 0.5, 1.0]), [(None, [a, b], [n])], 1e-6, 10.0)
    assert all(abs(v - round(v)) < 1e-9 for v in values)
    assert values[a] + values[b] + 2 * values[n] >= 3 - 1e-9
    assert float(np.dot(m.cost, values)) == 3.0
