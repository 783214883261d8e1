"""How a :class:`~runtime.reports.run_view.RunView` is shown: terminal tables, a PNG and an HTML page.

The picture has two panels, one above the other, on the same time axis (hours since
the first billed interval)::

    ┌ spend ─────────────────────────────┐   drawn by runtime.accounting.alert_email.chart_png:
    │      ____/‾‾‾‾‾‾‾ - - - forecast   │   spent, forecast, budget, thresholds, deadline
    ├ pools ─────────────────────────────┤
    │ aws ... spot   ████X               │   one lane per pool and purchase option: a bar
    │ gcp ... spot        ███X           │   per launch with its cost, X = preempted,
    │ azure ... spot   ¦      ████████   │   dotted = re-plan, dash-dot = deadline
    └────────────────────────────────────┘

The HTML page is self-contained: the figures, the spend-by-pool and timeline tables,
and the PNG embedded as base64. Files are written atomically with mode 0644.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import os
import time
from dataclasses import replace
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from danlu import atomic_file
from planner.tables import Column, fitted_table
from runtime.accounting import alert_email
from runtime.accounting.alerts import Alert, AlertKind
from runtime.reports.run_view import RunView

__all__ = [
    "figures",
    "figures_table",
    "pools_table",
    "render_html",
    "render_png",
    "status_table",
    "timeline_table",
    "usd",
    "when",
    "write_html",
    "write_png",
]

QUIET_AFTER_S = 120.0  # a running run not heard of for this long may have lost its controller
BUDGET_SHOWN_FROM = 0.2  # the budget is drawn once spend or forecast reaches this share of it
DEADLINE_SHOWN_WITHIN = 3.0  # the deadline is drawn when at most this many times the run's span away

_PURCHASE_COLOURS = {"spot": "#4c9be8", "on_demand": "#f28e2b", "reserved_1y": "#59a14f", "reserved_3y": "#2f7d32"}
_DPI = 100


# -- figures shared by the terminal and the HTML page -----------------------------------


def figures(view: RunView, *, now: float | None = None) -> list[tuple[str, str]]:
    """The run's key figures as (label, value) rows; ``now`` (real POSIX seconds) dates "last heard"."""
    rows = [("Run", f"{view.name} ({view.run_dir})"), ("Status", _status_text(view, now))]
    if view.progress is not None:
        progress = f"{view.work_done:,.0f} / {view.work_total:,.0f} {view.unit} ({view.progress:.1%})"
    else:
        progress = f"? / {view.work_total:,.0f} {view.unit}"
    if view.training_step is not None and view.training_step > view.steps:
        progress += f"; the workers are at step {view.training_step}"
    rows.append(("Progress", progress))
    rows.append(("Steps", f"{view.steps:,} committed, {view.lost_steps:,} redone after preemptions"))
    spent = usd(view.spent_usd)
    if view.budget_usd:
        spent += f" ({view.spent_usd / view.budget_usd:.1%} of the {usd(view.budget_usd)} budget)"
    if view.running and view.burn_usd_per_hour:
        spent += f", burning {usd(view.burn_usd_per_hour)}/h"
    rows.append(("Spent", spent))
    rows.extend(_forecast_rows(view))
    if view.pool:
        rows.append(("Pool", view.pool))
    if view.cloud_tags:
        rows.append(("Cloud tags", ", ".join(f"{k}={v}" for k, v in view.cloud_tags.items())))
    recoveries = [_count(view.preemptions, "preemption"), _count(view.replans, "re-plan"),
                  _count(view.failures, "failure")]
    rows.append(("Recoveries", ", ".join(recoveries)))
    if (resume := _resume_text(view)) is not None:
        rows.append(("Continue", resume))
    if view.alerts_sent:
        rows.append(("Alerts sent", ", ".join(view.alerts_sent)))
    if view.alerts_queued:
        rows.append(("Alerts queued", f"{view.alerts_queued} not delivered yet"
                     + ("" if view.running else f"; deliver them with `planner alerts flush {view.run_dir}`")))
    rows.extend(("Warning", problem) for problem in view.problems)
    return rows


