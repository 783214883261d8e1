"""How a quote is shown: the SPEC's JSON object, terminal tables, and the frontier plot.

rich is imported by the functions that draw tables: ``planner quote --json`` and the dashboard's
JSON never load it (about 40 ms of a quote's start).
"""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from danlu import atomic_file
from planner.cluster import notes as cluster_notes
from planner.quote import PlanView, Quote
from pricing.pool import CLUSTER

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from planner.relax import Infeasibility


def price_age(quote: Quote) -> dict[str, Any]:
    """Age of the prices the plan rests on (the oldest row it uses), else of the catalog."""
    used = [p.config.as_of for p in quote.plan.solution.phases if p.config.as_of] if quote.plan else []
    as_of = min(used) if used else quote.catalog.newest
    return {
        "origin": quote.catalog.origin,
        "as_of": as_of.isoformat() if as_of else None,
        "age_days": (quote.today - as_of).days if as_of else None,
    }


def plan_json(view: PlanView, speed_sources: dict[str, str] | None = None) -> dict[str, Any]:
    """The SPEC's plan object; each phase is its pool's :meth:`Pool.to_dict` with ``nodes``,
    ``hours`` and the phase's figures, so :meth:`Pool.from_dict` reads a phase back."""
    phases = []
    for p in view.solution.phases:
        c = p.config
        phase = {
            **c.pool.to_dict(),
            "nodes": c.nodes,
            "hourly_usd": round(c.hourly_usd, 6),
            "hours": round(p.hours, 4),
            "cost_usd": round(p.cost, 2),
            "switch_hours": round(p.switch_hours, 4),
        }
        if speed_sources is not None:
            source = speed_sources.get(c.pool.gpu.lower())
            phase["throughput_source"] = source
            phase["throughput_estimated"] = bool(source and source.startswith("estimate"))
        if c.fixed_usd:
            phase["term_cost_usd"] = round(c.fixed_usd, 2)
        if p.wait_hours and c.purchase == CLUSTER:
            phase["queue_wait_hours"] = round(p.wait_hours, 4)
        if p.egress_usd or p.load_hours or p.stage_hours:
            phase["transfer"] = {
                "data_egress_usd": round(p.data_usd, 2), "checkpoint_egress_usd": round(p.checkpoint_usd, 2),
                "data_staging_hours": round(p.stage_hours, 4), "checkpoint_load_hours": round(p.load_hours, 4),
            }
        if c.overhead is not None:
            phase["risk"] = {
                "interruptions_per_hour": round(1.0 / c.overhead.mtbf_hours, 6),
                "expected_interruptions": round(p.work_hours / c.overhead.mtbf_hours, 3),
                "rate_source": c.risk.source if c.risk else None,
                "rate_is_default": bool(c.risk and c.risk.default),
                "checkpoint_mode": c.overhead.mode,
                "checkpoint_interval_minutes": (
                    round(c.overhead.interval_hours * 60, 2) if c.overhead.interval_hours != float("inf") else None
                ),
            }
        if c.capacity is not None:
            phase["capacity_wait"] = {
                "expected_hours": round(p.wait_hours, 4), "p90_hours": round(p.wait_p90_hours, 4),
                "at_launch_hours": round(c.launch_wait_hours, 4), "source": c.capacity.source,
                "is_default": c.capacity.default,
            }
        phases.append(phase)
    out = {
        "expected_cost_usd": round(view.expected_cost_usd, 2),
        "expected_hours": round(view.expected_hours, 4),
        "p90_cost_usd": round(view.p90_cost_usd, 2),
        "p90_hours": round(view.p90_hours, 4),
        "kg_co2e": round(view.solution.kg_co2e, 2),
        "cost_lines": [{"label": line.label, "usd": round(line.usd, 2)} for line in view.lines],
        "phases": phases,
    }
    if view.note:
        out["note"] = view.note
    return out


def infeasible_json(inf: Infeasibility | None) -> dict[str, Any] | None:
    if inf is None:
        return None
    return {
        "binding": inf.binding,
        "relaxations": [{"key": r.key, "value": r.value, "message": r.message} for r in inf.relaxations],
        "reasons": inf.reasons,
    }


