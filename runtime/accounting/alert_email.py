"""Budget alert emails: plain text, HTML and a small cost-over-time chart.

:func:`render` builds one MIME message per alert::

    multipart/alternative
    ├── text/plain            the figures, readable in any client
    └── multipart/related
        ├── text/html         the same figures as tables
        └── image/png         the chart, shown inline through its Content-ID

The chart (matplotlib, Agg backend, no pyplot state) draws cumulative spend, the
forecast to the expected end, the budget and the alert thresholds.  A chart that
cannot be drawn is logged and left out; the message still goes.  ``X-Danlu-*`` headers
carry the key figures for mail filters and scripts.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import logging
import math
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid

from runtime.accounting.alerts import Alert, AlertKind, RunOutcome
from runtime.accounting.forecast import Forecast

__all__ = ["body_lines", "chart_png", "render", "subject"]

logger = logging.getLogger(__name__)


def render(alert: Alert, *, sender: str, recipients: tuple[str, ...], chart: bool = True) -> EmailMessage:
    """The email for ``alert``: text + HTML (+ inline PNG chart when it can be drawn)."""
    msg = EmailMessage()
    msg["Subject"] = subject(alert)
    msg["From"] = sender
    if recipients:
        msg["To"] = ", ".join(recipients)
    msg["Date"] = format_datetime(dt.datetime.fromtimestamp(alert.at, dt.timezone.utc))
    msg["Message-ID"] = make_msgid(idstring=f"danlu.{alert.key}", domain=sender.rpartition("@")[2] or None)
    msg["X-Danlu-Run"] = alert.run_name
    msg["X-Danlu-Alert"] = alert.key
    msg["X-Danlu-Kind"] = alert.kind.value
    msg["X-Danlu-Spent-USD"] = f"{alert.spent_usd:.2f}"
    if alert.forecast is not None:
        msg["X-Danlu-Forecast-USD"] = f"{alert.forecast.total_usd:.2f}"
    if alert.budget_usd is not None:
        msg["X-Danlu-Budget-USD"] = f"{alert.budget_usd:.2f}"

    lines = body_lines(alert)
    msg.set_content("\n".join(_text_block(alert, lines)) + "\n")
    png = chart_png(alert) if chart else None
    cid = make_msgid(idstring="chart", domain="danlu.invalid")
    msg.add_alternative(_html(alert, lines, cid if png else None), subtype="html")
    if png:
        msg.get_payload()[1].add_related(png, maintype="image", subtype="png", cid=cid,
                                         filename="spend.png", disposition="inline")
    return msg


def subject(alert: Alert) -> str:
    return f"[danlu] {alert.run_name}: {alert.headline}"


def body_lines(alert: Alert) -> list[tuple[str, str]]:
    """The figures of the alert as (label, value) rows, shared by the text and HTML parts."""
    rows = [("Run", alert.run_name), ("Alert", alert.headline), ("As of", _when(alert.at))]
    budget = alert.budget_usd
    spent = alert.spent_usd
    rows.append(("Spent so far", _usd(spent) + (f" ({spent / budget:.1%} of {_usd(budget)})" if budget else "")))
    if budget:
        rows.append(("Budget", _usd(budget)))
    rows.append(("Burn rate now", f"{_usd(alert.snapshot.burn_usd_per_hour)}/h"))
    fc = alert.forecast
    if fc is not None:
        share = f" ({fc.budget_fraction:.1%} of budget)" if fc.budget_fraction is not None else ""
        rows.append(("Forecast total", _usd(fc.total_usd) + share))
        rows.append(("Remaining work", f"{fc.remaining_hours:,.1f} h at {_usd(fc.plan_hourly_usd)}/h = "
                                       f"{_usd(fc.remaining_usd)}"))
        rows.append(("Expected end", _when(fc.expected_end)))
        if fc.deadline_at is not None:
            rows.append(("Deadline", f"{_when(fc.deadline_at)} (slack {fc.slack_hours:+,.1f} h)"))
    if alert.replan is not None:
        rows.append(("Re-plan", f"{_usd(alert.replan.previous_total_usd)} -> {_usd(alert.replan.new_total_usd)}"
                                + (f" ({alert.replan.reason})" if alert.replan.reason else "")))
    if alert.late is not None:
        rows.append(("Plan ends", f"{_when(alert.late.expected_end)} ({alert.late.hours_late:,.1f} h after "
                                  f"the deadline {_when(alert.late.deadline_at)})"
                                  + (f": {alert.late.reason}" if alert.late.reason else "")))
    if alert.ended is not None:
        rows.extend(_ending_rows(alert))
    if alert.nodes_left is not None:
        rows.append(("Error", alert.nodes_left.error))
        rows.append(("To fix", f"`planner cancel {alert.run_dir or 'RUN_DIR'}` releases them once the cloud answers "
                               "(`planner gc` lists what runs left on a cloud)"))
    return rows


def _ending_rows(alert: Alert) -> list[tuple[str, str]]:
    ended = alert.ended
    rows = [("Outcome", RunOutcome(ended.outcome).value + (f": {ended.detail}" if ended.detail else ""))]
    if (go_on := _go_on(alert)) is not None:
        rows.append(("To go on", go_on))
    fc = alert.forecast
    if RunOutcome(ended.outcome) is RunOutcome.COMPLETED or fc is None or fc.remaining_hours <= 0:
        return rows
    rows.append(("Cost to finish", f"{_usd(fc.remaining_usd)} more for the {fc.remaining_hours:,.1f} h of work "
                                   f"left, {_usd(fc.total_usd)} in total"))
    budget = alert.budget_usd
    if budget and (RunOutcome(ended.outcome) is RunOutcome.BUDGET_CAP or fc.total_usd > budget):
        command = f"`planner run --resume {alert.run_dir or 'RUN_DIR'} --budget-usd {_budget_to_finish(fc, budget)}`"
        why = (f"{_usd(fc.total_usd - budget)} more than the budget" if fc.total_usd > budget
               else "the budget, but not the reserve the cap keeps to stop and release the nodes")
        rows.append(("To finish", f"{command}: the run goes on from its last checkpoint (the work left needs "
                                  f"{_usd(fc.total_usd)} in all, {why})"))
    return rows


def _go_on(alert: Alert) -> str | None:
    """The command that continues a run that stopped short of the end (but for the budget cap: see
    "To finish"), for a reader who has only the email."""
    assert alert.ended is not None
    resume = f"`planner run --resume {alert.run_dir or 'RUN_DIR'}`"
    return {
        RunOutcome.FAILED: f"fix the cause, then {resume}: it goes on from its last checkpoint",
        RunOutcome.CANCELLED: f"{resume} goes on from its last checkpoint",
        RunOutcome.INFEASIBLE: f"{resume[:-1]} --budget-usd USD` (a larger budget) or {resume[:-1]} --deadline-in "
                               "HOURS` (a later deadline, hours from now) goes on from its last checkpoint",
    }.get(RunOutcome(alert.ended.outcome))


def _budget_to_finish(fc: Forecast, budget: float) -> str:
    """A budget that lets the run finish: the forecast total and the reserve the cap keeps for a stop (the
    old budget, if larger), a tenth more for the pace to vary, rounded up to two significant figures. A
    resumed run's re-plan holds its plan to the same sum (runtime.control.replan)."""
    need = max(fc.total_usd + fc.reserve_usd, budget) * 1.1
    step = 10.0 ** (math.floor(math.log10(need)) - 1)
    return f"{math.ceil(round(need / step, 9)) * step:.10g}"


