"""The queue schedule as JSON, as tables, and as the plan `planner run` follows for each job."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from planner.capacity.queue import JobSchedule, QueueSchedule
from planner.tables import Column, fitted_table
from pricing.pool import HELD


def schedule_json(s: QueueSchedule) -> dict[str, Any]:
    h = s.spec.slot_hours
    jobs = []
    for j in s.jobs:
        finish = _finish(j, h)
        deadline = j.job.deadline_at_hours
        jobs.append({
            "name": j.job.name, "source": j.job.source, "unit": j.unit, "work": j.work,
            "submit_hours": j.job.submit_hours, "deadline_hours": deadline, "finish_hours": finish,
            "meets_deadline": deadline is None or (finish is not None and finish <= deadline + 1e-6),
            "cost_usd": j.cost_usd,
            "segments": [{"start_slot": g.start_slot, "end_slot": g.end_slot, "start_hours": g.start_slot * h,
                          "hours": g.hours, "nodes": g.option.nodes, "purchase": g.option.pool.purchase,
                          "pool": g.option.pool.to_dict(), "label": g.option.pool.label(g.option.nodes),
                          "units_per_hour": g.option.units_per_hour, "work": g.work, "cost_usd": g.cost_usd}
                         for g in j.segments],
        })
    slots = []
    for t, nodes in enumerate(s.nodes_per_slot()):
        by = {p: sum(n for (_, purchase), n in nodes.items() if purchase == p) for p in (HELD, "spot", "on_demand")}
        slots.append({"slot": t, "start_hours": t * h, "held_nodes": by[HELD], "spot_nodes": by["spot"],
                      "on_demand_nodes": by["on_demand"],
                      "pools": [{"pool": label, "purchase": p, "nodes": n} for (label, p), n in sorted(nodes.items())]})
    return {"name": s.spec.name, "status": "optimal", "slot_hours": h, "horizon_slots": s.spec.horizon_slots,
            "cost_usd": s.cost_usd, "jobs": jobs, "slots": slots,
            "reservations": [{"cloud": r.cloud, "region": r.region, "instance_type": r.instance_type,
                              "count": r.count, "from_slot": r.from_slot,
                              "until_slot": r.until_slot if r.until_slot is not None else s.spec.horizon_slots}
                             for r in s.spec.reservations]}


def _finish(j: JobSchedule, h: float) -> float | None:
    if not j.segments:
        return None
    last = j.segments[-1]
    full = last.end_slot - last.start_slot - 1
    return (last.end_slot - 1) * h + (last.hours - full * h)


def plan_for(j: JobSchedule) -> dict[str, Any]:
    """The job's schedule as a plan `planner run` follows (the shape of `planner quote --json`)."""
    phases = [{**g.option.pool.to_dict(), "nodes": g.option.nodes, "hours": g.hours, "start_slot": g.start_slot}
              for g in j.segments]
    return {"job": j.job.name, "status": "optimal",
            "plan": {"expected_cost_usd": j.cost_usd, "expected_hours": sum(g.hours for g in j.segments),
                     "phases": phases}}


def render(s: QueueSchedule, console: Console) -> None:
    data = schedule_json(s)
    width = console.width
    console.print(f"[bold]{s.spec.name}[/]: {len(s.jobs)} job(s), {s.spec.horizon_slots} slots of "
                  f"{s.spec.slot_hours:g} h; elastic spend ${s.cost_usd:,.2f} (held nodes cost $0 an hour)")
    rows = []
    for j in data["jobs"]:
        deadline = "-" if j["deadline_hours"] is None else f"{j['deadline_hours']:g} h"
        for k, g in enumerate(j["segments"]):
            rows.append([j["name"] if k == 0 else "", f"{g['start_slot']}-{g['end_slot'] - 1}", g["label"],
                         f"{g['hours']:.2f}", f"${g['cost_usd']:,.2f}",
                         f"{j['finish_hours']:.2f} h / {deadline}" if k == len(j["segments"]) - 1 else ""])
    console.print(fitted_table([Column("job"), Column("slots", "right"), Column("runs on"), Column("hours", "right"),
                                Column("cost", "right"), Column("done / deadline", "right")], rows, width=width,
                               title="Per-job schedule"))
    body = [[str(t["slot"]), f"{t['start_hours']:g}", str(t["held_nodes"]), str(t["spot_nodes"]),
             str(t["on_demand_nodes"]), ", ".join(f"{p['nodes']}x {p['pool']}" for p in t["pools"]) or "-"]
            for t in data["slots"]]
    console.print(fitted_table([Column("slot", "right"), Column("from h", "right"), Column("held", "right"),
                                Column("spot", "right"), Column("on-demand", "right"), Column("nodes", drop=1)],
                               body, width=width, title="Nodes to run per slot"))
