"""SIGKILL of the controller at any moment, then `planner run --resume`: nothing left, nothing lost.

Real controllers (`python -m planner.cli run`) with real torchrun nodes on the local
provider; the kills are real SIGKILLs, so nothing in the controller gets to clean up.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from planner.cli import main
from runtime.accounting.ledger import Ledger
from runtime.control.events import read_events
from tests.run.helpers import (
    DIGITS,
    REPO,
    digits_entrypoint,
    final_tensors,
    processes_of,
    uninterrupted_tensors,
    write_catalog,
    write_job,
)

pytestmark = [pytest.mark.ddp, pytest.mark.faults]

STEPS = 300
KILL_SEED = 20261201
KILLS_AT_LEAST = 5

# The digits script with a floor on each step's time, so how far a run gets between kills
# cannot depend on how fast the machine is: the parameters are the same, only later.
PACED = """
import runpy, sys, time
from runtime.training.session import Session
step = Session.step
def paced(self, loss):
    time.sleep({seconds!r})
    return step(self, loss)
Session.step = paced
sys.argv = [{digits!r}, *sys.argv[1:]]
runpy.run_path({digits!r}, run_name="__main__")
"""


def _kill_delays() -> list[float]:
    """The same ten moments (seconds after a controller starts) on every run of the suite."""
    rng = random.Random(KILL_SEED)
    return [rng.uniform(0.2, 8.0) for _ in range(10)]


def _run_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "planner.cli", "run", *args]


def _job(tmp_path: Path) -> tuple[Path, Path]:
    catalog = write_catalog(tmp_path / "catalog.csv")
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(STEPS), steps=STEPS, nproc=1,
                    deadline_hours=24, budget_usd=50, max_restarts=3)
    return job, catalog


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait(10)


def _attempts_alive(run_dir: Path) -> set[str]:
    """The launches (DANLU_ATTEMPT) that still have a live process."""
    attempts = set()
    for pid in processes_of(str(run_dir)):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        attempts.update(e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"DANLU_ATTEMPT="))
    return attempts


def _assert_billed_once(run_dir: Path) -> None:
    with Ledger(run_dir) as ledger:
        assert not ledger.open_intervals()
        intervals = sorted(ledger.intervals(), key=lambda iv: iv.start)
    for earlier, later in zip(intervals, intervals[1:], strict=False):
        assert earlier.end <= later.start, f"{earlier.key} and {later.key} billed for the same time"


def test_workers_that_start_after_the_controller_died_are_killed_on_resume(tmp_path: Path) -> None:
    """Killed just after the launch, before any worker pid was seen: the node's token finds them."""
    job, catalog = _job(tmp_path)
    run_dir = tmp_path / "run"
    controller = subprocess.Popen(_run_command(str(job), "--catalog", str(catalog), "--run-dir", str(run_dir)),
                                  cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: any(e["event"] == "launch" for e in read_events(run_dir / "events.jsonl")), 120, "the launch")
    finally:
        _kill(controller)
    # The workers come up after their controller is gone, so no pid file names them.
    _wait(lambda: len(processes_of(str(run_dir))) >= 2, 120, "the orphaned agent's workers")
    pid_file = json.loads((run_dir / "provider" / "l-1-n0.pids").read_text())
    orphans = processes_of(str(run_dir))
    assert not set(orphans) <= {int(p) for p in pid_file["pids"]}, "every worker was recorded: nothing to test"

    assert main(["run", "--resume", str(run_dir)]) == 0
    assert not any(pid in processes_of(str(run_dir)) for pid in orphans)
    assert processes_of(str(run_dir)) == []
    recovered = [e for e in read_events(run_dir / "events.jsonl") if e["event"] == "recovered"]
    assert recovered[0]["stale_nodes"] == ["l-1-n0"]
    _assert_billed_once(run_dir)


def test_a_run_killed_after_its_final_checkpoint_ends_on_resume_without_a_launch(tmp_path: Path) -> None:
    job, catalog = _job(tmp_path)
    run_dir = tmp_path / "run"
    # Die by SIGKILL at the one moment that matters: nodes released, the end not yet recorded.
    script = textwrap.dedent("""
        import os, signal, sys
        from runtime.control import controller
        finish = controller.Controller.finish
        def dying_finish(self, status, cause=None):
            if status == "completed":
                os.kill(os.getpid(), signal.SIGKILL)
            return finish(self, status, cause)
        controller.Controller.finish = dying_finish
        from planner.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    killed = subprocess.run([sys.executable, "-c", script, "run", str(job), "--catalog", str(catalog),
                             "--run-dir", str(run_dir)], cwd=REPO, capture_output=True, timeout=300, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stdout.decode()[-2000:]
    state = json.loads((run_dir / "state.json").read_text())
    assert state["status"] == "running" and not state["active"]
    with Ledger(run_dir) as ledger:
        billed = ledger.total_usd()

    assert main(["run", "--resume", str(run_dir)]) == 0
    events = read_events(run_dir / "events.jsonl")
    resumed_at = max(i for i, e in enumerate(events) if e["event"] == "run_resumed")
    after = [e["event"] for e in events[resumed_at:]]
    assert "launch" not in after and "node_up" not in after
    assert events[-1]["event"] == "run_end" and events[-1]["status"] == "completed"
    assert events[-1]["steps"] == STEPS
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    with Ledger(run_dir) as ledger:
        assert ledger.total_usd() == pytest.approx(billed)


def test_ten_random_sigkills_then_resume_leave_no_process_and_the_same_parameters(tmp_path: Path) -> None:
    delays = _kill_delays()
    # A launch trains for its controller's life less its start-up, plus the moment its
    # orphaned workers live on until the next controller kills them: at this pace the first
    # lives together cannot train all STEPS steps however fast the machine, so they all land.
    pace = 1.5 * sum(delays[:KILLS_AT_LEAST]) / STEPS
    script = tmp_path / "paced.py"
    script.write_text(PACED.format(seconds=pace, digits=str(DIGITS)))
    catalog = write_catalog(tmp_path / "catalog.csv")
    job = write_job(tmp_path / "job.toml", entrypoint=[sys.executable, str(script), *digits_entrypoint(STEPS)[2:]],
                    steps=STEPS, nproc=1, deadline_hours=24, budget_usd=50, max_restarts=3)
    reference = uninterrupted_tensors(tmp_path / "reference", steps=STEPS, nproc=1)

    run_dir = tmp_path / "run"
    command = _run_command(str(job), "--catalog", str(catalog), "--run-dir", str(run_dir))
    kills = 0
    log = (tmp_path / "controllers.log").open("ab")
    for delay in delays:
        controller = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait(lambda: (run_dir / "state.json").exists(), 60, "the run state")
            time.sleep(delay)
        finally:
            _kill(controller)
        if controller.returncode != -signal.SIGKILL:
            break  # the run ended before this kill: nothing more to interrupt
        kills += 1
        # Whatever a dead controller left, at most one launch is ever alive.
        assert len(_attempts_alive(run_dir)) <= 1
        command = _run_command("--resume", str(run_dir))
    state = json.loads((run_dir / "state.json").read_text())
    if state["status"] == "running":
        assert main(["run", "--resume", str(run_dir)]) == 0
    log.close()

    assert kills >= KILLS_AT_LEAST, f"only {kills} kills landed before the run ended"
    assert processes_of(str(run_dir)) == []
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    _assert_billed_once(run_dir)
    got, want = final_tensors(run_dir / "ckpt"), reference
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), key
