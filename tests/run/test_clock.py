"""Simulated time, and the pauses that keep this host's start-up out of a simulated run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from planner.cli import main
from runtime.accounting.ledger import Ledger
from runtime.control.clock import ManualClock, StopSignal, StoppableClock
from runtime.control.detach import Cancelled
from runtime.control.events import read_events
from tests.run.helpers import digits_entrypoint, write_catalog, write_job


def test_a_pause_stops_simulated_time_and_past_times_keep_their_mapping() -> None:
    clock = ManualClock(origin=1000.0, scale=60.0)
    clock.advance(10)  # real 1010 -> sim 1000 + 600
    assert clock.now() == 1600.0
    clock.pause()
    clock.advance(30)
    assert clock.now() == 1600.0, "time moved while paused"
    clock.resume()
    clock.advance(1)
    assert clock.now() == 1660.0
    assert clock.sim(1005.0) == 1300.0  # before the pause: unchanged
    assert clock.sim(1025.0) == 1600.0  # inside the pause: its start
    clock.pause()
    clock.pause()  # twice is once
    clock.advance(5)
    clock.resume()
    clock.resume()
    assert clock.pauses == [[1010.0, 1040.0], [1041.0, 1046.0]]
    assert clock.now() == 1660.0


@pytest.mark.ddp
def test_a_simulated_local_run_bills_no_host_start_up(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(200), steps=200, nproc=1)
    run_dir = tmp_path / "run"
    assert main(["run", str(job), "--catalog", str(write_catalog(tmp_path / "catalog.csv")), "--run-dir",
                 str(run_dir), "--time-scale", "60"]) == 0
    events = read_events(run_dir / "events.jsonl")
    up = next(e for e in events if e["event"] == "node_up")
    training = next(e for e in events if e["event"] == "training")
    # Real start-up took seconds (minutes at 60x); simulated, the node trains from the moment it is billed.
    assert training["wall"] - up["wall"] > 0.5
    assert training["t"] - up["t"] < 60 * 0.6, "host start-up billed as simulated time"
    state = json.loads((run_dir / "state.json").read_text())
    assert state["clock_pauses"] and all(end is not None for _, end in state["clock_pauses"])
    with Ledger(run_dir) as ledger:
        (interval,) = ledger.intervals()
    assert interval.start == pytest.approx(up["t"])


def test_a_stoppable_clock_raises_the_stop_once_in_each_thread_then_sleeps_for_real() -> None:
    stop = StopSignal()
    clocks = [StoppableClock(1_800_000_000.0, 60.0, stop=stop) for _ in range(2)]
    started = time.monotonic()
    clocks[0].sleep(0.05)  # no stop yet: a real sleep
    assert time.monotonic() - started >= 0.05
    stop.set(Cancelled("stopped by SIGTERM (planner cancel)"))
    for clock in clocks:
        with pytest.raises(Cancelled, match="SIGTERM") as raised:
            clock.sleep(10.0)  # ends at once: the stop is already there
        assert raised.value is not stop.error  # one exception per raise, as threads each get their own
    started = time.monotonic()
    clocks[0].sleep(0.05)  # the cancel's own waits (the workers' checkpoint) are real sleeps again
    assert time.monotonic() - started >= 0.05
