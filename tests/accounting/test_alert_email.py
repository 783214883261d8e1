"""Rendering: plain text + HTML + inline PNG chart, with the figures in every part."""

from __future__ import annotations

import io
import re
from dataclasses import replace

import matplotlib.image
import pytest

from runtime.accounting.alert_email import render
from runtime.accounting.alerts import RunEnded, RunOutcome
from runtime.accounting.ledger import LedgerSnapshot

from .helpers import budget_stop_alert


def parts(msg):
    return {p.get_content_type(): p for p in msg.walk()}


def test_message_structure_and_headers(tmp_path):
    alert = budget_stop_alert(tmp_path)
    msg = render(alert, sender="danlu@example.com", recipients=("ml-team@example.com", "lead@example.com"))
    assert msg.get_content_type() == "multipart/alternative"
    assert list(parts(msg)) == ["multipart/alternative", "text/plain", "multipart/related", "text/html",
                                "image/png"]
    assert msg["To"] == "ml-team@example.com, lead@example.com"
    assert msg["Subject"] == ("[danlu] gpt-7b: the run was checkpointed and stopped before exceeding its budget")
    assert msg["X-Danlu-Alert"] == "run-ended"
    assert msg["X-Danlu-Spent-USD"] == "453.39"
    assert msg["X-Danlu-Forecast-USD"] == "781.09"
    assert msg["X-Danlu-Budget-USD"] == "600.00"


def test_budget_stop_email_says_what_remains_and_what_finishing_costs(tmp_path):
    msg = render(budget_stop_alert(tmp_path), sender="danlu@example.com", recipients=("a@example.com",))
    text = parts(msg)["text/plain"].get_content()
    expected = [
        r"Spent so far: +\$453\.39 \(75\.6% of \$600\.00\)",
        r"Burn rate now: +\$65\.54/h",
        r"Forecast total: +\$781\.09 \(130\.2% of budget\)",
        r"Outcome: +budget_cap: checkpoint step 1200",
        r"Remaining work: +5\.0 h at \$65\.54/h = \$327\.70",
        r"Cost to finish: +\$327\.70 more for the 5\.0 h of work left, \$781\.09 in total",
        r"To finish: +`planner run --resume RUN_DIR --budget-usd 860`: the run goes on from its last checkpoint "
        r"\(the work left needs \$781\.09 in all, \$181\.09 more than the budget\)",
        r"aws:us-west-2:p4d\.24xlarge +on_demand +7\.0 node-h +\$229\.39",
        r"aws:us-east-1:p4d\.24xlarge +spot +20\.0 node-h +\$224\.00",
    ]
    for pattern in expected:
        assert re.search(pattern, text), pattern
    html = parts(msg)["text/html"].get_content()
    for figure in ["$453.39", "$781.09", "$327.70", "--budget-usd 860`: the run goes on", "$229.39", "$224.00"]:
        assert figure in html


def test_the_budget_to_finish_holds_the_caps_stop_reserve_too(tmp_path):
    # A resumed run's re-plan needs the work left and the reserve the cap keeps for a stop: $781.09 and
    # 20 min at $65.54/h ($21.85) is $802.94, a tenth more $883.23: 890 at two significant figures.
    alert = budget_stop_alert(tmp_path)
    held = replace(alert, forecast=replace(alert.forecast, reserve_usd=65.54 / 3))
    text = parts(render(held, sender="danlu@example.com", recipients=("a@example.com",)))["text/plain"].get_content()
    assert re.search(r"To finish: +`planner run --resume RUN_DIR --budget-usd 890`", text), text


def test_chart_is_a_png_referenced_by_the_html(tmp_path):
    msg = render(budget_stop_alert(tmp_path), sender="danlu@example.com", recipients=("a@example.com",))
    image = parts(msg)["image/png"]
    pixels = matplotlib.image.imread(io.BytesIO(image.get_content()), format="png")
    assert pixels.shape[0] >= 200 and pixels.shape[1] >= 500
    assert pixels.std() > 0.05  # something was drawn
    cid = image["Content-ID"].strip("<>")
    assert f'src="cid:{cid}"' in parts(msg)["text/html"].get_content()
    assert image.get_content_disposition() == "inline"


def test_with_nothing_spent_or_planned_there_is_no_chart_but_still_a_message(tmp_path):
    alert = budget_stop_alert(tmp_path)
    empty = LedgerSnapshot(alert.at, 0.0, (), 0, 0.0, (), frozenset())
    msg = render(replace(alert, snapshot=empty, forecast=None), sender="danlu@example.com",
                 recipients=("a@example.com",))
    assert "image/png" not in parts(msg)
    assert "cid:" not in parts(msg)["text/html"].get_content()
    assert re.search(r"Spent so far: +\$0\.00 \(0\.0% of \$600\.00\)", parts(msg)["text/plain"].get_content())


def test_a_forecast_before_any_spend_still_gets_a_chart(tmp_path):
    alert = budget_stop_alert(tmp_path)
    empty = LedgerSnapshot(alert.at, 0.0, (), 0, 0.0, (), frozenset())
    msg = render(replace(alert, snapshot=empty), sender="danlu@example.com", recipients=("a@example.com",))
    assert "image/png" in parts(msg)


def test_html_escapes_names(tmp_path):
    alert = replace(budget_stop_alert(tmp_path), run_name="<b>x</b>")
    html = parts(render(alert, sender="d@example.com", recipients=()))["text/html"].get_content()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html


@pytest.mark.parametrize(("outcome", "go_on"), [
    (RunOutcome.FAILED, "fix the cause, then `planner run --resume /runs/gpt-7b`: it goes on from its last checkpoint"),
    (RunOutcome.CANCELLED, "`planner run --resume /runs/gpt-7b` goes on from its last checkpoint"),
    (RunOutcome.INFEASIBLE, "`planner run --resume /runs/gpt-7b --budget-usd USD` (a larger budget) or `planner run "
                            "--resume /runs/gpt-7b --deadline-in HOURS` (a later deadline, hours from now) goes on "
                            "from its last checkpoint"),
    (RunOutcome.COMPLETED, None),
])
def test_a_run_that_stopped_short_names_the_command_that_goes_on(tmp_path, outcome, go_on):
    alert = budget_stop_alert(tmp_path)
    alert = replace(alert, ended=RunEnded(outcome, "step 1200"), run_dir="/runs/gpt-7b")
    text = parts(render(alert, sender="danlu@example.com", recipients=("a@example.com",)))["text/plain"].get_content()
    lines = [line for line in text.splitlines() if line.startswith("To go on:")]
    assert lines == ([] if go_on is None else [f"To go on:       {go_on}"]), text