def _status_text(view: RunView, now: float | None) -> str:
    text = view.status + (f": {view.cause}" if view.cause else "")
    if not view.running:
        return text
    resume = f"`planner run --resume {view.run_dir}`"
    if view.controller_exited:
        return text + f" (the controller exited before the run ended; continue it with {resume})"
    if view.last_activity is not None:
        quiet = (time.time() if now is None else now) - view.last_activity
        text += f", last heard of {_ago(quiet)} ago"
        if quiet > QUIET_AFTER_S:
            text += f" (if its controller died, continue it with {resume})"
    return text


def _resume_text(view: RunView) -> str | None:
    """How a stopped run goes on from its last checkpoint (`planner run --resume`); None for the others."""
    resume = f"`planner run --resume {view.run_dir}`"
    start = f"from step {view.steps:,}, its last checkpoint" if view.steps else "from the start: nothing was checkpointed"
    where = f"{start}; re-planned from where it stands"
    if view.status == "cancelled":
        return f"{resume} ({where})"
    if view.status == "failed":
        return f"fix the cause, then {resume} ({where}, with [run].max_restarts retries anew)"
    if view.status == "budget_cap":
        return f"{resume[:-1]} --budget-usd USD` with a larger budget ({where})"
    if view.status == "infeasible":
        return (f"{resume[:-1]} --budget-usd USD` for a larger budget, or {resume[:-1]} --deadline-in HOURS` for a "
                f"later deadline ({where})")
    return None


def _forecast_rows(view: RunView) -> list[tuple[str, str]]:
    fc = view.forecast
    rows = []
    if view.running and fc is not None:
        share = f" ({fc.budget_fraction:.1%} of budget)" if fc.budget_fraction is not None else ""
        left = f"{usd(fc.remaining_usd)} for the {fc.remaining_hours:,.2f} h left at {usd(fc.plan_hourly_usd)}/h"
        rows.append(("Forecast", f"{usd(fc.total_usd)}{share}: {left}"))
        rows.append(("ETA", f"{when(fc.expected_end)} (in {(fc.expected_end - view.as_of) / 3600:,.2f} h)"))
        if view.deadline_at is not None:
            slack = fc.slack_hours or 0.0
            verdict = f"{slack:,.2f} h to spare" if slack >= 0 else f"expected {-slack:,.2f} h late"
            rows.append(("Deadline", f"{when(view.deadline_at)} ({verdict})"))
        return rows
    rows.append(("Ended", f"{when(view.as_of)} after {view.hours:,.2f} h"))
    if view.deadline_at is not None:
        rows.append(("Deadline", f"{when(view.deadline_at)} ({_deadline_verdict(view)})"))
    if view.status != "completed" and fc is not None and fc.remaining_hours > 0:
        more = f"{usd(fc.remaining_usd)} more for {fc.remaining_hours:,.2f} h on the last pool"
        rows.append(("To finish", f"{more}, {usd(fc.total_usd)} in total"))
    return rows


# -- terminal tables ----------------------------------------------------------------------


def figures_table(view: RunView, *, now: float | None = None) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for label, value in figures(view, now=now):
        table.add_row(label, escape(value))  # plain text: a cause's "[run].max_restarts" is not markup
    return table


def pools_table(view: RunView, *, width: int | None = None) -> Table:
    """Spend per pool and purchase option, as the ledger has it."""
    columns = [Column("pool"), Column("purchase"), Column("node-hours", "right"), Column("cost", "right")]
    rows = [[escape(p.pool), p.purchase, f"{p.node_hours:,.3f}", usd(p.usd)] for p in view.by_pool]
    rows.append(["total", "", f"{sum(p.node_hours for p in view.by_pool):,.3f}", usd(view.spent_usd)])
    return fitted_table(columns, rows, width=width, title="Spend by pool",
                        row_styles=[None] * len(view.by_pool) + ["bold"])


