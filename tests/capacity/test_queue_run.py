"""`planner run QUEUE.toml` runs each job as scheduled: its own run directory and controller, its
first slot's pool, started at its slot, with the queue's deadline (local provider, tiny jobs)."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from planner.cli import main
from runtime.control import detach
from runtime.control.queue_held import read as read_queue_held
from tests.run.helpers import HEADER, digits_entrypoint, processes_of, queue_job_toml

pytestmark = pytest.mark.ddp

WORKERS = Path(__file__).parents[1] / "run" / "workers"

STEPS = 20
SLOT_HOURS = 0.02
TIME_SCALE = 60.0
DEADLINE = 1.0  # hours: a tiny job's start-up on a busy machine is a minute of simulated time


def _job(name: str, submit: float) -> str:
    return queue_job_toml(name, submit, steps=STEPS, deadline_hours=DEADLINE)


def test_a_queue_runs_each_job_through_its_own_controller_as_scheduled(tmp_path: Path, capsys) -> None:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(HEADER + "\naws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,0.526,0.16,,,0.0,,2026-11-30,test\n")
    queue = tmp_path / "queue.toml"
    queue.write_text(f'name = "q"\nslot_hours = {SLOT_HOURS}\nhorizon_slots = 50\n[purchase]\nallow = ["on_demand"]\n'
                     '[[reservation]]\ncloud = "aws"\nregion = "us-east-1"\ninstance_type = "g4dn.xlarge"\ncount = 1\n'
                     + _job("a", 0) + _job("b", SLOT_HOURS / 2))  # b arrives mid-slot 0: it may start at slot 1
    root = tmp_path / "runs"
    rc = main(["run", str(queue), "--catalog", str(catalog), "--run-dir", str(root), "--time-scale", str(TIME_SCALE),
               "--json"])
    out = json.loads((root / "queue.json").read_text())
    assert rc == 0, out
    assert json.loads(capsys.readouterr().out) == out  # stdout is the outcome alone, one JSON document
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
        # What a later `planner run --resume` of this job counts the held node by: the queue's window and clock.
        queue = read_queue_held(run_dir)
        assert queue is not None and queue.origin == out["origin"] and queue.time_scale == TIME_SCALE
        assert [(w.count, w.start_h, w.end_h) for w in queue.windows] == [(1, 0.0, None)]
    # Each job waited for its slot, counted from the queue's start (not from a's start: a's own
    # start-up on a busy machine can take longer than b's and say nothing about the schedule).
    assert origins["a"] >= out["origin"]
    assert origins["b"] - out["origin"] >= SLOT_HOURS * 3600 / TIME_SCALE - 0.05
    assert processes_of(str(root)) == []


def _held_in_use(root: Path, names: list[str]) -> list[tuple[float, int]]:
    """(wall time, +1 or -1) for every held node going up or down in the jobs' runs."""
    changes = []
    for name in names:
        events = [json.loads(line) for line in (root / name / "events.jsonl").read_text().splitlines()]
        held_nodes = {(e["launch"], e["node"]) for e in events
                      if e["event"] == "node_up" and e["purchase"] == "reserved_held"}
        for e in events:
            if e["event"] in ("node_up", "node_down") and (e.get("launch"), e.get("node")) in held_nodes:
                changes.append((e["wall"], 1 if e["event"] == "node_up" else -1))
        ledger_held = sqlite3.connect(root / name / "ledger.sqlite").execute(
            "SELECT COUNT(DISTINCT launch_id || '/' || node) FROM intervals WHERE purchase = 'reserved_held'").fetchone()[0]
        assert ledger_held == len(held_nodes)  # every held node billed is one the events show
    return sorted(changes, key=lambda c: (c[0], c[1]))  # a release at the same instant comes first