def quote_json(quote: Quote) -> dict[str, Any]:
    cands = quote.candidates
    return {
        "job": quote.job.name,
        "status": quote.status,
        "objective": quote.objective,
        "plan": plan_json(quote.plan, quote.work.speed_sources) if quote.plan else None,
        "alternatives": [plan_json(a, quote.work.speed_sources) for a in quote.alternatives],
        "frontier": [{"p90_hours": round(h, 4), "expected_cost_usd": round(c, 2),
                      **({"optimality_gap": round(quote.frontier_gaps[h], 6)} if h in quote.frontier_gaps else {})}
                     for h, c in quote.frontier],
        "infeasible": infeasible_json(quote.infeasible),
        "tolerance": quote.tolerance,
        "exact_optimum": plan_json(quote.exact, quote.work.speed_sources) if quote.exact else None,
        "work": {"unit": quote.work.unit, "amount": quote.work.work},
        "prices": price_age(quote),
        "candidates": {
            "considered": cands.considered if cands else 0,
            "pruned": cands.pruned if cands else 0,
            "in_model": len(cands.configs) if cands else 0,
        },
        "solve_seconds": round(quote.solve_seconds, 4),
        "warnings": cands.warnings if cands else [],
        "transfers": transfers_json(quote),
        "cluster": cluster_notes(quote),
    }


def transfers_json(quote: Quote) -> dict[str, Any] | None:
    """Where the data and the checkpoint are, and the dated egress tables that priced moving them."""
    t = quote.candidates.transfers if quote.candidates else None
    if t is None or not t.active:
        return None
    return {
        "data_location": str(t.data_site) if t.data_site else None,
        "data_gb_read": t.data_gb,
        "data_read": "every_epoch" if t.streamed else "once",
        "checkpoint_location": str(t.checkpoint_site) if t.checkpoint_site else None,
        "checkpoint_gb": t.checkpoint_gb,
        "transfer_gbps": t.gbps,
        "egress_tables": t.sources(),
    }


def _money(x: float) -> str:
    return f"${x:,.2f}"


def _phase_table(view: PlanView, title: str, width: int | None) -> Table:
    from rich.markup import escape

    from planner.tables import Column, fitted_table

    # The pool's name (instance and where) is the key: at 80 columns the GPU count wraps under
    # the instance and the hourly price goes, never a character of the name.
    one_phase = len(view.solution.phases) == 1
    columns = [Column("#", drop=1 if one_phase else 0), Column("instance", wrap=True), Column("where"),
               Column("nodes", "right"),
               Column("purchase"), Column("$/node-h", "right", drop=1), Column("hours", "right"),
               Column("cost", "right")]
    rows = []
    for i, p in enumerate(view.solution.phases, 1):
        c, pool = p.config, p.config.pool
        rows.append([str(i), escape(f"{pool.instance_type} ({pool.gpus_per_node}x {pool.gpu})"),
                     escape(f"{pool.cloud}:{pool.location}"), str(c.nodes), c.purchase, f"{c.hourly_usd:.3f}",
                     f"{p.hours:.2f}", _money(p.cost)])
    return fitted_table(columns, rows, width=width, title=title, show_edge=False)


def estimated_speeds(quote: Quote, view: PlanView) -> dict[str, str]:
    """GPU -> source, for each GPU of the plan whose throughput is an estimate rather than a measurement."""
    out = {}
    for p in view.solution.phases:
        source = quote.work.speed_sources.get(p.config.pool.gpu.lower(), "")
        if source.startswith("estimate"):
            out[p.config.pool.gpu] = source
    return out


def _risk_lines(view: PlanView) -> list[str]:
    out = []
    for i, p in enumerate(view.solution.phases, 1):
        ov = p.config.overhead
        if ov is None:
            continue
        interval = "" if ov.interval_hours == float("inf") else f", checkpoint every {ov.interval_hours * 60:.0f} min"
        risk = p.config.risk
        source = ""
        if risk is not None:
            source = f"; {risk.rate:.3f} interruptions/node-h, {risk.source}"
        out.append(
            f"phase {i}: MTBF {ov.mtbf_hours:.1f} h, {p.work_hours / ov.mtbf_hours:.1f} interruptions expected, "
            f"{ov.mode}{interval}, restart {ov.restart_hours * 60:.0f} min{source}"
        )
    return out