def timeline_table(view: RunView, *, width: int | None = None) -> Table:
    """Launches, preemptions and re-plans with their times and costs (event text wraps, names never break)."""
    columns = [Column("time (UTC)"), Column("+h", "right", drop=2), Column("event", wrap=True),
               Column("cost", "right"), Column("spent so far", "right", drop=1)]
    rows, styles = [], []
    for entry in view.timeline:
        styles.append({"preemption": "red", "failure": "red", "budget_cap": "red", "replan": "yellow"}.get(entry.kind))
        rows.append([_clock(entry.t, seconds=True), f"{(entry.t - view.started_at) / 3600:,.3f}", escape(entry.text),
                     usd(entry.cost_usd) if entry.cost_usd is not None else "", usd(entry.spent_usd)])
    return fitted_table(columns, rows, width=width, title="Timeline", row_styles=styles)


def _deadline_verdict(view: RunView) -> str:
    """How an ended run stands against its deadline: only a finished job can have met it."""
    late = (view.as_of - view.deadline_at) / 3600
    if view.status == "completed":
        return f"met with {-late:,.2f} h to spare" if late <= 0 else f"missed by {late:,.2f} h"
    if late <= 0:
        return f"not met: the run ended {view.status} {-late:,.2f} h before it"
    return f"not met: passed {late:,.2f} h before the run ended {view.status}"


def _slack_hours(view: RunView) -> float | None:
    """Deadline minus the (expected) end; None where there is no deadline or the job will not finish."""
    if view.deadline_at is None or not (view.running or view.status == "completed"):
        return None
    end = view.eta if view.running else view.as_of
    return None if end is None else (view.deadline_at - end) / 3600


def status_table(views: list[RunView], *, width: int | None = None, root: Path | None = None) -> Table:
    """One row per run, named by its path under ``root`` (a queue's job: ``queue/job``), else its
    directory's name; at narrow widths the counts, slack, ETA and forecast make way for the name."""
    columns = [Column("run"), Column("status"), Column("done", "right"), Column("spent", "right"),
               Column("forecast", "right", drop=3), Column("ETA", "right", drop=4), Column("slack", "right", drop=5),
               Column("preempt.", "right", drop=7), Column("replans", "right", drop=6)]
    rows = []
    for view in views:
        fc = view.forecast
        forecast = usd(fc.total_usd) if fc else "?"
        if fc and fc.budget_fraction is not None:
            forecast += f" ({fc.budget_fraction:.0%})"
        slack = _slack_hours(view)
        name = view.run_dir.name if root is None else str(view.run_dir.relative_to(root))
        rows.append([
            escape(name), view.status, f"{view.progress:.0%}" if view.progress is not None else "?",
            usd(view.spent_usd), forecast, f"in {(view.eta - view.as_of) / 3600:,.2f} h" if view.eta else "-",
            "-" if slack is None else f"[red]{slack:+,.2f} h[/]" if slack < 0 else f"{slack:+,.2f} h",
            str(view.preemptions), str(view.replans),
        ])
    return fitted_table(columns, rows, width=width, title="Runs")


# -- the picture --------------------------------------------------------------------------


def render_png(view: RunView) -> bytes | None:
    """Spend over time above the pool timeline, as PNG bytes; None when nothing was billed or planned."""
    chart = _chart_alert(view)
    spend = alert_email.chart_png(chart)
    if spend is None and not view.segments:
        return None
    # Imported here: matplotlib costs ~0.5 s and `planner status` never draws.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    top = imread(io.BytesIO(spend), format="png") if spend is not None else None
    width = top.shape[1] if top is not None else 600
    top_h = top.shape[0] if top is not None else 0
    left, right = _plot_box(top) if top is not None else (62, width - 10)
    lanes = _lanes(view)
    lane_h = 40 * max(len(lanes), 1) + 64
    height = top_h + lane_h
    fig = Figure(figsize=(width / _DPI, height / _DPI), dpi=_DPI)
    FigureCanvasAgg(fig)
    if top is not None:
        fig.figimage(top, xo=0, yo=lane_h)  # pasted pixel for pixel: the alert chart as it is mailed
    ax = fig.add_axes((left / width, 40 / height, (right - left) / width, (lane_h - 48) / height))
    _draw_timeline(ax, view, lanes, chart)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    return buf.getvalue()


