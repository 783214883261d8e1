"""`planner run --resume` of one job of a queue keeps the queue's held nodes as the queue counted them:
only inside the reservation's window on the queue's clock, and only while no other process (the
queue itself, or another resumed job of it) counts them.  Real CLI, local provider, tiny jobs."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from planner.cli import main
from planner.job import load_job
from pricing.pool import HELD, Pool
from runtime.control.detach import ControllerLock, check_free
from runtime.control.held import Window
from runtime.control.queue_held import QUEUE_HELD_FILE, QueueHeld, read, write
from runtime.control.run_state import new_state
from runtime.errors import RuntimeFailure
from tests.run.helpers import HEADER, digits_entrypoint, processes_of

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
