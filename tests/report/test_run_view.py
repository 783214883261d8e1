"""RunView from synthetic run directories: the figures are the ledger's, nothing is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.accounting.ledger import Ledger
from runtime.reports.run_view import NotARunError, RunViewError, find_runs, load_run
from tests.report.builders import (
    HOUR,
    L1_USD,
    ON_DEMAND,
    SPOT,
    T0,
    SyntheticRun,
    finished_run,
    running_run,
)


def _files(directory: Path) -> dict[str, tuple[int, int, bytes] | None]:
    """Every file under ``directory`` with its mode, mtime and bytes.

    The ``-shm`` file of a ledger in use is SQLite's shared memory, where every reader
    registers a read mark: only its presence is compared.
    """
    found: dict[str, tuple[int, int, bytes] | None] = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            st = path.stat()
            name = str(path.relative_to(directory))
            found[name] = None if name.endswith("-shm") else (st.st_mode, st.st_mtime_ns, path.read_bytes())
    return found


def test_finished_run_figures_equal_the_ledger(tmp_path: Path) -> None:
    run_dir = finished_run(tmp_path)
    view = load_run(run_dir)
    with Ledger(run_dir) as ledger:
        total, by_pool, by_launch = ledger.total_usd(), ledger.by_pool(), ledger.by_launch()
    assert total == pytest.approx(L1_USD + 3.0 * 2.9, rel=1e-12)  # $5.94 + $8.70: the story, not the code
    assert view.spent_usd == total
    assert view.by_pool == tuple(by_pool)
    assert {s.launch_id: s.cost_usd for s in view.segments} == by_launch
    assert view.status == "completed" and view.controller_exited and not view.running
    assert (view.steps, view.work_done, view.progress) == (1000, 1000.0, 1.0)
    assert (view.preemptions, view.replans, view.lost_steps) == (1, 1, 0)
    assert view.as_of == T0 + 5 * HOUR and view.hours == pytest.approx(5.0)
    assert view.eta is None and view.pool is None
    assert view.forecast.total_usd == total and view.forecast.remaining_hours == 0
    assert view.deadline_at == T0 + 10 * HOUR


def test_timeline_has_launches_preemptions_and_replans_with_spend_at_each(tmp_path: Path) -> None:
    view = load_run(finished_run(tmp_path))
    kinds = [e.kind for e in view.timeline]
    assert kinds == ["run_started", "plan", "launch", "notice", "preemption", "replan", "launch", "run_end"]
    by_kind = {e.kind: e for e in view.timeline}
    assert by_kind["preemption"].spent_usd == pytest.approx(L1_USD)
    assert by_kind["notice"].spent_usd == pytest.approx(2 * 1.5 * (1.95 - 0.02))
    assert by_kind["run_end"].spent_usd == pytest.approx(view.spent_usd)
    first, second = [e for e in view.timeline if e.kind == "launch"]
    assert first.segment.pool_id == SPOT.id and first.cost_usd == pytest.approx(L1_USD)
    assert "steps 0-400, preempted (stop request)" in first.text
    assert second.segment.purchase == "on_demand" and second.cost_usd == pytest.approx(8.7)
    assert by_kind["replan"].text.startswith(f"re-plan: {ON_DEMAND.label(1)}")


def test_run_in_progress_is_read_from_state_events_and_ledger(tmp_path: Path) -> None:
    run_dir = running_run(tmp_path)
    assert not (run_dir / "summary.json").exists()
    view = load_run(run_dir)
    with Ledger(run_dir) as ledger:
        total, burn = ledger.total_usd(), ledger.snapshot().burn_usd_per_hour
    assert total == pytest.approx(L1_USD + 3.0 * 0.9)
    assert view.spent_usd == total and view.burn_usd_per_hour == burn == 3.0
    assert view.status == "running" and view.running and not view.controller_exited
    assert (view.steps, view.work_done, view.training_step) == (600, 600.0, 650)
    assert view.progress == pytest.approx(0.6)
    assert view.as_of == T0 + 3 * HOUR  # the last heartbeat billed
    # The measured 200 steps/h on the current pool: 400 steps = 2 h at $3/h.
    fc = view.forecast
    assert (fc.remaining_hours, fc.remaining_usd) == (pytest.approx(2.0), pytest.approx(6.0))
    assert fc.total_usd == pytest.approx(total + 6.0)
    assert view.eta == pytest.approx(T0 + 5 * HOUR)
    assert fc.slack_hours == pytest.approx(5.0)
    assert view.pool == ON_DEMAND.label(1)
    assert view.segments[-1].end is None and view.segments[-1].outcome is None


def test_reading_writes_nothing_with_or_without_a_controller_holding_the_ledger(tmp_path: Path) -> None:
    run = SyntheticRun(tmp_path).started().running()
    # A controller still has the ledger open: its write-ahead log is beside the database.
    assert (run.run_dir / "ledger.sqlite-wal").exists()
    before = _files(run.run_dir)
    assert load_run(run.run_dir).spent_usd == pytest.approx(L1_USD + 2.7)
    assert _files(run.run_dir) == before
    run_dir = run.close()
    assert not (run_dir / "ledger.sqlite-wal").exists()
    before = _files(run_dir)
    load_run(run_dir)
    assert _files(run_dir) == before  # no -wal/-shm left behind by the reader


def test_a_write_after_the_reader_opened_is_seen_next_time(tmp_path: Path) -> None:
    run = SyntheticRun(tmp_path).started().running()
    first = load_run(run.run_dir).spent_usd
    run.finished()
    assert load_run(run.run_dir).spent_usd == pytest.approx(first + 3.0 * 2.0)
    run.close()


def test_run_not_started_yet_has_no_spend_and_no_timeline(tmp_path: Path) -> None:
    run = SyntheticRun(tmp_path)
    run_dir = run.close()
    (run_dir / "events.jsonl").unlink()
    (run_dir / "ledger.sqlite").unlink()
    view = load_run(run_dir)
    assert (view.spent_usd, view.timeline, view.segments, view.curve) == (0, (), (), ())
    assert not (run_dir / "ledger.sqlite").exists()


def test_torn_last_event_is_skipped(tmp_path: Path) -> None:
    run_dir = finished_run(tmp_path)
    with (run_dir / "events.jsonl").open("a") as f:
        f.write('{"seq": 99, "event": "preempt')  # a SIGKILL mid-write
    assert [e.kind for e in load_run(run_dir).timeline][-1] == "run_end"


@pytest.mark.parametrize("make", ["missing", "file", "empty"])
def test_not_a_run_names_the_path(tmp_path: Path, make: str) -> None:
    path = tmp_path / "somewhere"
    if make == "file":
        path.write_text("x")
    elif make == "empty":
        path.mkdir()
    with pytest.raises(NotARunError, match=str(path)):
        load_run(path)


def test_unreadable_summary_names_the_file_and_the_fix(tmp_path: Path) -> None:
    run_dir = finished_run(tmp_path)
    (run_dir / "summary.json").write_text("{not json")
    with pytest.raises(RunViewError, match=r"summary\.json: unreadable .* To fix: move it away"):
        load_run(run_dir)


def test_find_runs_lists_run_directories_only(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    finished_run(runs, "a")
    running_run(runs, "b")
    (runs / "not-a-run").mkdir()
    assert [p.name for p in find_runs(runs)] == ["a", "b"]
    with pytest.raises(NotARunError, match="DANLU_RUNS_DIR"):
        find_runs(tmp_path / "nowhere")


def test_the_view_imports_neither_torch_nor_matplotlib() -> None:
    code = ("import sys, runtime.reports.run_view, runtime.reports.run_report, planner.commands.status, planner.commands.report; "
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2], env={**os.environ, "PYTHONPATH": "."})
    assert out.stdout.strip() == "[]"


def test_a_ledger_that_is_not_sqlite_names_the_file(tmp_path: Path) -> None:
    run_dir = finished_run(tmp_path)
    (run_dir / "ledger.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(RunViewError, match=r"ledger\.sqlite: cannot read the spend ledger"):
        load_run(run_dir)