def test_a_queue_with_a_job_its_nodes_cannot_run_is_refused_before_the_first_job_starts(
    tmp_path: Path, capsys,
) -> None:
    """Job b's script is not there: found now, not when its slot comes after job a has run."""
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(HEADER + "\naws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,0.526,0.16,,,0.0,,2026-11-30,test\n")
    broken = _job("b", SLOT_HOURS).replace(json.dumps(digits_entrypoint(STEPS))[1:-1], '"python", "trian.py"')
    assert "trian.py" in broken
    queue = tmp_path / "queue.toml"
    queue.write_text(f'name = "q"\nslot_hours = {SLOT_HOURS}\nhorizon_slots = 50\n[purchase]\nallow = ["on_demand"]\n'
                     + _job("a", 0) + broken)
    root = tmp_path / "runs"
    rc = main(["run", str(queue), "--catalog", str(catalog), "--run-dir", str(root), "--time-scale", str(TIME_SCALE)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"{queue} job[1]: [run].entrypoint runs 'trian.py', which is not a file in" in err
    assert not root.exists()  # neither job started


def test_jobs_running_side_by_side_never_use_more_held_nodes_than_the_queue_holds(tmp_path: Path) -> None:
    # One held node, two jobs that both want it: the schedule gives it to a in slot 0 and to b from
    # slot 1 (a tenth of a minute of simulated time, a fraction of a real second at this scale), long
    # before a's start-up and training on this machine are done.  b must wait for it (or run elsewhere).
    slot = 0.005
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(HEADER + "\naws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,0.526,0.16,,,0.0,,2026-11-30,test\n")
    queue = tmp_path / "queue.toml"
    queue.write_text(f'name = "q"\nslot_hours = {slot}\nhorizon_slots = 200\n[purchase]\nallow = ["on_demand"]\n'
                     '[[reservation]]\ncloud = "aws"\nregion = "us-east-1"\ninstance_type = "g4dn.xlarge"\ncount = 1\n'
                     + _job("a", 0) + _job("b", slot / 2))
    root = tmp_path / "runs"
    rc = main(["run", str(queue), "--catalog", str(catalog), "--run-dir", str(root), "--time-scale", str(TIME_SCALE)])
    out = json.loads((root / "queue.json").read_text())
    assert rc == 0 and out["status"] == "completed", out
    for name in ("a", "b"):
        plan = json.loads((root / f"{name}.plan.json").read_text())
        assert plan["plan"]["phases"][0]["purchase"] == "reserved_held"  # both were scheduled on the held node
    in_use, most = 0, 0
    changes = _held_in_use(root, ["a", "b"])
    assert changes  # the held node was used
    for _, change in changes:
        in_use += change
        most = max(most, in_use)
    assert most <= 1, changes
    assert processes_of(str(root)) == []


def test_a_detached_queue_runs_in_the_background_and_its_directory_is_not_reused(tmp_path: Path, capsys) -> None:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(HEADER + "\naws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,0.526,0.16,,,0.0,,2026-11-30,test\n")
    queue = tmp_path / "queue.toml"
    queue.write_text(f'name = "q"\nslot_hours = {SLOT_HOURS}\nhorizon_slots = 50\n[purchase]\nallow = ["on_demand"]\n'
                     + _job("a", 0) + _job("b", SLOT_HOURS / 2))
    root = tmp_path / "runs"
    args = ["run", str(queue), "--catalog", str(catalog), "--run-dir", str(root), "--time-scale", str(TIME_SCALE)]
    assert main([*args, "--detach", "--json"]) == 0
    started = json.loads(capsys.readouterr().out)  # what was started, for a script
    assert started["run_dir"] == str(root) and started["queue"] is True
    assert started["pid"] == json.loads((root / "controller.json").read_text())["pid"]
    assert main(["logs", str(root), "--follow"]) == 0  # returns when the queue's process has exited
    followed = capsys.readouterr().out  # with --json, the process's outcome alone, printed as it exits
    assert not detach.is_alive(detach.read_record(root))
    assert main(["logs", str(root / "a")]) == 2  # a queue's job has no log of its own: the queue's has its lines
    assert f"planner logs {root}" in capsys.readouterr().err
    result = json.loads((root / "queue.json").read_text())
    assert json.loads(followed) == result
    assert result["status"] == "completed", result
    assert [json.loads((root / n / "summary.json").read_text())["steps"] for n in ("a", "b")] == [STEPS, STEPS]
    assert (root / "controller.log").stat().st_mode & 0o777 == 0o600
    deadline = time.monotonic() + 30
    while processes_of(str(root)):  # the background process writes queue.json just before it exits
        assert time.monotonic() < deadline
        time.sleep(0.2)

    record = (root / "queue_run.json").read_bytes()
    assert main(args) == 2  # a second queue in the same directory would overwrite the first one's record
    assert "holds a queue run already" in capsys.readouterr().err
    assert (root / "queue_run.json").read_bytes() == record


def test_a_job_of_a_queue_that_failed_goes_on_by_its_own_resume_once_fixed(tmp_path: Path, capsys) -> None:
    """A resume of the queue leaves a failed job failed (its bug would fail it again): the queue says how
    that job goes on, and its own resume continues it on the queue's held node."""
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(HEADER + "\naws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,0.526,0.16,,,0.0,,2026-11-30,test\n")
    bug = tmp_path / "BUG"
    bug.write_text("a shape mismatch\n")
    digits = json.dumps(digits_entrypoint(STEPS))[1:-1]
    job = _job("a", 0).replace(digits, f'"{sys.executable}", "{WORKERS / "fails_until_fixed.py"}", "{bug}", '
                                       + digits.split(", ", 1)[1])
    assert "fails_until_fixed" in job
    queue = tmp_path / "queue.toml"
    queue.write_text(f'name = "q"\nslot_hours = {SLOT_HOURS}\nhorizon_slots = 50\n[purchase]\nallow = ["on_demand"]\n'
                     '[[reservation]]\ncloud = "aws"\nregion = "us-east-1"\ninstance_type = "g4dn.xlarge"\ncount = 1\n'
                     + job.replace("[job.run]", "[job.run]\nmax_restarts = 0"))
    root = tmp_path / "runs"
    rc = main(["run", str(queue), "--catalog", str(catalog), "--run-dir", str(root), "--time-scale", str(TIME_SCALE)])
    out = capsys.readouterr().out
    assert rc == 1, out
    hint = (f"job a failed; once its cause is fixed, `planner run --resume {root / 'a'}` continues it from its "
            "last checkpoint")
    assert hint in out
    assert main(["status", str(root)]) == 0  # says the same later, from the directory
    out = capsys.readouterr().out
    assert "queue q: incomplete" in out and hint in out, out
    assert main(["status", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queue"]["ended"] == [
        {"job": "a", "status": "failed", "run_dir": str(root / "a")}]

    bug.unlink()
    assert main(["run", "--resume", str(root / "a")]) == 0
    capsys.readouterr()
    assert main(["status", str(root), "--json"]) == 0
    queue = json.loads(capsys.readouterr().out)["queue"]
    # queue.json was written when the queue's process ended; the queue stands as its jobs do now
    assert json.loads((root / "queue.json").read_text())["status"] == "incomplete"
    assert queue["status"] == "completed" and queue["ended"] == [], queue
    summary = json.loads((root / "a" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS, summary
    assert [launch["outcome"] for launch in summary["launches"]] == ["failed", "completed"]
    assert all("reserved_held" in launch["pool"] for launch in summary["launches"])  # still the queue's node
    events = [json.loads(line) for line in (root / "a" / "events.jsonl").read_text().splitlines()]
    # Re-planned at once onto the idle held node: an on-demand job has no spot to wait for.
    assert [e["target"] for e in events if e["event"] == "decision"] == ["replan"]
    assert processes_of(str(root)) == []
