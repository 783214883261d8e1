"""A run stopped by Ctrl-C or `planner cancel` checkpoints, releases its nodes and resumes to the end.

The controller-level cases run on the fake provider (milliseconds); the end-to-end ones
train the digits example under real torchrun (one process: each launch's start-up is most of
its time on a loaded machine) and compare the final
parameters and optimizer state with an uninterrupted run's: bitwise, as the world size
does not change.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.cli import main
from runtime.accounting.ledger import Ledger
from runtime.control.events import read_events
from runtime.control.clock import ManualClock
from runtime.control.reopen import move_deadline, raise_budget, reopen_stopped
from runtime.control.run_state import RunStateError, load_state, save_state
from runtime.training import contract
from runtime.training.store import CheckpointStore
from tests.run.fake_run import SCALE, SPEED, new_run, open_run, script, start_run
from tests.run.helpers import (
    REPO,
    digits_entrypoint,
    final_tensors,
    processes_of,
    uninterrupted_tensors,
    write_catalog,
    write_job,
)

STEPS = 300
EVERY = "25"  # checkpoint every 25 steps: the first commit says the workers train (status.json is not per step)


def _assert_billed_once(run_dir: Path) -> None:
    with Ledger(run_dir) as ledger:
        assert not ledger.open_intervals()
        intervals = sorted(ledger.intervals(), key=lambda iv: iv.start)
    assert len(intervals) >= 2
    for earlier, later in itertools.pairwise(intervals):
        assert earlier.end <= later.start, "two launches billed for the same time"


# -- on the fake provider ---------------------------------------------------------------------


def test_ctrl_c_checkpoints_releases_and_resume_finishes_the_run(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(checkpoint_every=1000))  # no periodic checkpoint: only the stop's
    store = CheckpointStore(str(run.run_dir / "ckpt"))
    real_poll = run.provider.poll
    pressed: list[int] = []

    def poll(nodes):
        statuses = real_poll(nodes)
        workers = run.provider._launches.get("l-1")
        if not pressed and workers is not None and workers.step >= 100:
            pressed.append(workers.step)
            raise KeyboardInterrupt  # Ctrl-C, as the terminal delivers it: anywhere in the loop
        return statuses

    run.provider.poll = poll
    with pytest.raises(KeyboardInterrupt):
        run.run()
    state = load_state(run.run_dir)
    committed = store.latest_step()
    assert state.status == "cancelled" and state.cause == "interrupted (Ctrl-C)"
    assert committed is not None and committed >= pressed[0]  # the workers checkpointed when asked
    assert state.steps == committed
    assert state.launches[-1].outcome == "cancelled" and state.launches[-1].end_step == committed
    assert run.provider._launches["l-1"].terminated
    requests = run.events("checkpoint_request")
    assert [r["action"] for r in requests] == ["stop"] and "Ctrl-C" in requests[0]["reason"]
    (end,) = run.events("run_end")
    assert end["status"] == "cancelled" and end["steps"] == committed
    assert json.loads((run.run_dir / "summary.json").read_text())["steps"] == committed

    assert reopen_stopped(run.run_dir) == ("cancelled", "interrupted (Ctrl-C)")
    resumed = open_run(run.run_dir, script(checkpoint_every=1000), at=run.clock.now() + 60)
    summary = resumed.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    assert [launch["start_step"] for launch in summary["launches"]] == [0, committed]
    assert [launch["outcome"] for launch in summary["launches"]] == ["cancelled", "completed"]
    assert [e["status"] for e in resumed.events("run_end")] == ["cancelled", "completed"]
    assert [e["steps"] for e in resumed.events("run_end")] == [committed, 300]
    _assert_billed_once(run.run_dir)


def test_the_pace_a_cancelled_launch_trained_at_stays_measured_after_the_resume(tmp_path: Path) -> None:
    """Workers three times slower than the job's table: what the cancelled launch measured is folded into
    the run's measurement, not dropped when the resumed launch's first report replaces its last one."""
    slow = script(steps_per_s=SPEED * SCALE / 3, checkpoint_every=1000)
    run = start_run(tmp_path, slow)
    real_poll = run.provider.poll

    def poll(nodes):
        workers = run.provider._launches.get("l-1")
        if not run.events("checkpoint_request") and workers is not None and workers.step >= 150:
            raise KeyboardInterrupt
        return real_poll(nodes)

    run.provider.poll = poll
    with pytest.raises(KeyboardInterrupt):
        run.run()
    state = load_state(run.run_dir)
    assert state.status == "cancelled" and state.measured is not None
    assert state.measured.steps == state.steps >= 150
    assert state.measured.units / state.measured.hours == pytest.approx(SPEED / 3 * 3600, rel=0.05)

    reopen_stopped(run.run_dir)
    summary = open_run(run.run_dir, slow, at=run.clock.wall() + 1).run()
    assert summary["status"] == "completed"
    measured = load_state(run.run_dir).measured
    assert measured is not None and measured.steps == 300  # both launches' steps, each counted once
    assert measured.units / measured.hours == pytest.approx(SPEED / 3 * 3600, rel=0.05)


@pytest.mark.parametrize("write_s", [None, 40.0])
def test_ctrl_c_waits_for_a_checkpoint_as_slow_as_the_writes_the_workers_reported(tmp_path: Path, write_s) -> None:
    # The stop's save takes 70 s, past the 60 s a cancel gives the workers. Workers that have reported
    # 40 s writes get two of them (80 s) and their checkpoint commits; without one on record the cancel
    # releases the nodes after 60 s with nothing saved.
    run = start_run(tmp_path, script(checkpoint_every=1000, stop_s=70.0, save_write_s=write_s))
    real_poll = run.provider.poll

    def poll(nodes):
        workers = run.provider._launches.get("l-1")
        if workers is not None and workers.step >= 100 and not run.events("checkpoint_request"):
            raise KeyboardInterrupt
        return real_poll(nodes)

    run.provider.poll = poll
    with pytest.raises(KeyboardInterrupt):
        run.run()
    committed = CheckpointStore(str(run.run_dir / "ckpt")).latest_step()
    assert load_state(run.run_dir).status == "cancelled" and run.provider._launches["l-1"].terminated
    if write_s is None:
        assert committed is None
    else:
        assert committed is not None and committed >= 100


def test_a_completed_run_is_not_reopened(tmp_path: Path) -> None:
    run = start_run(tmp_path, script())
    assert run.run()["status"] == "completed"
    assert reopen_stopped(run.run_dir) is None
    assert main(["run", "--resume", str(run.run_dir)]) == 2  # "the run already ended (completed)"
    assert load_state(run.run_dir).status == "completed"


def test_a_failed_run_resumes_from_its_checkpoint_with_its_retries_anew(tmp_path: Path) -> None:
    """A bug fixed after the retries ran out: the run continues from its last checkpoint, not from step 0
    in a new run, and [run].max_restarts allows as many retries again."""
    run = start_run(tmp_path, script(exits={"l-1": 1, "l-2": 1}), max_restarts=1)
    failed = run.run()
    assert failed["status"] == "failed" and "failed 2 times" in failed["cause"], failed
    committed = CheckpointStore(str(run.run_dir / "ckpt")).latest_step()
    assert committed is not None and committed > 0
    assert reopen_stopped(run.run_dir) == ("failed", failed["cause"])

    resumed = open_run(run.run_dir, script(exits={"l-3": 1}), at=run.clock.now() + 60)
    summary = resumed.run()
    assert summary["status"] == "completed" and summary["steps"] == 300, summary
    assert [launch["outcome"] for launch in summary["launches"]] == ["failed", "failed", "failed", "completed"]
    assert summary["launches"][2]["start_step"] >= committed
    # Re-planned from where it stands now, not sent back to the pool it failed on unasked.
    assert [e["trigger"] for e in resumed.events("decision")] == ["resume"]
    assert [e["reason"].split(";")[0] for e in resumed.events("replan")] == ["resume"]
    # The third failure is the first of the reopened run's allowance, so l-4 ran.
    assert [e["failures"] for e in resumed.events("failure")] == [1, 2, 1]
    assert summary["failures"] == 3
    assert [e["status"] for e in resumed.events("run_end")] == ["failed", "completed"]
    _assert_billed_once(run.run_dir)


def test_a_larger_budget_goes_with_the_resume_of_a_failed_run_but_not_of_a_completed_one(tmp_path: Path) -> None:
    run = start_run(tmp_path, script(exits={"l-1": 1}), max_restarts=0)
    assert run.run()["status"] == "failed"
    raise_budget(run.run_dir, 9.0)  # as `planner run --resume RUN --budget-usd 9` does, before it reopens
    assert load_state(run.run_dir).status == "failed"  # reopened by the resume, with max_restarts anew
    assert reopen_stopped(run.run_dir) is not None
    resumed = open_run(run.run_dir, script(), at=run.clock.now() + 60)
    assert resumed.controller.job.constraints.budget_usd == 9.0
    summary = resumed.run()
    assert summary["status"] == "completed"
    with pytest.raises(RunStateError, match="the run ended 'completed'"):
        raise_budget(run.run_dir, 20.0)
    assert load_state(run.run_dir).job["constraints"]["budget_usd"] == 9.0


def test_a_run_that_found_no_plan_within_its_budget_goes_on_with_a_larger_one(tmp_path: Path, capsys) -> None:
    run = start_run(tmp_path, script(), budget_usd=0.001)  # the quote's cheapest plan costs more
    summary = run.run()
    assert summary["status"] == "infeasible" and summary["launches"] == [], summary
    capsys.readouterr()
    assert main(["run", "--resume", str(run.run_dir)]) == 2
    assert f"`planner run --resume {run.run_dir} --budget-usd USD`" in capsys.readouterr().err
    raise_budget(run.run_dir, 1.0)
    resumed = open_run(run.run_dir, script(), at=run.clock.now() + 60)
    assert resumed.run()["status"] == "completed"
    assert [e["status"] for e in resumed.events("run_end")] == ["infeasible", "completed"]


def test_a_run_that_found_no_plan_before_its_deadline_goes_on_with_a_later_one(tmp_path: Path, capsys) -> None:
    run = start_run(tmp_path, script(), deadline_hours=0.05)  # 300 steps take 0.1 h on the one node allowed
    summary = run.run()
    assert summary["status"] == "infeasible" and summary["launches"] == [], summary
    capsys.readouterr()
    assert main(["run", "--resume", str(run.run_dir)]) == 2
    assert f"`planner run --resume {run.run_dir} --deadline-in HOURS`" in capsys.readouterr().err
    # Ten hours of the run's clock later, the new deadline counts from then: 0.05 h is still too soon...
    later = ManualClock(run.clock.origin, run.clock.scale, at=run.clock.wall() + 10 * 3600 / run.clock.scale)
    move_deadline(run.run_dir, 0.05, clock=later)
    state = load_state(run.run_dir)
    assert state.status == "running" and later.elapsed_hours() >= 10
    assert state.job["constraints"]["deadline_hours"] == pytest.approx(later.elapsed_hours() + 0.05)
    again = open_run(run.run_dir, script(), at=later.wall())
    assert again.run()["status"] == "infeasible"
    # ... and an hour is enough: the run goes on, planned for the hour it has.
    move_deadline(run.run_dir, 1.0, clock=again.clock)
    resumed = open_run(run.run_dir, script(), at=again.clock.wall())
    summary = resumed.run()
    assert summary["status"] == "completed" and summary["steps"] == 300, summary
    assert [e["status"] for e in resumed.events("run_end")] == ["infeasible", "infeasible", "completed"]
    assert resumed.events("plan")[-1]["expected_hours"] <= 1.0


def test_a_new_deadline_is_refused_where_it_cannot_help_and_the_run_is_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('training')\n")
    run_dir = new_run(tmp_path)
    for status, message in (("budget_cap", "--budget-usd USD --deadline-in 2`"),
                            ("completed", "there is no deadline left to move")):
        state = load_state(run_dir)
        state.status = status
        save_state(run_dir, state)
        before = (run_dir / "state.json").read_bytes()
        assert main(["run", "--resume", str(run_dir), "--deadline-in", "2"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
        assert (run_dir / "state.json").read_bytes() == before
    state = load_state(run_dir)
    state.status = "budget_cap"
    save_state(run_dir, state)
    raise_budget(run_dir, 9.0)  # with a larger budget, as the message says, the deadline goes too
    move_deadline(run_dir, 2.0)
    state = load_state(run_dir)
    assert state.status == "running" and state.job["constraints"]["budget_usd"] == 9.0
    assert state.job["constraints"]["deadline_hours"] >= 2.0


def test_a_resume_whose_script_is_gone_is_refused_before_the_run_is_reopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('training')\n")
    run_dir = new_run(tmp_path)  # provider local, entrypoint python train.py, started in tmp_path
    state = load_state(run_dir)
    state.status, state.cause = "failed", "workers exited"
    save_state(run_dir, state)
    (tmp_path / "train.py").rename(tmp_path / "train_v2.py")
    monkeypatch.chdir(tmp_path.parent)  # the workers run where the run started, wherever the resume is typed

    assert main(["run", "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "[run].entrypoint runs 'train.py', which is no longer a file in" in err and str(tmp_path) in err, err
    assert "put it back" in err
    after = load_state(run_dir)
    assert (after.status, after.cause, after.launches) == ("failed", "workers exited", [])


# -- end to end: real torchrun ----------------------------------------------------------------


def _job(tmp: Path) -> tuple[Path, Path]:
    return (write_job(tmp / "job.toml", entrypoint=digits_entrypoint(STEPS), steps=STEPS, nproc=1),
            write_catalog(tmp / "catalog.csv"))


def _args(tmp: Path, run_dir: Path) -> list[str]:
    job, catalog = _job(tmp)
    return ["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--time-scale", "10",
            "--cooldown", "240"]


def _wait_for_training(run_dir: Path, alive, timeout: float = 180) -> int:
    """Wait until the workers have committed a checkpoint; returns its step."""
    store = CheckpointStore(str(run_dir / "ckpt"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step = store.latest_step()
        if step:
            return step
        assert alive(), "the controller exited before the workers trained"
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the workers to train")


def _resume_to_the_end(run_dir: Path, stopped_at: int) -> dict:
    state = load_state(run_dir)
    assert state.status == "cancelled"
    assert processes_of(str(run_dir)) == [], "a node outlived the cancel"
    committed = CheckpointStore(str(run_dir / "ckpt")).latest_step()
    assert committed is not None and stopped_at <= committed < STEPS
    events = read_events(run_dir / "events.jsonl")
    ends = [e for e in events if e["event"] == "run_end"]
    assert [(e["status"], e["steps"]) for e in ends] == [("cancelled", committed)]
    # The workers were asked to checkpoint and did: they stopped on that request, at the committed step.
    (stop,) = [e for e in events if e["event"] == "checkpoint_request"]
    assert stop["action"] == "stop"
    worker = contract.read_status(run_dir / "work")
    assert worker is not None and worker.state == "preempted" and worker.request_id == stop["request"]
    assert worker.step == committed

    assert main(["run", "--resume", str(run_dir)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    assert [launch["start_step"] for launch in summary["launches"]] == [0, committed]
    assert summary["world_sizes"] == [1, 1]
    _assert_billed_once(run_dir)
    assert processes_of(str(run_dir)) == []
    return summary


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory):
    return uninterrupted_tensors(tmp_path_factory.mktemp("reference"), steps=STEPS, nproc=1)


def _assert_equal(final, reference) -> None:
    import torch

    assert final.keys() == reference.keys() and len(final) == 32
    for key, tensor in reference.items():
        assert torch.equal(final[key], tensor), f"{key} differs from the uninterrupted run"


@pytest.mark.ddp
def test_a_ctrl_c_run_resumes_to_the_uninterrupted_runs_parameters(reference, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DANLU_CHECKPOINT_EVERY_STEPS", EVERY)
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "planner.cli", *_args(tmp_path, run_dir)]
    with (tmp_path / "controller.log").open("wb") as log:
        # A shell's background job (a CI runner's, say) ignores SIGINT, and a child inherits that:
        # give the controller the default a terminal's Ctrl-C finds.
        controller = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        stopped_at = _wait_for_training(run_dir, lambda: controller.poll() is None)
        controller.send_signal(signal.SIGINT)  # Ctrl-C: the terminal signals the controller, not the nodes
        assert controller.wait(120) == 130
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait(10)
    output = (tmp_path / "controller.log").read_text()
    assert f"planner run --resume {run_dir}" in output
    assert load_state(run_dir).cause == "interrupted (Ctrl-C)"
    _resume_to_the_end(run_dir, stopped_at)
    _assert_equal(final_tensors(run_dir / "ckpt"), reference)


@pytest.mark.ddp
def test_planner_cancel_stops_a_detached_run_that_then_resumes_to_the_same_parameters(
        reference, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    monkeypatch.setenv("DANLU_CHECKPOINT_EVERY_STEPS", EVERY)
    run_dir = tmp_path / "run"
    assert main([*_args(tmp_path, run_dir), "--detach"]) == 0
    record = json.loads((run_dir / "controller.json").read_text())
    pid = record["pid"]
    try:
        stopped_at = _wait_for_training(run_dir, lambda: _alive(pid))
        capsys.readouterr()
        assert main(["cancel", str(run_dir)]) == 0
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    out = capsys.readouterr().out
    assert f"asked the controller (pid {pid}) to stop" in out and "cancelled at step" in out
    assert not _alive(pid)
    state = load_state(run_dir)
    assert state.cause == "stopped by SIGTERM (planner cancel)"
    assert "run ended: cancelled" in (run_dir / "controller.log").read_text()
    _resume_to_the_end(run_dir, stopped_at)
    _assert_equal(final_tensors(run_dir / "ckpt"), reference)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
