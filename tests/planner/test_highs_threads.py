"""A quote solves in a process whose HiGHS thread pool another solver already started.

HiGHS keeps one pool per process, sized by the first solve; the plan model asks for one thread,
and a pool of another size (PuLP's default is half the cores) made every plan solve stop at
"Not Set".  Each case runs in a fresh interpreter, because the pool outlives the solve.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

QUOTE = """
import json, sys
import highspy, numpy as np
threads = int(sys.argv[1])
if threads:
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", threads)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = 1, 0
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = np.array([1.0]), np.array([0.0]), np.array([3.0])
    lp.integrality_ = [highspy.HighsVarType.kInteger]
    h.passModel(lp)
    assert h.run() == highspy.HighsStatus.kOk
from planner.job import parse_job
from planner.quote import make_quote
from pricing.embedded_catalog import load_embedded_catalog
job = parse_job({"name": "t", "workload": {"model": "gpt-7b", "tokens": 5e9, "checkpoint_gb": 14},
                 "constraints": {"max_nodes": 4, "deadline_hours": 30, "budget_usd": 2000},
                 "purchase": {"allow": ["spot", "on_demand"]}})
q = make_quote(job, load_embedded_catalog(), top=0, frontier_points=0)
print(json.dumps({"status": q.status, "cost": q.plan.expected_cost_usd}))
"""


def quote_after_pool_of(threads: int) -> dict:
    out = subprocess.run([sys.executable, "-c", QUOTE, str(threads)], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("threads", [2, 3])
def test_a_pool_of_another_size_gives_the_same_plan(threads):
    alone = quote_after_pool_of(0)
    assert alone["status"] == "optimal"
    assert quote_after_pool_of(threads) == alone
