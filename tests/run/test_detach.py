"""Detached runs: one controller per run directory, found by pid and start time; logs, status, cancel."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from planner.cli import main
from runtime.accounting.ledger import Ledger
from runtime.control import detach
from runtime.control.events import read_events
from runtime.control.run_state import load_state, save_state
from runtime.training.store import CheckpointStore
from tests.run.fake_run import new_run
from tests.run.helpers import digits_entrypoint, processes_of, write_catalog, write_job


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _record(pid: int, *, started: float | None = None, host: str | None = None) -> detach.ControllerRecord:
    return detach.ControllerRecord(pid=pid, started=psutil.Process(pid).create_time() if started is None else started,
                                   host=host or socket.gethostname())


def _write_record(run_dir: Path, record: detach.ControllerRecord) -> None:
    (run_dir / detach.RECORD_FILE).write_text(record.model_dump_json())


def _set_status(run_dir: Path, status: str) -> None:
    state = load_state(run_dir)
    state.status = status
    save_state(run_dir, state)


def test_a_second_controller_is_refused_before_it_changes_the_run(tmp_path: Path, capsys) -> None:
    run_dir = new_run(tmp_path)
    _set_status(run_dir, "cancelled")  # --resume would reopen it: the refusal must come first
    with detach.ControllerLock(run_dir):
        record = detach.read_record(run_dir)
        assert record is not None and record.pid == os.getpid() and detach.is_alive(record)
        assert stat.S_IMODE((run_dir / detach.RECORD_FILE).stat().st_mode) == 0o600
        assert main(["run", "--resume", str(run_dir)]) == 2
        err = capsys.readouterr().err
        assert f"controller is running (pid {os.getpid()}" in err and f"planner cancel {run_dir}" in err
        assert load_state(run_dir).status == "cancelled"
        with pytest.raises(detach.ControllerAlive):
            detach.check_free(run_dir)
    detach.check_free(run_dir)  # released with the process's hold on it


def test_a_controller_is_known_by_its_pid_and_start_time_never_by_the_pid_alone() -> None:
    process = _sleeper()
    try:
        real = _record(process.pid)
        reused = _record(process.pid, started=real.started - 30)  # the pid of a process that has since died
        elsewhere = _record(process.pid, host="another-host")
        assert detach.is_alive(real)
        assert not detach.is_alive(reused) and not detach.is_alive(elsewhere)
        assert detach.signal_controller(reused, signal.SIGTERM) is False
        time.sleep(0.2)
        assert process.poll() is None, "a process with another start time was signalled"
        assert detach.signal_controller(real, signal.SIGTERM) is True
        assert process.wait(30) == -signal.SIGTERM
        assert not detach.is_alive(real)
    finally:
        process.kill()
        process.wait()


def test_status_shows_a_live_and_a_gone_controller(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    live_dir = new_run(tmp_path / "a").rename(runs / "live")
    gone_dir = new_run(tmp_path / "b").rename(runs / "gone")
    process = _sleeper()
    try:
        _write_record(live_dir, _record(process.pid))
        finished = subprocess.Popen([sys.executable, "-c", "pass"])
        dead = _record(finished.pid)
        finished.wait()
        _write_record(gone_dir, dead)
        assert main(["status", str(runs)]) == 0
        out = capsys.readouterr().out
        assert f"live: running (controller pid {process.pid})" in out
        assert f"gone: controller gone -- continue it: `planner run --resume {gone_dir}`" in out
        assert main(["status", str(live_dir)]) == 0
        assert f"running (controller pid {process.pid})" in capsys.readouterr().out
        assert main(["status", str(runs), "--json"]) == 0
        rows = {Path(r["run_dir"]).name: r["controller"] for r in json.loads(capsys.readouterr().out)}
        assert rows["live"]["alive"] is True and rows["live"]["pid"] == process.pid
        assert rows["gone"]["alive"] is False
    finally:
        process.kill()
        process.wait()


def test_logs_and_cancel_take_only_runs_and_say_what_to_do(tmp_path: Path, capsys) -> None:
    run_dir = new_run(tmp_path)
    assert main(["logs", str(tmp_path / "nowhere")]) == 2
    assert "no run state here" in capsys.readouterr().err
    assert main(["logs", str(run_dir)]) == 2
    assert "no controller log; the run was not started with --detach" in capsys.readouterr().err
    (run_dir / detach.LOG_FILE).write_text("12:00:00 plan: somewhere\n12:00:01 run ended: completed\n")
    _set_status(run_dir, "completed")
    assert main(["logs", str(run_dir), "--follow"]) == 0  # the run has ended: nothing to follow
    assert capsys.readouterr().out == "12:00:00 plan: somewhere\n12:00:01 run ended: completed\n"
    _set_status(run_dir, "failed")  # --follow exits as the run did, for `run --detach && logs --follow`
    assert main(["logs", str(run_dir), "--follow"]) == 1
    assert main(["logs", str(run_dir)]) == 0  # printing the log is all it was asked
    _set_status(run_dir, "completed")
    assert main(["cancel", str(run_dir)]) == 0
    assert "the run already ended (completed); nothing to cancel" in capsys.readouterr().out
    assert main(["cancel", str(tmp_path / "nowhere")]) == 2


def test_a_background_controller_that_cannot_start_says_why(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "state.json").write_text("{not json")
    with pytest.raises(detach.DetachError, match="exited .* before it started the run") as caught:
        detach.start_detached(run_dir)
    assert "not a run state written by planner run" in str(caught.value)
    assert stat.S_IMODE((run_dir / detach.LOG_FILE).stat().st_mode) == 0o600


@pytest.mark.ddp
def test_a_detached_run_whose_controller_died_is_cancelled_by_releasing_its_nodes(tmp_path: Path, capsys) -> None:
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(1000), steps=1000, nproc=1)
    catalog = write_catalog(tmp_path / "catalog.csv")
    run_dir = tmp_path / "run"
    assert main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--time-scale", "30",
                 "--detach"]) == 0
    out = capsys.readouterr().out
    assert f"planner logs {run_dir} --follow" in out and f"planner cancel {run_dir}" in out
    pid = json.loads((run_dir / detach.RECORD_FILE).read_text())["pid"]
    try:
        assert os.getsid(pid) != os.getsid(0), "the controller must outlive this terminal's session"
        assert stat.S_IMODE((run_dir / detach.LOG_FILE).stat().st_mode) == 0o600
        assert main(["run", "--resume", str(run_dir)]) == 2  # one controller per run
        assert f"controller is running (pid {pid}" in capsys.readouterr().err
        store = CheckpointStore(str(run_dir / "ckpt"))
        deadline = time.monotonic() + 180
        # A checkpoint can commit before the controller's next poll has seen the workers train (a busy
        # machine, a slow clock): the logs read at the end say only what the controller saw.
        while not store.latest_step() or not [e for e in read_events(run_dir / "events.jsonl")
                                              if e["event"] == "training"]:
            assert time.monotonic() < deadline, "no checkpoint in time"
            assert psutil.pid_exists(pid), "the controller exited early"
            time.sleep(0.1)
        assert main(["status", str(run_dir)]) == 0
        assert f"running (controller pid {pid})" in capsys.readouterr().out
    finally:
        os.kill(pid, signal.SIGKILL)  # the controller alone: its node trains on, billed
    deadline = time.monotonic() + 30
    while detach.is_alive(detach.read_record(run_dir)):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert processes_of(str(run_dir)), "the node should have outlived its controller"
    assert main(["status", str(run_dir)]) == 0
    assert "controller gone" in capsys.readouterr().out

    assert main(["cancel", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "controller is gone: releasing its nodes" in out and "cancelled at step" in out
    assert processes_of(str(run_dir)) == []
    state = load_state(run_dir)
    assert state.status == "cancelled" and state.launches[0].outcome == "cancelled"
    with Ledger(run_dir) as ledger:
        assert not ledger.open_intervals()
    events = read_events(run_dir / "events.jsonl")
    assert [e["stale_nodes"] for e in events if e["event"] == "recovered"] == [["l-1-n0"]]
    (end,) = [e for e in events if e["event"] == "run_end"]
    assert end["status"] == "cancelled" and end["steps"] == state.steps == store.latest_step() > 0
    assert main(["logs", str(run_dir)]) == 0
    assert "launch l-1: training from step 0" in capsys.readouterr().out