def _chart_alert(view: RunView) -> Alert:
    """The view dressed as an alert, so the spend panel is the budget emails' own chart.

    A budget far above the spend, or a deadline far beyond the run, would squash the
    curve into a corner; they are left out of the picture then (the figures still say them).
    """
    fc = view.forecast
    top = max(view.spent_usd, fc.total_usd if fc else 0.0)
    budget = view.budget_usd if view.budget_usd and top >= BUDGET_SHOWN_FROM * view.budget_usd else None
    if fc is not None and fc.deadline_at is not None:
        t0 = _origin(view)
        span = max(view.as_of, fc.expected_end) - t0
        if fc.deadline_at - t0 > DEADLINE_SHOWN_WITHIN * span:
            fc = replace(fc, deadline_at=None)
    return Alert(key="report", kind=AlertKind.FORECAST, run_name=view.name, headline=view.status,
                 budget_usd=budget, snapshot=view.snapshot, forecast=fc, thresholds=view.thresholds)


def _plot_box(image) -> tuple[int, int]:
    """Left and right pixel columns of the spend chart's frame, so the timeline lines up under it."""
    dark = (image[..., :3].max(axis=2) < 0.25).mean(axis=0)  # share of near-black pixels per column
    columns = [i for i, share in enumerate(dark) if share > 0.4]
    if len(columns) < 2:
        return 62, image.shape[1] - 10
    return columns[0], columns[-1]


def _origin(view: RunView) -> float:
    # The spend chart counts hours from its first point: the first billed interval.
    return view.curve[0][0] if view.curve else view.as_of


def _lanes(view: RunView) -> list[tuple[str, str]]:
    lanes: list[tuple[str, str]] = []
    for seg in view.segments:
        if (seg.pool_id, seg.purchase) not in lanes:
            lanes.append((seg.pool_id, seg.purchase))
    return lanes