def _cost_table(quote: Quote, view: PlanView) -> Table:
    from rich.table import Table
    from rich.text import Text

    t = Table(show_header=False, box=None, padding=(0, 2))
    t.add_column(justify="left")
    t.add_column(justify="right")
    for line in view.lines:
        t.add_row(line.label, _money(line.usd))
    t.add_row(Text("expected total", style="bold"), Text(_money(view.expected_cost_usd), style="bold"))
    t.add_row("P90 cost", _money(view.p90_cost_usd))
    dl = quote.job.constraints.deadline_hours
    budget = quote.job.constraints.budget_usd
    t.add_row("expected time", f"{view.expected_hours:.2f} h")
    t.add_row("P90 time", f"{view.p90_hours:.2f} h" + (f" (deadline {dl:g} h)" if dl else ""))
    if budget:
        t.add_row("budget", f"{_money(budget)} ({view.expected_cost_usd / budget:.0%} used)")
    t.add_row("carbon (GPU power x grid)", f"{view.solution.kg_co2e:,.1f} kg CO2e")
    return t


def why_best(quote: Quote) -> str | None:
    best, alt = quote.plan, quote.runner_up
    if best is None or alt is None:
        return None
    main = alt.solution.main_config
    d_cost = alt.expected_cost_usd - best.expected_cost_usd
    d_time = alt.p90_hours - best.p90_hours
    parts = [f"runner-up ({main.pool.label(main.nodes)}) costs {_money(abs(d_cost))} {'more' if d_cost >= 0 else 'less'}"]
    if best.expected_cost_usd > 0:
        parts[0] += f" ({d_cost / best.expected_cost_usd:+.0%})"
    parts.append(f"and finishes {abs(d_time):.1f} h {'later' if d_time >= 0 else 'sooner'} at P90")
    if quote.objective == "cost" and d_cost < 0:
        parts.append("but breaks a constraint the chosen plan meets")
    return " ".join(parts) + "."


def render_quote(quote: Quote, console: Console, top: int) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    job = quote.job
    age = price_age(quote)
    head = Text.assemble(
        (f"{job.name}", "bold"), f"  objective: {quote.objective}  status: ",
        (quote.status, "green" if quote.plan else "red"),
        f"\nwork: {quote.work.work:,.4g} {quote.work.unit}; prices: {age['origin']}"
        + (f", as of {age['as_of']} ({age['age_days']} days old)" if age["as_of"] else ""),
    )
    console.print(head)
    cands = quote.candidates
    for w in cands.warnings if cands else []:
        console.print(f"[yellow]warning:[/] {w}")
    if quote.plan is None:
        _render_infeasible(quote.infeasible, console)
        for note in cluster_notes(quote):
            console.print(f"[dim]cluster {escape(note['pool'])}:[/] {escape(note['reason'])}")
        return
    console.print(_phase_table(quote.plan, "Plan", console.width))
    for gpu, source in estimated_speeds(quote, quote.plan).items():
        source = escape(source.removeprefix("estimate: "))
        console.print(f"[yellow]warning:[/] the plan rests on an estimated {escape(gpu)} throughput ({source}); "
                      "measure it and give it in \\[workload.throughput] before you rely on the time")
    console.print(_cost_table(quote, quote.plan))
    for line in _risk_lines(quote.plan):
        console.print(f"[dim]risk:[/] {line}")
    for i, p in enumerate(quote.plan.solution.phases, 1):
        cw = p.config.capacity
        if cw is not None:
            console.print(f"[dim]capacity:[/] phase {i}: {p.wait_hours:.2f} h expected waiting for spot capacity "
                          f"(P90 {p.wait_p90_hours:.2f} h; at launch and after each loss, unbilled, in the times "
                          f"above); outages: {escape(cw.source)}")
    transfers = quote.candidates.transfers if quote.candidates else None
    if transfers is not None and transfers.active:
        for line in transfers.sources():
            console.print(f"[dim]egress:[/] {escape(line)}")
    if quote.exact is not None:
        console.print(f"[dim]simpler:[/] {escape(quote.exact.note)}: {_money(quote.exact.expected_cost_usd)}, "
                      f"{len(quote.exact.solution.phases)} phase(s), {quote.exact.p90_hours:.2f} h at P90")
    reason = why_best(quote)
    if reason:
        console.print(f"[dim]why:[/] {escape(reason)}")
    for note in cluster_notes(quote):
        console.print(f"[dim]cluster {escape(note['pool'])}:[/] {escape(note['reason'])}")
    if quote.alternatives:
        console.print(_alternatives_table(quote, top, console.width))
    if len(quote.frontier) > 1:
        console.print("Cost vs time frontier: the cheapest plan for each P90 deadline")
        t = Table(title=None)
        t.add_column("P90 hours", justify="right")
        t.add_column("expected cost", justify="right")
        for hours, cost in quote.frontier:
            t.add_row(f"{hours:.2f}", _money(cost))
        console.print(t)
    if cands:
        console.print(
            f"[dim]{cands.considered} configurations, {cands.pruned} dominated pruned, "
            f"{len(cands.configs)} in the MILP; solved in {quote.solve_seconds * 1000:.0f} ms[/]"
        )


