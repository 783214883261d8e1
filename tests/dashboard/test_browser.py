"""The dashboard in a real browser (Debian's Chromium under Playwright), against a real run.

The screenshots the tests take are the ones docs/dashboard.md shows.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from planner.cli import main
from tests.dashboard.conftest import DOCS
from tests.report.builders import finished_run
from tests.run.helpers import REPO

# One worker for all of them under pytest-xdist (--dist loadgroup): one tracked run, one browser.
pytestmark = [pytest.mark.ddp, pytest.mark.xdist_group("dashboard-run")]


def _money(text: str) -> float:
    return float(re.sub(r"[^0-9.\-]", "", text))


def test_runs_list_shows_the_run_and_updates_while_it_runs(tracked_run, dashboard, page) -> None:
    page.goto(dashboard.url + "/")
    row = page.locator(f'#runs tr[data-run="{tracked_run.run_dir.name}"]')
    row.wait_for(timeout=120_000)  # the controller writes state.json within seconds of its start
    assert row.locator("a").get_attribute("href") == f"/runs/{tracked_run.run_dir.name}"
    page.locator("#live.on").wait_for()
    first = row.locator(".spent").inner_text()
    # The page is never reloaded: new figures can only come through the live stream.
    page.wait_for_function(
        """([name, first]) => {
            const cell = document.querySelector(`#runs tr[data-run="${name}"] .spent`);
            return cell && cell.textContent !== first;
        }""", arg=[tracked_run.run_dir.name, first], timeout=300_000)
    assert row.get_attribute("class") == "running"
    assert "spot" in row.locator(".pool").inner_text()
    # For the docs: the run after its preemption and re-plan, still training (if this machine is not too quick).
    page.wait_for_function(
        """(name) => {
            const row = document.querySelector(`#runs tr[data-run="${name}"]`);
            return row && (row.classList.contains("completed") ||
                           (row.cells[8].textContent === "1" && !row.querySelector(".done").textContent.startsWith("0.0%")));
        }""", arg=tracked_run.run_dir.name, timeout=300_000)
    page.screenshot(path=str(DOCS / "dashboard-runs.png"), full_page=True)
    tracked_run.wait()
    page.locator(f'#runs tr[data-run="{tracked_run.run_dir.name}"].completed').wait_for(timeout=60_000)
    assert row.locator(".done").inner_text().startswith("100%")


def test_run_page_shows_the_preemption_and_the_replan(tracked_run, dashboard, page) -> None:
    tracked_run.wait()
    page.goto(f"{dashboard.url}/runs/{tracked_run.run_dir.name}")
    page.locator("#run-status.completed").wait_for()
    kinds = page.locator("#timeline tbody tr").evaluate_all("rows => rows.map(r => r.dataset.kind)")
    assert kinds.index("preemption") < kinds.index("replan") < kinds.index("run_end")
    assert kinds.count("launch") == 2
    preemption = page.locator('#timeline tr[data-kind="preemption"]').inner_text()
    assert "preempted at step" in preemption
    # The pool timeline draws both launches, the preempted one marked, and the re-plan.
    assert page.locator('#pool-chart rect.segment[data-outcome="preempted"]').count() == 1
    assert page.locator('#pool-chart rect.segment[data-outcome="completed"]').count() == 1
    assert page.locator("#pool-chart .marker-preemption").count() == 1
    assert page.locator("#pool-chart .marker-replan").count() >= 1
    assert page.locator("#spend-chart polyline.spend-line").count() == 1
    summary = json.loads((tracked_run.run_dir / "summary.json").read_text())
    figures = dict(page.locator("#summary tr").evaluate_all(
        "rows => rows.map(r => [r.cells[0].textContent, r.cells[1].textContent])"))
    assert _money(figures["cost_usd"]) == pytest.approx(summary["cost_usd"], abs=5e-5)
    assert figures["preemptions"] == "1" and figures["status"] == "completed"
    page.locator("#events-box summary").click()
    assert int(page.locator("#event-count").inner_text()) == len(
        (tracked_run.run_dir / "events.jsonl").read_text().splitlines())
    page.screenshot(path=str(DOCS / "dashboard-run.png"), full_page=True)


def test_quote_page_numbers_equal_planner_quote_json(tracked_run, dashboard, page, capsys) -> None:
    job = tracked_run.root / "gpt-7b-finetune.toml"
    shutil.copyfile(REPO / "examples" / "gpt-7b-finetune.toml", job)
    assert main(["quote", str(job), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    page.goto(f"{dashboard.url}/quote?job=file:{job.name}")
    page.locator("#phases tbody tr").first.wait_for(timeout=120_000)
    plan = cli["plan"]
    shown = dict(page.locator("#plan-figures tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.key, r.cells[1].textContent])"))
    assert _money(shown["expected_cost_usd"]) == plan["expected_cost_usd"]
    assert _money(shown["p90_cost_usd"]) == plan["p90_cost_usd"]
    assert _money(shown["expected_hours"]) == round(plan["expected_hours"], 2)
    assert _money(shown["p90_hours"]) == round(plan["p90_hours"], 2)
    phases = page.locator("#phases tbody tr").evaluate_all("rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert [(p[2], int(p[4]), p[5], _money(p[6]), _money(p[8])) for p in phases] == [
        (p["instance_type"], p["nodes"], p["purchase"], round(p["hourly_usd"], 2), p["cost_usd"]) for p in plan["phases"]]
    lines = page.locator("#cost-lines tbody tr").evaluate_all("rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert [(label, _money(cost)) for label, cost in lines] == [(c["label"], c["usd"]) for c in plan["cost_lines"]]
    alternatives = page.locator("#alternatives tbody tr").evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert [_money(a[2]) for a in alternatives] == [a["expected_cost_usd"] for a in cli["alternatives"]]
    frontier = page.locator("#frontier tbody tr").evaluate_all("rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert [_money(cost) for _, cost in frontier] == [f["expected_cost_usd"] for f in cli["frontier"]]
    assert len(cli["frontier"]) >= 2
    # The chart is interactive: a point says what it is when hovered.
    point = page.locator("#frontier-chart circle.plan")
    point.hover()
    assert page.locator("#frontier-detail").inner_text().startswith("the plan:")
    page.screenshot(path=str(DOCS / "dashboard-quote.png"), full_page=True)


def test_pasted_job_errors_name_the_key(dashboard, page) -> None:
    page.goto(f"{dashboard.url}/quote")
    page.fill("#toml", 'name = "x"\n[workload]\nsteps = 10\n[constraints]\ndeadline_hour = 3\n')
    page.click("#quote-button")
    error = page.locator("#error")
    error.wait_for()
    assert "constraints.deadline_hour: unknown key" in error.inner_text()
    assert page.locator("#result").is_hidden()


HOSTILE = '<img src=x onerror="window.__pwned=1">'


def test_a_run_name_with_html_renders_as_text(tmp_path, page) -> None:
    from runtime.dashboard.app import DashboardConfig
    from runtime.dashboard.server import start_in_thread

    (tmp_path / "runs").mkdir()
    finished_run(tmp_path / "runs", name=HOSTILE)
    served = start_in_thread(DashboardConfig(runs_dir=tmp_path / "runs", poll_s=0.5))
    try:
        page.goto(served.url + "/")
        link = page.locator("#runs tbody tr a")
        link.wait_for()
        assert link.inner_text() == HOSTILE
        assert page.locator("#runs img").count() == 0
        link.click()
        page.locator("#run-status.completed").wait_for()
        assert page.locator("#run-name").inner_text() == HOSTILE
        assert HOSTILE in page.locator("#figures").inner_text()
        assert page.locator("main img").count() == 0
        assert page.evaluate("window.__pwned") is None
    finally:
        served.stop()


def test_a_queues_job_is_listed_under_its_queue_and_its_page_opens(tmp_path, page) -> None:
    from runtime.control.queue_record import QUEUE_RUN_FILE
    from runtime.dashboard.app import DashboardConfig
    from runtime.dashboard.server import start_in_thread

    queue = tmp_path / "runs" / "q-20261207-004500"  # as `planner run QUEUE.toml` names a queue's directory
    queue.mkdir(parents=True)
    (queue / QUEUE_RUN_FILE).write_text("{}")
    finished_run(queue, name="a")
    served = start_in_thread(DashboardConfig(runs_dir=tmp_path / "runs", poll_s=0.5))
    try:
        page.goto(served.url + "/")
        link = page.locator('#runs tr[data-run="q-20261207-004500/a"] a')
        link.wait_for()
        link.click()
        page.locator("#run-status.completed").wait_for()
        assert page.locator("#run-name").inner_text() == "q-20261207-004500/a"
        figures = page.locator("#figures").inner_text()
        assert "Spent" in figures and "completed" in figures, figures  # its own figures, read from its files
    finally:
        served.stop()


def test_the_spend_chart_draws_the_budget_and_its_alert_thresholds_when_within_reach(tmp_path, page) -> None:
    from runtime.control.run_state import load_state, save_state
    from runtime.dashboard.app import DashboardConfig
    from runtime.dashboard.server import start_in_thread

    (tmp_path / "runs").mkdir()
    run_dir = finished_run(tmp_path / "runs", name="near-budget")  # spends $14.64
    state = load_state(run_dir)
    state.job = {**state.job, "constraints": {**state.job["constraints"], "budget_usd": 20.0}}
    save_state(run_dir, state)
    served = start_in_thread(DashboardConfig(runs_dir=tmp_path / "runs", poll_s=0.5))
    try:
        page.goto(served.url + "/runs/near-budget")
        page.locator("#run-status.completed").wait_for()
        drawn = page.locator("#spend-chart line[data-threshold]").evaluate_all(
            "lines => lines.map(l => Number(l.dataset.threshold))")
        assert drawn == [0.5, 0.8, 1.0]  # the job's [alerts].thresholds (the default), $10, $16 and $20
        labels = page.locator("#spend-chart text").evaluate_all("texts => texts.map(t => t.textContent)")  # SVG: no innerText
        assert "budget $20.00" in labels and "80% $16.00" in labels
    finally:
        served.stop()
