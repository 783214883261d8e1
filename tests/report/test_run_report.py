"""Rendering: the figures text, the PNG (the alert chart above the timeline) and the HTML page."""

from __future__ import annotations

import base64
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from runtime.accounting import alert_email
from runtime.accounting.ledger import Ledger
from runtime.reports.run_report import (
    _chart_alert,
    figures,
    render_html,
    render_png,
    status_table,
    usd,
    write_html,
    write_png,
)
from runtime.reports.run_view import load_run
from tests.report.builders import HOUR, T0, SyntheticRun, finished_run, running_run


def _rows(view, **kw) -> dict[str, str]:
    return dict(figures(view, **kw))


def test_figures_of_a_running_run(tmp_path: Path) -> None:
    view = load_run(running_run(tmp_path))
    with Ledger(view.run_dir) as ledger:
        spent = ledger.total_usd()
    rows = _rows(view, now=view.last_activity + 5)
    assert rows["Status"] == "running, last heard of 5 s ago"
    assert rows["Progress"] == "600 / 1,000 steps (60.0%); the workers are at step 650"
    assert rows["Spent"] == f"{usd(spent)} (8.6% of the $100.00 budget), burning $3.00/h"
    assert rows["Forecast"] == f"{usd(spent + 6)} (14.6% of budget): $6.00 for the 2.00 h left at $3.00/h"
    assert rows["ETA"] == "2026-11-30 05:53:20 UTC (in 2.00 h)"
    assert rows["Deadline"] == "2026-11-30 10:53:20 UTC (5.00 h to spare)"
    assert rows["Pool"] == "1x n1-standard-4-t4 on_demand gcp:us-central1"
    assert rows["Recoveries"] == "1 preemption, 1 re-plan, 0 failures"


def test_a_silent_running_run_says_how_to_resume(tmp_path: Path) -> None:
    view = load_run(running_run(tmp_path))
    status = _rows(view, now=view.last_activity + 3 * 3600)["Status"]
    assert "last heard of 3.0 h ago" in status and f"planner run --resume {view.run_dir}" in status


def test_a_run_whose_controller_exited_early_says_how_to_resume(tmp_path: Path) -> None:
    run = SyntheticRun(tmp_path).started().running()
    from runtime.control.run_summary import build_summary, write_summary

    write_summary(run.run_dir, build_summary(run.state, run.job, run.ledger, run.store))  # status still running
    view = load_run(run.close())
    assert "the controller exited before the run ended" in _rows(view)["Status"]


def test_figures_of_a_finished_run(tmp_path: Path) -> None:
    rows = _rows(load_run(finished_run(tmp_path)))
    assert rows["Status"] == "completed"
    assert rows["Spent"] == "$14.64 (14.6% of the $100.00 budget)"
    assert rows["Ended"] == "2026-11-30 05:53:20 UTC after 5.00 h"
    assert rows["Deadline"] == "2026-11-30 10:53:20 UTC (met with 5.00 h to spare)"
    assert "ETA" not in rows and "Pool" not in rows and "To finish" not in rows


@pytest.mark.parametrize("status", ["failed", "cancelled", "infeasible", "budget_cap"])
def test_an_unfinished_run_never_met_its_deadline(tmp_path: Path, status: str) -> None:
    from runtime.control.run_state import save_state
    from runtime.control.run_summary import build_summary, write_summary

    run = SyntheticRun(tmp_path).started().running()
    run.state.status, run.state.active = status, False
    save_state(run.run_dir, run.state)
    write_summary(run.run_dir, build_summary(run.state, run.job, run.ledger, run.store))
    view = load_run(run.close())
    deadline = _rows(view)["Deadline"]
    assert "spare" not in deadline and deadline.endswith(f"(not met: the run ended {status} 7.00 h before it)")
    table = status_table([view])
    assert table.columns[6].header == "slack" and list(table.columns[6].cells) == ["-"]


