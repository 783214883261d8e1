"""`planner status` and `planner report` through planner.cli.main, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from runtime.accounting.ledger import Ledger
from runtime.reports.run_report import usd
from tests.report.builders import finished_run, running_run


def test_status_of_one_run_as_json_has_the_ledgers_figures(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run_dir = running_run(tmp_path)
    assert main(["status", str(run_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    with Ledger(run_dir) as ledger:
        assert data["spent_usd"] == ledger.total_usd()
        assert data["pools"] == [{"pool": p.pool, "purchase": p.purchase, "node_hours": p.node_hours,
                                  "cost_usd": p.usd} for p in ledger.by_pool()]
    assert (data["status"], data["steps"], data["training_step"], data["progress"]) == ("running", 600, 650, 0.6)
    assert data["forecast_usd"] == pytest.approx(data["spent_usd"] + 6.0)
    assert data["eta"] == "2026-11-30T05:53:20Z" and data["deadline"] == "2026-11-30T10:53:20Z"
    assert data["pool"] == "1x n1-standard-4-t4 on_demand gcp:us-central1"
    assert (data["preemptions"], data["replans"]) == (1, 1)


def test_status_of_one_run_as_a_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run_dir = finished_run(tmp_path)
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    with Ledger(run_dir) as ledger:
        assert usd(ledger.total_usd()) in out
    assert "completed" in out and "1,000 / 1,000 steps (100.0%)" in out and "1 preemption, 1 re-plan" in out


def test_status_prints_a_cause_with_brackets_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    """A cause names job keys as "[run].max_restarts": the terminal must not take "[run]" for a style."""
    from runtime.control.run_state import load_state, save_state

    run_dir = finished_run(tmp_path)
    state = load_state(run_dir)
    state.status, state.cause = "failed", "workers exited (l-2-n0: 1) (failed 2 times; [run].max_restarts = 1)"
    save_state(run_dir, state)
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["status", str(run_dir)]) == 0
    assert "failed: workers exited (l-2-n0: 1) (failed 2 times; [run].max_restarts = 1)" in capsys.readouterr().out


def test_status_lists_every_run_of_the_default_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    finished_run(runs, "done")
    running_run(runs, "going")
    (runs / "broken").mkdir()
    (runs / "broken" / "state.json").write_text("{")
    monkeypatch.chdir(tmp_path)  # the default: ./runs, where `planner run` puts them
    monkeypatch.delenv("DANLU_RUNS_DIR", raising=False)
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    for name in ("done", "going", "broken", "completed", "running", "unreadable", "$14.64", "$8.64"):
        assert name in out
    monkeypatch.chdir("/")
    monkeypatch.setenv("DANLU_RUNS_DIR", str(runs))
    assert main(["status", "--json"]) == 0
    rows = {Path(r["run_dir"]).name: r for r in json.loads(capsys.readouterr().out)}
    assert rows["done"]["status"] == "completed" and rows["going"]["status"] == "running"
    assert "state.json" in rows["broken"]["error"]
    assert main(["status", str(runs)]) == 0  # a directory of runs is listed too
    assert "going" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["status", "{path}"], ["status", "{path}", "--json"], ["report", "{path}"]])
def test_not_a_run_is_one_error_naming_the_path_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                        argv: list[str]) -> None:
    for path in (tmp_path / "missing", tmp_path):
        assert main([a.format(path=path) for a in argv]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert f"error: {path}:" in captured.err and "Traceback" not in captured.err


def test_no_runs_directory_is_an_error_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("DANLU_RUNS_DIR", str(tmp_path / "nowhere"))
    assert main(["status"]) == 2
    assert f"{tmp_path / 'nowhere'}: no such runs directory" in capsys.readouterr().err


def test_report_prints_the_timeline_and_writes_png_and_html(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run_dir = finished_run(tmp_path)
    png, page = tmp_path / "out" / "run.png", tmp_path / "out" / "run.html"
    assert main(["report", str(run_dir), "--png", str(png), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    with Ledger(run_dir) as ledger:
        for launch, cost in ledger.by_launch().items():
            assert f"launch {launch}:" in out and usd(cost) in out
        for spend in ledger.by_pool():
            assert spend.pool in out and usd(spend.usd) in out
    assert "preempted at step 400" in out and "re-plan: 1x n1-standard-4-t4 on_demand" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_mode & 0o777 == 0o644 and page.stat().st_mode & 0o777 == 0o644
    import base64

    assert base64.b64encode(png.read_bytes()).decode() in page.read_text()
    assert not list(png.parent.glob(".*.tmp"))  # atomic writes leave no temporary behind


def test_report_of_a_run_with_nothing_billed_writes_no_png(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from tests.report.builders import SyntheticRun

    run_dir = SyntheticRun(tmp_path).close()
    assert main(["report", str(run_dir), "--png", str(tmp_path / "x.png")]) == 0
    assert "nothing to draw yet" in capsys.readouterr().out and not (tmp_path / "x.png").exists()
