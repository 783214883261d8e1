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
from runtime.control.run_state import load_state, reopen_cancelled
from runtime.training import contract
from runtime.training.store import CheckpointStore
from tests.run.fake_run import open_run, script, start_run
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

    assert reopen_cancelled(run.run_dir) is not None
    resumed = open_run(run.run_dir, script(checkpoint_every=1000), at=run.clock.now() + 60)
    summary = resumed.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    assert [launch["start_step"] for launch in summary["launches"]] == [0, committed]
    assert [launch["outcome"] for launch in summary["launches"]] == ["cancelled", "completed"]
    assert [e["status"] for e in resumed.events("run_end")] == ["cancelled", "completed"]
    assert [e["steps"] for e in resumed.events("run_end")] == [committed, 300]
    _assert_billed_once(run.run_dir)


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


def test_only_a_cancelled_run_is_reopened(tmp_path: Path) -> None:
    run = start_run(tmp_path, script())
    assert run.run()["status"] == "completed"
    assert reopen_cancelled(run.run_dir) is None
    assert main(["run", "--resume", str(run.run_dir)]) == 2  # "the run already ended (completed)"
    assert load_state(run.run_dir).status == "completed"


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