def test_tables_at_80_columns_keep_every_pool_and_run_name_whole(tmp_path: Path) -> None:
    from rich.console import Console

    from runtime.reports.run_report import pools_table, timeline_table

    finished = load_run(finished_run(tmp_path, "a-rather-long-job-name-20261201-101500"))
    running = load_run(running_run(tmp_path, "gpt-7b-finetune-20261201-101501"))
    console = Console(width=80, record=True)
    console.print(status_table([finished, running], width=80))
    console.print(pools_table(finished, width=80))
    console.print(timeline_table(finished, width=80))
    out = console.export_text()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    for name in (finished.run_dir.name, running.run_dir.name, "aws:us-east-1/use1-az1:g4dn.xlarge",
                 "gcp:us-central1:n1-standard-4-t4"):
        assert name in out
    assert "spent" in out and "cost" in out  # the money columns stay


def test_png_is_the_alert_chart_above_a_timeline_of_both_pools(tmp_path: Path) -> None:
    view = load_run(finished_run(tmp_path))
    png = render_png(view)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    picture = imread(io.BytesIO(png), format="png")
    chart = imread(io.BytesIO(alert_email.chart_png(_chart_alert(view))), format="png")
    height, width = chart.shape[:2]
    assert picture.shape[1] == width and picture.shape[0] == height + 40 * 2 + 64  # two lanes below
    assert np.array_equal(picture[:height, :, :3], chart[:, :, :3])  # the emails' chart, pixel for pixel
    timeline = (picture[height:, :, :3] * 255).round().astype(int)
    spot, on_demand, preempted = (0x4C, 0x9B, 0xE8), (0xF2, 0x8E, 0x2B), (0xB0, 0x00, 0x20)
    for colour in (spot, on_demand, preempted):
        assert (np.abs(timeline - colour).sum(axis=2) < 10).any(), f"no {colour} in the timeline"


def test_chart_leaves_out_a_far_budget_and_deadline_but_keeps_near_ones(tmp_path: Path) -> None:
    view = load_run(finished_run(tmp_path))  # $14.64 of $100 (15%), 5 h of a 10 h deadline
    alert = _chart_alert(view)
    assert alert.budget_usd is None and alert.forecast.deadline_at == T0 + 10 * HOUR
    running = load_run(running_run(tmp_path, "r"))  # forecast $14.64, ETA 5 h: same verdicts
    assert _chart_alert(running).forecast.deadline_at == T0 + 10 * HOUR
    from dataclasses import replace

    near = replace(view, budget_usd=50.0)
    assert _chart_alert(near).budget_usd == 50.0
    far = replace(view, deadline_at=T0 + 100 * HOUR, forecast=replace(view.forecast, deadline_at=T0 + 100 * HOUR))
    assert _chart_alert(far).forecast.deadline_at is None


def test_nothing_to_draw_before_the_first_launch(tmp_path: Path) -> None:
    run_dir = SyntheticRun(tmp_path).close()
    view = load_run(run_dir)
    assert render_png(view) is None
    assert write_png(view, tmp_path / "x.png") is None and not (tmp_path / "x.png").exists()
    assert "Nothing billed yet" in render_html(view, None)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.images: list[str] = []
        self.links: list[str] = []
        self.cells: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        values = dict(attrs)
        if tag == "img":
            self.images.append(values["src"] or "")
        for name in ("href", "src"):
            if values.get(name) and not values[name].startswith("data:"):
                self.links.append(values[name])

    def handle_data(self, data: str) -> None:
        self.cells.append(data)


