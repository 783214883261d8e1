"""Fuzzed job files: `planner quote` answers every one with exit 0 or 2, never a traceback."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cli import main
from tests.faults.toml_writer import dumps

pytestmark = pytest.mark.faults

BASE = {
    "name": "fuzz",
    "workload": {"steps": 1000.0, "throughput": {"T4": 1.0, "A10G": 1.5}, "checkpoint_gb": 1.0},
    "constraints": {"deadline_hours": 24.0, "budget_usd": 500.0, "max_nodes": 4},
    "purchase": {"allow": ["spot", "on_demand"]},
    "overheads": {"restart_minutes": 10.0},
    "alerts": {"email": ["team@example.com"], "thresholds": [0.5, 1.0]},
}
PATHS = [("name",), ("workload", "steps"), ("workload", "checkpoint_gb"), ("workload", "min_gpu_memory_gb"),
         ("workload", "throughput", "T4"), ("workload", "throughput", "A10G"), ("workload", "global_batch"),
         ("workload", "scaling"), ("constraints", "deadline_hours"), ("constraints", "budget_usd"),
         ("constraints", "max_nodes"), ("constraints", "max_gpus"), ("constraints", "regions"),
         ("constraints", "clouds"), ("constraints", "gpus"), ("purchase", "allow"),
         ("overheads", "restart_minutes"), ("overheads", "checkpoint_write_gbps"), ("alerts", "thresholds"),
         ("alerts", "smtp_url"), ("alerts", "email"), ("objective", "minimize"), ("run", "entrypoint"),
         ("run", "checkpoint_dir"), ("run", "nproc_per_node")]
NASTY = st.sampled_from([
    float("inf"), float("-inf"), float("nan"), 1e308, -1.0, 0.0, 1e-300, 0.5, 2.5, 1e18, 2**63, -(2**63), 0, 1,
    "", "x" * 5000, "nul\x00byte", "../../etc", "\x1b[31mred\x1b[0m", "gopher://x/y", "smtp://u:p@h", [], [0.0],
    [float("nan")], {"a": 1}, True, ["spot", "spot"], ["reserved_1y"], "H100", ["MI300X"],
])


def _set(doc: dict, path: tuple[str, ...], value: object) -> None:
    for key in path[:-1]:
        doc = doc.setdefault(key, {})
        if not isinstance(doc, dict):
            return
    doc[path[-1]] = value


@settings(max_examples=int(os.environ.get("DANLU_FUZZ_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.sampled_from(PATHS), NASTY), min_size=1, max_size=3))
def test_quote_never_tracebacks(tmp_path: Path, changes: list) -> None:
    doc = copy.deepcopy(BASE)
    for path, value in changes:
        _set(doc, path, value)
    job = tmp_path / "job.toml"
    job.write_text(dumps(doc))
    assert main(["quote", str(job), "--json", "--top", "1"]) in (0, 2)
