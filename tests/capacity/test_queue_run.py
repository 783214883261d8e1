"""`planner run QUEUE.toml` runs each job as scheduled: its own run directory and controller, its
first slot's pool, started at its slot, with the queue's deadline (local provider, tiny jobs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from tests.run.helpers import HEADER, digits_entrypoint, processes_of

pytestmark = pytest.mark.ddp

STEPS = 20
SLOT_HOURS = 0.02
TIME_SCALE = 60.0
DEADLINE = 1.0  # hours: a tiny job's start-up on a busy machine is a minute of simulated time


def _job(name: str, submit: float) -> str:
    return f"""
[[job]]
name = "{name}"
submit_hours = {submit}
[job.workload]
steps = {STEPS}
checkpoint_gb = 0.001
[job.workload.throughput]
T4 = 0.85
[job.overheads]
restart_minutes = 0.1
[job.constraints]
deadline_hours = {DEADLINE}
budget_usd = 5
max_nodes = 1
[job.run]
entrypoint = {json.dumps(digits_entrypoint(STEPS))}
nproc_per_node = 1
"""


def test_a_queue_runs_each_job_through_its_own_controller_as_scheduled(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(HEADER + "\naws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,0.526,0.16,,,0.0,,2026-11-30,test\n")
    queue = tmp_path / "queue.toml"
    queue.write_text(f'name = "q"\nslot_hours = {SLOT_HOURS}\nhorizon_slots = 50\n[purchase]\nallow = ["on_demand"]\n'
                     '[[reservation]]\ncloud = "aws"\nregion = "us-east-1"\ninstance_type = "g4dn.xlarge"\ncount = 1\n'
                     + _job("a", 0) + _job("b", SLOT_HOURS / 2))  # b arrives mid-slot 0: it may start at slot 1
    root = tmp_path / "runs"
    rc = main(["run", str(queue), "--catalog", str(catalog), "--run-dir", str(root), "--time-scale", str(TIME_SCALE)])
    out = json.loads((root / "queue.json").read_text())
    assert rc == 0, out
    assert [j["job"] for j in out["jobs"]] == ["a", "b"] and out["status"] == "completed"
    origins = {}
    for name, start_slot in (("a", 0), ("b", 1)):
        run_dir = root / name
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps"] == STEPS
        plan = json.loads((root / f"{name}.plan.json").read_text())
        assert plan["plan"]["phases"][0]["start_slot"] == start_slot
        assert plan["plan"]["phases"][0]["purchase"] == "reserved_held"  # the held node is free: the schedule uses it
        launches = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()
                    if json.loads(line)["event"] == "launch"]
        assert "reserved_held" in launches[0]["pool"]  # the controller started on the schedule's pool
        state = json.loads((run_dir / "state.json").read_text())
        # the queue's deadline (submit + DEADLINE), counted from the job's own start slot
        left = DEADLINE if name == "a" else SLOT_HOURS / 2 + DEADLINE - SLOT_HOURS
        assert state["job"]["constraints"]["deadline_hours"] == pytest.approx(left)
        origins[name] = state["origin"]
        assert summary["cost_usd"] == 0  # held capacity: $0 an hour
    # Each job waited for its slot, counted from the queue's start (not from a's start: a's own
    # start-up on a busy machine can take longer than b's and say nothing about the schedule).
    assert origins["a"] >= out["origin"]
    assert origins["b"] - out["origin"] >= SLOT_HOURS * 3600 / TIME_SCALE - 0.05
    assert processes_of(str(root)) == []