def _draw_timeline(ax, view: RunView, lanes: list[tuple[str, str]], chart: Alert) -> None:
    t0 = _origin(view)

    def hours(t: float) -> float:
        return (t - t0) / 3600.0

    fc = view.forecast
    ahead = view.running and fc is not None and fc.remaining_hours > 0 and bool(view.segments)
    deadline = chart.forecast.deadline_at if chart.forecast is not None else None  # as in the spend panel
    right = max([hours(view.as_of), *([hours(fc.expected_end)] if ahead else []),
                 *([hours(deadline)] if deadline is not None else []), 1e-6]) * 1.05  # the panel's 5% margin
    row = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}  # first pool on top
    for seg in view.segments:
        y = row[(seg.pool_id, seg.purchase)]
        start, end = hours(seg.start), hours(seg.end if seg.end is not None else view.as_of)
        ax.broken_barh([(start, end - start)], (y - 0.22, 0.44), facecolors=_PURCHASE_COLOURS.get(seg.purchase, "#888"))
        label = f"{seg.launch_id} {usd(seg.cost_usd)}"
        if end < 0.8 * right:
            ax.annotate(label, (end, y), xytext=(7, 0), textcoords="offset points", fontsize=7, va="center")
        else:  # no room after the bar: inside its end
            ax.annotate(label, (end, y), xytext=(-7, 0), textcoords="offset points", fontsize=7, va="center",
                        ha="right", color="white", fontweight="bold")
        if seg.outcome == "preempted":
            ax.plot([end], [y], marker="X", color="#b00020", markersize=8, linestyle="none")
        elif seg.outcome in ("failed", "interrupted"):
            ax.plot([end], [y], marker="x", color="#000000", markersize=7, linestyle="none")
    if ahead:
        last = view.segments[-1]
        ax.broken_barh([(hours(view.as_of), fc.remaining_hours)], (row[(last.pool_id, last.purchase)] - 0.22, 0.44),
                       facecolors="none", edgecolors=_PURCHASE_COLOURS.get(last.purchase, "#888"), linestyles="--")
    for entry in view.timeline:
        if entry.kind == "replan":
            ax.axvline(hours(entry.t), color="#777777", linewidth=0.8, linestyle=":")
    if deadline is not None:
        ax.axvline(hours(deadline), color="#555555", linewidth=0.8, linestyle="-.")
    for (pool, purchase), y in row.items():
        ax.text(0, y + 0.27, f" {pool} {purchase}", fontsize=7, va="bottom", ha="left", color="#333333")
    ax.set_yticks([])
    ax.set_ylim(-0.7, max(len(lanes), 1) - 0.2)
    ax.set_xlim(0, right)
    ax.set_xlabel("hours since start   (X preempted, dotted: re-plan, dash-dot: deadline, dashed: work left)",
                  fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(axis="x", alpha=0.3)


# -- the HTML page ------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 980px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; } td.time, th { white-space: nowrap; }
table.figures th { width: 9em; } tr.preemption, tr.failure, tr.budget_cap { color: #b00020; }
tr.replan { color: #8a6d00; } img { max-width: 100%; border: 1px solid #eee; }
.meta { color: #777; font-size: 0.9em; }
"""


def render_html(view: RunView, png: bytes | None, *, now: float | None = None) -> str:
    """The self-contained report page (figures, picture, spend by pool, timeline)."""
    esc = html.escape
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in figures(view, now=now))
    img = (f'<p><img alt="Spend over time and the pool timeline" src="data:image/png;base64,'
           f'{base64.b64encode(png).decode("ascii")}"></p>' if png else "<p>Nothing billed yet: no chart.</p>")
    pools = "".join(
        f"<tr><td>{esc(p.pool)}</td><td>{esc(p.purchase)}</td><td class=num>{p.node_hours:,.3f}</td>"
        f"<td class=num>{esc(usd(p.usd))}</td></tr>" for p in view.by_pool)
    pools += (f"<tr><th>total</th><th></th><th class=num>{sum(p.node_hours for p in view.by_pool):,.3f}</th>"
              f"<th class=num>{esc(usd(view.spent_usd))}</th></tr>")
    timeline = "".join(
        f"<tr class=\"{esc(e.kind)}\"><td class=time>{esc(when(e.t))}</td>"
        f"<td class=num>{(e.t - view.started_at) / 3600:,.3f}</td>"
        f"<td>{esc(e.text)}</td><td class=num>{esc(usd(e.cost_usd)) if e.cost_usd is not None else ''}</td>"
        f"<td class=num>{esc(usd(e.spent_usd))}</td></tr>" for e in view.timeline)
    generated = when(time.time() if now is None else now)
    return (
        f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(view.name)}: {esc(view.status)} (danlu run report)</title><style>{_CSS}</style></head><body>"
        f"<h1>{esc(view.name)}: {esc(view.status)}</h1>"
        f"<p class=meta>Run directory {esc(str(view.run_dir))}; report generated {esc(generated)}. "
        f"Times are the run's simulated clock (time scale {view.time_scale:g}).</p>"
        f"<table class=figures>{rows}</table>{img}"
        f"<h2>Spend by pool</h2><table><tr><th>Pool</th><th>Purchase</th><th class=num>Node-hours</th>"
        f"<th class=num>Cost</th></tr>{pools}</table>"
        f"<h2>Timeline</h2><table><tr><th>Time</th><th class=num>+h</th><th>Event</th><th class=num>Cost</th>"
        f"<th class=num>Spent so far</th></tr>{timeline}</table>"
        f"<p class=meta>Spend is read from ledger.sqlite (billed to the last heartbeat); events from events.jsonl."
        f"</p></body></html>\n"
    )


def write_png(view: RunView, path: str | os.PathLike[str]) -> bytes | None:
    """Write the picture to ``path`` (atomically, 0644); returns it, or None (nothing written) when empty."""
    png = render_png(view)
    if png is not None:
        atomic_file.write_bytes(path, png, mode=0o644)
    return png


def write_html(view: RunView, path: str | os.PathLike[str], png: bytes | None = None) -> None:
    """Write the report page to ``path`` (atomically, 0644), drawing the picture unless given."""
    atomic_file.write_text(path, render_html(view, png if png is not None else render_png(view)), mode=0o644)


# -- formatting ----------------------------------------------------------------------------


def usd(value: float) -> str:
    """Dollars with cents; under a dollar with four decimals (a short test run costs fractions of a cent)."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    return f"{sign}${value:,.2f}" if value >= 1 else f"{sign}${value:,.4f}"


def when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _clock(ts: float, *, seconds: bool = False) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%m-%d %H:%M:%S" if seconds else "%m-%d %H:%M")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _ago(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