def test_html_is_self_contained_with_figures_tables_and_the_png(tmp_path: Path) -> None:
    view = load_run(finished_run(tmp_path))
    target = tmp_path / "out" / "report.html"
    write_html(view, target)
    assert target.stat().st_mode & 0o777 == 0o644
    page = _Page()
    page.feed(target.read_text(encoding="utf-8"))
    assert page.links == []  # nothing fetched from anywhere
    (src,) = page.images
    assert src.startswith("data:image/png;base64,")
    assert base64.b64decode(src.split(",", 1)[1]) == render_png(view)
    assert page.tags.count("table") == 3
    text = " ".join(page.cells)
    with Ledger(view.run_dir) as ledger:
        for spend in ledger.by_pool():
            assert spend.pool in text and usd(spend.usd) in text
        assert usd(ledger.total_usd()) in text
        for launch, cost in ledger.by_launch().items():
            assert re.search(rf"launch {launch}: .*?{re.escape(usd(cost))}", text)
    assert "preempted at step 400" in text and "re-plan: 1x n1-standard-4-t4 on_demand" in text


def test_html_escapes_what_the_run_wrote(tmp_path: Path) -> None:
    run = SyntheticRun(tmp_path).started()
    run.emit(2.2, "failure", launch="l-2", cause="<script>alert(1)</script>", failures=1, max_restarts=2)
    view = load_run(run.close())
    page = render_html(view, None)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


@pytest.mark.parametrize("value, text", [(0.02637, "$0.0264"), (5.0, "$5.00"), (1234.5, "$1,234.50"),
                                         (-0.5, "-$0.5000")])
def test_usd(value: float, text: str) -> None:
    assert usd(value) == text


def test_a_run_stopped_at_its_budget_cap_says_what_finishing_costs(tmp_path: Path) -> None:
    from runtime.accounting.ledger import IntervalKey
    from runtime.control.run_state import save_state
    from runtime.control.run_summary import build_summary, write_summary

    run = SyntheticRun(tmp_path).started().running()
    run.ledger.close(IntervalKey("l-2", "l-2-n0"), end=T0 + 3 * HOUR, reason="budget cap")
    run.state.launches[-1].released_at = T0 + 3 * HOUR
    run.state.status, run.state.cause, run.state.active = "budget_cap", "stopped before the budget was exceeded", False
    run.emit(3.0, "run_end", status="budget_cap", cause=run.state.cause, steps=600)
    save_state(run.run_dir, run.state)
    write_summary(run.run_dir, build_summary(run.state, run.job, run.ledger, run.store))
    view = load_run(run.close())
    rows = _rows(view)
    assert rows["Status"] == "budget_cap: stopped before the budget was exceeded"
    assert rows["To finish"] == f"$6.00 more for 2.00 h on the last pool, {usd(view.spent_usd + 6)} in total"
    assert view.eta is None and "ETA" not in rows
    assert view.timeline[-1].text == "ended: budget_cap (stopped before the budget was exceeded)"
    assert rows["Continue"] == (f"`planner run --resume {view.run_dir} --budget-usd USD` with a larger budget "
                                "(from step 600, its last checkpoint; re-planned from where it stands)")


@pytest.mark.parametrize(("status", "advice"), [("failed", "fix the cause, then `planner run --resume"),
                                                ("cancelled", "`planner run --resume"),
                                                ("infeasible", "`planner run --resume")])
def test_a_stopped_run_says_how_it_goes_on_and_a_finished_one_does_not(tmp_path: Path, status: str,
                                                                       advice: str) -> None:
    from runtime.control.run_state import save_state

    run = SyntheticRun(tmp_path).started().running()
    run.state.status, run.state.cause, run.state.active = status, "workers exited", False
    save_state(run.run_dir, run.state)
    view = load_run(run.close())
    continue_row = _rows(view)["Continue"]
    assert continue_row.startswith(f"{advice} {view.run_dir}"), continue_row
    assert f"from step {view.steps:,}, its last checkpoint" in continue_row
    # no plan fit: more budget or more time, whichever it lacked
    assert ("--budget-usd USD` for a larger budget" in continue_row) == (status == "infeasible")
    assert ("--deadline-in HOURS` for a later deadline" in continue_row) == (status == "infeasible")
    (tmp_path / "finished").mkdir()
    assert "Continue" not in _rows(load_run(finished_run(tmp_path / "finished")))