def _alternatives_table(quote: Quote, top: int, width: int | None) -> Table:
    from rich.markup import escape

    from planner.tables import Column, fitted_table

    # Carbon is the figure a carbon quote is choosing by, so it stays; otherwise it goes first.
    carbon = quote.objective == "carbon"
    columns = [Column("#"), Column("main pool", wrap=True), Column("phases", "right", drop=1),
               Column("expected cost", "right"), Column("P90 cost", "right", drop=2), Column("P90 hours", "right"),
               Column("kg CO2e", "right", drop=0 if carbon else 3)]
    rows = []
    for i, alt in enumerate(quote.alternatives[:top], 1):
        main = alt.solution.main_config
        rows.append([str(i), escape(main.pool.label(main.nodes)), str(len(alt.solution.phases)),
                     _money(alt.expected_cost_usd), _money(alt.p90_cost_usd), f"{alt.p90_hours:.2f}",
                     f"{alt.solution.kg_co2e:,.1f}"])
    return fitted_table(columns, rows, width=width, title=f"Top {min(top, len(quote.alternatives))} alternatives",
                        show_edge=False)


def _render_infeasible(inf: Infeasibility | None, console: Console) -> None:
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    if inf is None:
        return
    body = [Text("No plan satisfies the job's constraints.", style="bold red")]
    if inf.binding:
        body.append(Text("binding: " + ", ".join(inf.binding)))
    for r in inf.relaxations:
        body.append(Text(f"  - {r.message}"))
    for reason in inf.reasons:
        body.append(Text(f"  - {reason}"))
    console.print(Panel(Group(*body), title="infeasible", border_style="red", expand=False))


def plot_frontier(quote: Quote, path: str | Path) -> None:
    """Write the cost-vs-time frontier with the chosen plan and alternatives as a PNG (atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    if quote.frontier:
        hs, cs = zip(*quote.frontier)
        ax.plot(hs, cs, "-o", color="#4c72b0", label="frontier (cheapest per P90 deadline)")
    for alt in quote.alternatives:
        ax.plot(alt.p90_hours, alt.expected_cost_usd, "s", color="#999999")
    if quote.alternatives:
        ax.plot([], [], "s", color="#999999", label="alternatives")
    if quote.plan:
        ax.plot(quote.plan.p90_hours, quote.plan.expected_cost_usd, "*", ms=16, color="#dd8452", label="chosen plan")
    hours = [h for h, _ in quote.frontier] + [a.p90_hours for a in quote.alternatives]
    costs = [c for _, c in quote.frontier] + [a.expected_cost_usd for a in quote.alternatives]
    if quote.plan:
        hours.append(quote.plan.p90_hours)
        costs.append(quote.plan.expected_cost_usd)
    # A deadline or budget far beyond the plans would squash them into a corner: name it instead.
    dl = quote.job.constraints.deadline_hours
    if dl:
        near = not hours or dl <= 3 * max(hours)
        ax.axvline(dl, ls="--", color="#c44e52", label=f"deadline {dl:g} h") if near else ax.plot(
            [], [], ls="--", color="#c44e52", label=f"deadline {dl:g} h (off the chart)")
    budget = quote.job.constraints.budget_usd
    if budget:
        near = not costs or budget <= 3 * max(costs)
        ax.axhline(budget, ls=":", color="#c44e52", label=f"budget ${budget:,.0f}") if near else ax.plot(
            [], [], ls=":", color="#c44e52", label=f"budget ${budget:,.0f} (off the chart)")
    if costs and min(costs) > 0 and max(costs) / min(costs) > 10:
        ax.set_yscale("log")
    if hours and min(hours) > 0 and max(hours) / min(hours) > 10:
        ax.set_xscale("log")
    ax.set_xlabel("P90 hours to finish")
    ax.set_ylabel("expected cost (USD)")
    ax.set_title(f"{quote.job.name}: cost vs time ({dt.date.today().isoformat()})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    atomic_file.write_bytes(path, buffer.getvalue())
