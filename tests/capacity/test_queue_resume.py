"""`planner run --resume` of a queue that was killed or stopped (SIGTERM) finishes it; of one job of a
queue, it keeps the queue's held nodes as the queue counted them: only inside the reservation's window
on the queue's clock, and only while no other process (the queue itself, or another resumed job of it)
counts them.  Real CLI, local provider, tiny jobs."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.cli import main
from planner.job import load_job
from pricing.pool import HELD, Pool
from runtime.accounting.ledger import Ledger
from runtime.control import queue_record
from runtime.control.detach import ControllerLock, check_free
from runtime.control.events import read_events
from runtime.control.held import Window
from runtime.control.queue_held import QUEUE_HELD_FILE, QueueHeld, read, write
from runtime.control.run_start import new_state
from runtime.errors import RuntimeFailure
from runtime.training.store import CheckpointStore
from tests.run.helpers import HEADER, REPO, digits_entrypoint, processes_of, queue_job_toml, wait_for

STEPS = 20
TIME_SCALE = 60.0
KEY = ("aws", "us-east-1", "g4dn.xlarge")
JOB = f"""
name = "a"
[workload]
steps = {STEPS}
checkpoint_gb = 0.001
[workload.throughput]
T4 = 0.85
[overheads]
restart_minutes = 0.1
[constraints]
deadline_hours = 1.0
budget_usd = 5
max_nodes = 1
[purchase]
allow = ["on_demand"]
[[purchase.held]]
cloud = "aws"
region = "us-east-1"
instance_type = "g4dn.xlarge"
count = 1
until = 2099-01-01
[run]
entrypoint = {json.dumps(digits_entrypoint(STEPS))}
nproc_per_node = 1
"""


def queue_job(tmp_path: Path, window_end_h: float | None, started_s_ago: float) -> tuple[Path, Path]:
    """A job of queue "q" as `planner run QUEUE.toml` leaves it when its process is killed before the
    job ran: its run state, and the queue's one held node in [0, window_end_h) of the queue's hours."""
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(HEADER + "\naws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,0.526,0.16,,,0.0,,2026-11-30,test\n")
    job_path = tmp_path / "a.toml"
    job_path.write_text(JOB)
    root = tmp_path / "runs"
    run_dir = root / "a"
    new_state(job_path=job_path, job=load_job(str(job_path)), run_dir=run_dir, catalog=str(catalog),
              provider="local", time_scale=TIME_SCALE, policy="danlu", chaos=[])
    end = float("inf") if window_end_h is None else window_end_h
    write(run_dir, QueueHeld.of("q", time.time() - started_s_ago, TIME_SCALE, [Window(KEY, 1, 0.0, end)]))
    return root, run_dir


def held_hours(run_dir: Path) -> float:
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    return db.execute("SELECT COALESCE(SUM(billed_until - start), 0) FROM intervals "
                      "WHERE purchase = 'reserved_held'").fetchone()[0]


def launches(run_dir: Path) -> list[dict]:
    return [e for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines()) if e["event"] == "launch"]


pytestmark = pytest.mark.ddp


def test_a_resumed_queue_job_uses_the_held_node_while_the_queue_window_is_open(tmp_path: Path) -> None:
    root, run_dir = queue_job(tmp_path, window_end_h=None, started_s_ago=0.0)
    assert main(["run", "--resume", str(run_dir)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    assert "reserved_held" in launches(run_dir)[0]["pool"] and summary["cost_usd"] == 0
    check_free(root)  # the queue's lock was given back
    assert processes_of(str(root)) == []


def test_a_resumed_queue_job_does_not_book_a_held_node_after_the_queue_window_closed(tmp_path: Path) -> None:
    # The job file still holds the node until 2099; the queue held it for its first 0.5 h only,
    # and the queue started an hour of its time (a minute at this scale) ago.
    root, run_dir = queue_job(tmp_path, window_end_h=0.5, started_s_ago=3600 / TIME_SCALE)
    assert main(["run", "--resume", str(run_dir)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    # The plan the job was left with still names the held node: refused at once (no wait for a
    # release that cannot come), re-planned on on-demand well before the deadline.
    assert all("reserved_held" not in e["pool"] for e in launches(run_dir))
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["event"] in ("held_wait", "deadline_miss")]
    assert held_hours(run_dir) == 0 and summary["cost_usd"] > 0  # on-demand, billed
    assert processes_of(str(root)) == []


def test_a_queue_job_is_not_resumed_while_its_queue_counts_the_held_nodes(tmp_path: Path, capsys) -> None:
    root, run_dir = queue_job(tmp_path, window_end_h=None, started_s_ago=0.0)
    before = (run_dir / "state.json").read_bytes()
    with ControllerLock(root).acquire(record=False):  # the queue's process (or another resumed job)
        rc = main(["run", "--resume", str(run_dir)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "queue 'q' is running" in err and "Traceback" not in err
    assert (run_dir / "state.json").read_bytes() == before  # nothing started, nothing changed
    check_free(run_dir)  # the run's own lock was given back too


def test_the_queue_record_reads_back_and_a_damaged_one_is_named(tmp_path: Path) -> None:
    record = QueueHeld.of("q", 1_800_000_000.0, 60.0, [Window(KEY, 2, 0.5, float("inf")), Window(KEY, 1, 0.0, 0.5)])
    write(tmp_path, record)
    assert read(tmp_path) == record
    assert (tmp_path / QUEUE_HELD_FILE).stat().st_mode & 0o777 == 0o600
    now = {"t": record.origin + 0.25 * 3600 / 60.0}  # 0.25 h of the queue's time
    allotment = record.allotment(wall=lambda: now["t"])
    pool = Pool("aws", "us-east-1", None, "g4dn.xlarge", "T4", 1, HELD, 0.0)
    assert allotment.free(pool) == 1 and allotment.try_take(pool, 1)
    now["t"] = record.origin + 0.75 * 3600 / 60.0  # the first window closed, the second opened
    assert allotment.over(pool) is False and allotment.free(pool) == 1
    assert read(tmp_path / "nowhere") is None  # a run of its own
    (tmp_path / QUEUE_HELD_FILE).write_text('{"queue": "q"}')
    with pytest.raises(RuntimeFailure, match=QUEUE_HELD_FILE):
        read(tmp_path)


B_START_H, A_STEPS = 0.75, 600


def _start_queue(tmp_path: Path) -> tuple[Path, subprocess.Popen]:
    """`planner run` of a queue in its own process, returned once its job a trains.

    a (30 s of paced steps) runs from slot 0, so it is still training for a while after that;
    b is scheduled B_START_H of queue time (45 s here) after the start, so it is still waiting."""
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(HEADER + "\naws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,0.526,0.16,,,0.0,,2026-11-30,test\n")
    queue = tmp_path / "queue.toml"
    queue.write_text('name = "q"\nslot_hours = 0.05\nhorizon_slots = 60\n[purchase]\nallow = ["on_demand"]\n'
                     + queue_job_toml("a", 0, steps=A_STEPS, deadline_hours=1.0, min_step_seconds=0.05)
                     + queue_job_toml("b", B_START_H, steps=STEPS, deadline_hours=1.0))
    root = tmp_path / "runs"
    command = [sys.executable, "-m", "planner.cli", "run", str(queue), "--catalog", str(catalog), "--run-dir",
               str(root), "--time-scale", str(TIME_SCALE)]
    events_a = root / "a" / "events.jsonl"
    with (tmp_path / "queue.log").open("wb") as log:
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: events_a.exists() and any(e["event"] == "training" for e in read_events(events_a)), 120,
                 "a training", process)
    except BaseException:
        process.kill()
        process.wait(10)
        raise
    return root, process


def _status(root: Path, capsys) -> tuple[str, dict]:
    """`planner status` of the queue's run directory: its text, and its --json."""
    capsys.readouterr()
    assert main(["status", str(root)]) == 0
    text = capsys.readouterr().out
    assert main(["status", str(root), "--json"]) == 0
    return text, json.loads(capsys.readouterr().out)


