"""Fuzzed catalog rows: `planner quote --catalog` answers with a quote or exit 2, never a traceback.

A lying row must never win either: whatever the fuzz does, a plan that comes back is priced
from rows a cloud could sell (finite, positive, not absurdly cheap).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cli import main
from tests.run.helpers import HEADER

pytestmark = pytest.mark.faults

COLUMNS = HEADER.split(",")
ROWS = [
    ["aws", "us-east-1", "use1-az1", "g4dn.xlarge", "T4", "1", "16", "4", "16", "0.526", "0.16", "", "", "0.5", "",
     "2026-11-30", "fuzz"],
    ["gcp", "us-central1", "us-central1-a", "n1-standard-4-t4", "T4", "1", "16", "4", "16", "0.55", "0.18", "", "",
     "0.5", "", "2026-11-30", "fuzz"],
    ["azure", "eastus", "", "Standard_NC24ads_A100_v4", "A100", "1", "80", "24", "220", "3.67", "0.9", "", "", "0.5",
     "", "2026-11-30", "fuzz"],
]
NASTY = st.sampled_from([
    "", "inf", "-inf", "nan", "NaN", "1e308", "1e-300", "1e-12", "-1", "0", "0_1", "1_000", "0x10", "1e9",
    "abc", "9999-12-31", "1900-01-01", "2026-13-45", " 1", "1,5", "\x00", "\x1b[31m", "x" * 2000, "T4", "H100",
    "aws", "mars", "spot",
])
JOB = """
name = "fuzz"
[workload]
steps = 1000
[workload.throughput]
T4 = 1.0
A100 = 4.0
[constraints]
deadline_hours = 48
budget_usd = 500
max_nodes = 2
[purchase]
allow = ["spot", "on_demand"]
"""


@settings(max_examples=int(os.environ.get("DANLU_FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cells=st.lists(st.tuples(st.integers(0, len(ROWS) - 1), st.integers(0, len(COLUMNS) - 1), NASTY),
                   min_size=1, max_size=4),
    duplicate=st.booleans(),
)
def test_quote_with_fuzzed_catalog_rows_never_tracebacks(tmp_path: Path, capsys, cells, duplicate) -> None:
    rows = [list(r) for r in ROWS]
    if duplicate:
        rows.append(list(ROWS[0]))  # the same offering twice: identical unless the fuzz changes one
    for row, column, value in cells:
        rows[row][column] = value
    catalog = tmp_path / "offerings.csv"
    catalog.write_text("\n".join([HEADER] + [",".join(r) for r in rows]) + "\n")
    job = tmp_path / "job.toml"
    job.write_text(JOB)
    capsys.readouterr()
    rc = main(["quote", str(job), "--catalog", str(catalog), "--json", "--top", "1"])
    out, err = capsys.readouterr()
    assert rc in (0, 2), err
    assert "Traceback" not in err
    if rc == 0:
        plan = json.loads(out)["plan"]
        for phase in plan["phases"]:
            assert 1e-3 <= phase["hourly_usd"] < 1e4, phase