def _text_block(alert: Alert, lines: list[tuple[str, str]]) -> list[str]:
    width = max(len(label) for label, _ in lines) + 2
    out = [f"{label + ':':<{width}}{value}" for label, value in lines]
    if alert.snapshot.by_pool:
        out += ["", "Spend by pool:"]
        out += [f"  {p.pool:<40} {p.purchase:<12} {p.node_hours:>9,.1f} node-h  {_usd(p.usd):>12}"
                for p in alert.snapshot.by_pool]
    out += ["", f"Alert {alert.key} of run {alert.run_name}; each alert is sent once."]
    return out


def _html(alert: Alert, lines: list[tuple[str, str]], cid: str | None) -> str:
    esc = html.escape
    rows = "".join(f"<tr><th align=\"left\">{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in lines)
    pools = "".join(
        f"<tr><td>{esc(p.pool)}</td><td>{esc(p.purchase)}</td><td align=\"right\">{p.node_hours:,.1f}</td>"
        f"<td align=\"right\">{esc(_usd(p.usd))}</td></tr>" for p in alert.snapshot.by_pool)
    pool_table = (f"<h3>Spend by pool</h3><table cellpadding=\"4\"><tr><th>Pool</th><th>Purchase</th>"
                  f"<th>Node-hours</th><th>USD</th></tr>{pools}</table>" if pools else "")
    img = (f"<p><img src=\"cid:{cid[1:-1]}\" alt=\"Spend over time\" width=\"600\"></p>" if cid else "")
    urgent = (AlertKind.ACTUAL, AlertKind.DEADLINE_AT_RISK, AlertKind.DEADLINE_MISSED)
    colour = "#b00020" if alert.kind in urgent else "#333333"
    return (f"<html><body style=\"font-family: sans-serif\">"
            f"<h2 style=\"color: {colour}\">{esc(alert.run_name)}: {esc(alert.headline)}</h2>"
            f"<table cellpadding=\"4\">{rows}</table>{img}{pool_table}"
            f"<p style=\"color: #777\">Alert {esc(alert.key)}; each alert is sent once.</p></body></html>")


def chart_png(alert: Alert) -> bytes | None:
    """Cumulative spend and the forecast over time (hours since the first interval) as a PNG,
    or None when there is nothing to draw or drawing failed."""
    curve = list(alert.snapshot.curve)
    if not curve:
        if alert.forecast is None or alert.forecast.remaining_hours <= 0:
            return None  # nothing spent and nothing planned: no picture to draw
        curve = [(alert.at, alert.spent_usd)]
    try:
        return _draw(alert, curve)
    except Exception:  # a missing chart must not cost the alert
        logger.exception("budget alerts: could not draw the spend chart for %s", alert.key)
        return None


def _draw(alert: Alert, curve: list[tuple[float, float]]) -> bytes:
    # Imported here: matplotlib costs ~0.5 s to import and most runs never alert.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    t0 = curve[0][0]
    hours = [(t - t0) / 3600.0 for t, _ in curve]
    usd = [u for _, u in curve]
    now_h = max(hours[-1], (alert.at - t0) / 3600.0)
    if alert.at > curve[-1][0]:
        hours.append(now_h)
        usd.append(alert.spent_usd)
    fig = Figure(figsize=(6.0, 2.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(hours, usd, color="#1f77b4", linewidth=2, label="spent")
    fc = alert.forecast
    if fc is not None and fc.remaining_hours > 0:
        end_h = (fc.expected_end - t0) / 3600.0
        ax.plot([now_h, end_h], [alert.spent_usd, fc.total_usd], color="#1f77b4", linestyle="--",
                label="forecast")
    if fc is not None and fc.deadline_at is not None:
        ax.axvline((fc.deadline_at - t0) / 3600.0, color="#555555", linewidth=0.8, linestyle="-.",
                   label="deadline")
    if alert.budget_usd:
        ax.axhline(alert.budget_usd, color="#b00020", linewidth=1.2, label="budget")
        for t in alert.thresholds:
            if t < 1:
                ax.axhline(t * alert.budget_usd, color="#b00020", linewidth=0.6, linestyle=":")
    ax.set_xlabel("hours since start")
    ax.set_ylabel("USD")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _usd(value: float) -> str:
    return f"-${-value:,.2f}" if value < 0 else f"${value:,.2f}"


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