def test_a_killed_queue_is_finished_by_resuming_its_run_directory(tmp_path: Path, capsys) -> None:
    # a is killed with its queue while it trains, so its orphaned node is still training at the
    # resume; b has not started when the queue dies.
    root, process = _start_queue(tmp_path)
    text, doc = _status(root, capsys)
    assert f"queue q: running (queue pid {process.pid}); stop it: `planner cancel {root}`" in text
    assert "b: not started (slot 15, starts " in text
    assert doc["queue"]["status"] == "running" and doc["queue"]["pid"] == process.pid
    assert [j["job"] for j in doc["queue"]["not_started"]] == ["b"]
    assert [(r["job"], r["status"]) for r in doc["runs"]] == [("a", "running")]
    process.kill()  # SIGKILL, the queue's process alone: a's node keeps running
    process.wait(10)
    text, doc = _status(root, capsys)
    assert f"queue q: stopped (its process is gone) -- finish it: `planner run --resume {root}`" in text
    assert "b: not started (slot 15, was due " in text
    assert f"controller gone -- continue it: `planner run --resume {root}`" in text  # the queue, not a alone
    assert doc["queue"]["status"] == "stopped" and doc["runs"][0]["controller"]["alive"] is False
    # From the directory that holds the queue (as ./runs holds the queues `planner run QUEUE.toml` starts):
    # its jobs among the runs, named under the queue's directory, and the queue's line.
    assert main(["status", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert " runs/a " in text and "runs/a: controller gone" in text
    assert f"queue q (runs): stopped (its process is gone) -- finish it: `planner run --resume {root}`" in text
    assert "runs/b: not started (slot 15, was due " in text
    assert main(["status", str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["run_dir"] for r in rows] == [str(root / "a"), str(root)]
    assert rows[1]["queue"]["status"] == "stopped" and rows[1]["queue"]["not_started"][0]["job"] == "b"
    assert not (root / "b").exists(), "b started before its slot"
    assert not (root / "queue.json").exists()  # the queue never got to write its outcome
    record = queue_record.read(root)
    assert [(j.name, j.start_slot) for j in record.jobs] == [("a", 0), ("b", 15)]

    assert main(["run", "--resume", str(root)]) == 0
    out = json.loads((root / "queue.json").read_text())
    assert out["status"] == "completed" and out["origin"] == record.held.origin
    assert [(j["job"], j["status"]) for j in out["jobs"]] == [("a", "completed"), ("b", "completed")]
    a_events = read_events(root / "a" / "events.jsonl")
    assert [e["event"] for e in a_events].count("run_resumed") == 1
    assert [e for e in a_events if e["event"] == "recovered"][0]["stale_nodes"] == ["l-1-n0"]
    summary_a = json.loads((root / "a" / "summary.json").read_text())
    assert summary_a["steps"] == A_STEPS and summary_a["launches"][0]["outcome"] == "interrupted"
    assert summary_a["launches"][-1]["outcome"] == "completed"
    # b ran once, from its slot on the queue's clock (the dead process's origin), not from the resume.
    b_state = json.loads((root / "b" / "state.json").read_text())
    assert b_state["origin"] - record.held.origin >= B_START_H * 3600 / TIME_SCALE - 0.05
    assert json.loads((root / "b" / "summary.json").read_text())["steps"] == STEPS
    assert read(root / "b") == record.held  # a later resume of b alone counts held nodes as the queue did
    assert processes_of(str(root)) == []
    text, doc = _status(root, capsys)
    assert "queue q: completed" in text and "not started" not in text
    assert doc["queue"]["not_started"] == [] and [r["status"] for r in doc["runs"]] == ["completed", "completed"]
    assert main(["cancel", str(root)]) == 0
    assert "the queue already ended (completed); nothing to cancel" in capsys.readouterr().out

    # Resuming a finished queue runs nothing again and reports the same outcomes.
    before = {name: (root / name / "events.jsonl").read_bytes() for name in ("a", "b")}
    assert main(["run", "--resume", str(root)]) == 0
    assert {name: (root / name / "events.jsonl").read_bytes() for name in ("a", "b")} == before
    again = json.loads((root / "queue.json").read_text())
    assert [(j["job"], j["status"], j["cost_usd"]) for j in again["jobs"]] == \
        [(j["job"], j["status"], j["cost_usd"]) for j in out["jobs"]]


def test_sigterm_stops_every_job_of_a_queue_at_a_checkpoint_and_the_resume_finishes_it(tmp_path: Path) -> None:
    # The queue's controllers run in threads, which a signal never reaches: SIGTERM must still make
    # a (training) checkpoint and release its node, and b (waiting for its slot) give up waiting,
    # rather than the process dying with a's node up and billed.
    root, process = _start_queue(tmp_path)
    try:
        process.send_signal(signal.SIGTERM)
        rc = process.wait(90)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    log_text = (tmp_path / "queue.log").read_text()
    assert rc == 143, log_text
    assert "Traceback" not in log_text and f"planner run --resume {root}" in log_text
    assert processes_of(str(root)) == []  # a's node was released, not left running
    out = json.loads((root / "queue.json").read_text())
    assert out["status"] == "cancelled" and out["stopped_by"] == "SIGTERM"
    assert [(j["job"], j["status"]) for j in out["jobs"]] == [("a", "cancelled"), ("b", "cancelled")]
    assert not (root / "b").exists()  # stopped while it waited for its slot
    state_a = json.loads((root / "a" / "state.json").read_text())
    assert state_a["status"] == "cancelled" and "SIGTERM" in state_a["cause"]
    with Ledger(root / "a") as ledger:
        assert not ledger.open_intervals()  # a's node is billed up to its release, and no further
    checkpoint = CheckpointStore(str(root / "a" / "ckpt")).latest_step()
    assert checkpoint is not None and 0 < checkpoint < A_STEPS  # asked to checkpoint, and it did

    assert main(["run", "--resume", str(root)]) == 0
    out = json.loads((root / "queue.json").read_text())
    assert out["status"] == "completed"
    assert [(j["job"], j["status"]) for j in out["jobs"]] == [("a", "completed"), ("b", "completed")]
    summary_a = json.loads((root / "a" / "summary.json").read_text())
    assert summary_a["steps"] == A_STEPS and summary_a["launches"][-1]["start_step"] == checkpoint
    b_state = json.loads((root / "b" / "state.json").read_text())
    assert b_state["origin"] - out["origin"] >= B_START_H * 3600 / TIME_SCALE - 0.05
    assert processes_of(str(root)) == []


def test_planner_cancel_of_a_queue_stops_its_process_and_every_job_at_a_checkpoint(tmp_path: Path, capsys) -> None:
    root, process = _start_queue(tmp_path)
    try:
        assert main(["cancel", str(root)]) == 0
        assert process.wait(30) == 143  # it was asked with SIGTERM, and it had stopped when cancel returned
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    out = capsys.readouterr().out
    assert "asked the queue" in out and "b: not started" in out and f"planner run --resume {root}" in out
    assert processes_of(str(root)) == []
    assert json.loads((root / "queue.json").read_text())["status"] == "cancelled"
    assert json.loads((root / "a" / "state.json").read_text())["status"] == "cancelled"
    assert (CheckpointStore(str(root / "a" / "ckpt")).latest_step() or 0) > 0
    text, doc = _status(root, capsys)
    assert f"queue q: cancelled -- finish it: `planner run --resume {root}`" in text
    assert doc["queue"]["status"] == "cancelled" and doc["queue"]["not_started"][0]["start_slot"] == 15


def test_planner_cancel_of_a_queue_stops_a_job_resumed_on_its_own(tmp_path: Path, capsys) -> None:
    # The queue's process is gone, and its job a was resumed alone: cancelling the queue must stop
    # that resume (its own controller), not wait for a lock the resume holds and give up.
    root, process = _start_queue(tmp_path)
    process.kill()
    process.wait(10)
    events = root / "a" / "events.jsonl"
    resumed_at = len(read_events(events))
    with (tmp_path / "resume.log").open("wb") as log:
        resume = subprocess.Popen([sys.executable, "-m", "planner.cli", "run", "--resume", str(root / "a")],
                                  cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: any(e["event"] == "training" for e in read_events(events)[resumed_at:]), 120,
                 "a training again", resume)
        assert main(["cancel", str(root)]) == 0
        assert resume.wait(30) == 143  # it was asked with SIGTERM, and had stopped when cancel returned
    finally:
        if resume.poll() is None:
            resume.kill()
            resume.wait(10)
    out = capsys.readouterr().out
    assert f"asked the controller (pid {resume.pid}) to stop" in out and "b: not started" in out
    assert processes_of(str(root)) == []
    assert json.loads((root / "a" / "state.json").read_text())["status"] == "cancelled"
    text, doc = _status(root, capsys)
    assert f"queue q: stopped (its process is gone) -- finish it: `planner run --resume {root}`" in text
    assert [(r["job"], r["status"]) for r in doc["runs"]] == [("a", "cancelled")]


def test_planner_cancel_of_a_killed_queue_releases_what_its_jobs_left(tmp_path: Path, capsys) -> None:
    root, process = _start_queue(tmp_path)
    process.kill()  # SIGKILL: a's node is left training, and billed
    process.wait(10)
    assert processes_of(str(root))
    assert main(["cancel", str(root)]) == 0
    out = capsys.readouterr().out
    assert "controller is gone" in out and "b: not started" in out
    assert processes_of(str(root)) == []
    state = json.loads((root / "a" / "state.json").read_text())
    assert state["status"] == "cancelled"
    with Ledger(root / "a") as ledger:
        assert not ledger.open_intervals()
    assert not (root / "b").exists()


def test_a_queue_resume_with_a_damaged_record_or_a_one_job_flag_exits_2(tmp_path: Path, capsys) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    (root / queue_record.QUEUE_RUN_FILE).write_text('{"format": 1, "held": {"queue": "q"}}')
    assert main(["run", "--resume", str(root)]) == 2
    err = capsys.readouterr().err
    assert queue_record.QUEUE_RUN_FILE in err and "held" in err and "Traceback" not in err
    assert main(["run", "--resume", str(root), "--detach"]) == 2  # named here, not in a background log
    err = capsys.readouterr().err
    assert queue_record.QUEUE_RUN_FILE in err and "Traceback" not in err
    for flag, value in (("--budget-usd", "9"), ("--deadline-in", "2")):
        assert main(["run", "--resume", str(root), flag, value]) == 2
        err = capsys.readouterr().err
        assert f"{flag} goes with one job" in err and "Traceback" not in err
