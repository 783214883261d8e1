"""The capacity report: the plan against its baselines, per-reservation utilization, sensitivity
to demand 20% lower and higher, a plan robust to both, the JSON and the chart.

* **All on-demand**: every GPU-hour at the class's cheapest on-demand price.
* **Best single option**: the cheapest of the strategies that buy one way only -- all on-demand;
  all spot (only when every class is 100% preemptible); all one reserved term (the model with
  only that term and no elastic capacity, so reservations must cover every period).
* **Utilization** of a reservation: a class's reserved hours are pooled, so each period's used
  share (used / capacity) is credited to every reservation active in it, weighted by its capacity.
  **Break-even utilization**: its price per GPU-hour over the class's on-demand price per GPU-hour
  -- above it, the term costs less than on-demand for the hours it serves.
* **Robust plan**: per class, the reservations that minimise the worst regret over demand x0.8,
  x1.0 and x1.2 (regret: cost in that scenario minus that scenario's optimum; Savage's min-max
  regret); the elastic capacity adapts to each scenario.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rich.console import Console

from planner.capacity.demand import Demand
from planner.capacity.errors import NoOfferError
from planner.capacity.model import (
    CapacityPlan,
    Reservation,
    class_costs,
    evaluate,
    solve,
)
from planner.capacity.offers import ClassOffers
from planner.tables import Column, fitted_table

SCENARIOS = (0.8, 1.0, 1.2)
TERM_OPTIONS = ("reserved_1y", "reserved_3y")


@dataclass(slots=True)
class CapacityReport:
    demand: Demand
    offers: Mapping[str, ClassOffers]
    plan: CapacityPlan
    single_option: dict[str, float | None]
    sensitivity: dict[str, dict[str, float]]
    robust: CapacityPlan | None
    notes: list[str] = field(default_factory=list)

    @property
    def all_on_demand_usd(self) -> float | None:
        return self.single_option.get("on_demand")

    @property
    def best_single_option(self) -> tuple[str, float] | None:
        found = [(k, v) for k, v in self.single_option.items() if v is not None]
        return min(found, key=lambda kv: kv[1]) if found else None


def make_report(demand: Demand, offers: Mapping[str, ClassOffers], rule: str, allow: tuple[str, ...], *,
                robust: bool = True) -> CapacityReport:
    plan = solve(demand, offers, rule)
    single = single_option_costs(demand, offers, rule, allow)
    sensitivity: dict[str, dict[str, float]] = {}
    optima = {1.0: plan}
    for factor in (0.8, 1.2):
        scaled = demand.scaled(factor)
        optimum = solve(scaled, offers, rule, start=plan.reservations)
        optima[factor] = optimum
        held = evaluate(scaled, offers, plan.reservations, rule)
        sensitivity[_scenario_key(factor)] = {"optimal_tco_usd": optimum.tco_usd, "this_plan_tco_usd": held.tco_usd}
    robust_plan = None
    if robust:
        per_class = {f: class_costs(demand.scaled(f), offers, optima[f]) for f in SCENARIOS}
        best = {c.name: [per_class[f][c.name] for f in SCENARIOS] for c in demand.classes}
        robust_plan = solve(demand, offers, rule, scenarios=SCENARIOS, best=best,
                            start=least_regret_start(demand, offers, rule, optima, best))
        for factor in SCENARIOS:
            cost = evaluate(demand.scaled(factor), offers, robust_plan.reservations, rule).tco_usd
            sensitivity.setdefault(_scenario_key(factor), {})["robust_tco_usd"] = cost
        sensitivity[_scenario_key(1.0)]["optimal_tco_usd"] = plan.tco_usd
        sensitivity[_scenario_key(1.0)]["this_plan_tco_usd"] = plan.tco_usd
    return CapacityReport(demand, offers, plan, single, sensitivity, robust_plan, list(demand.notes))


def least_regret_start(demand: Demand, offers: Mapping[str, ClassOffers], rule: str,
                       optima: Mapping[float, CapacityPlan], best: Mapping[str, list[float]]) -> list[Reservation]:
    """Per class, the scenario optimum whose reservations have the least worst regret: the robust
    solve's first incumbent (a good one lets HiGHS prune from the start)."""
    worst: dict[float, dict[str, float]] = {}
    for source, candidate in optima.items():
        costs = [class_costs(demand.scaled(f), offers, evaluate(demand.scaled(f), offers, candidate.reservations, rule))
                 for f in SCENARIOS]
        worst[source] = {c.name: max(costs[k][c.name] - best[c.name][k] for k in range(len(SCENARIOS)))
                         for c in demand.classes}
    out: list[Reservation] = []
    for c in demand.classes:
        pick = min(optima, key=lambda f: worst[f][c.name])
        out.extend(r for r in optima[pick].reservations if r.demand_class == c.name)
    return out


def _scenario_key(factor: float) -> str:
    return "demand" if factor == 1.0 else f"demand_{round((factor - 1) * 100):+d}%"


def single_option_costs(demand: Demand, offers: Mapping[str, ClassOffers], rule: str,
                        allow: tuple[str, ...]) -> dict[str, float | None]:
    """The cost of buying only one way, per purchase option (None where that option cannot serve it all)."""
    out: dict[str, float | None] = {}
    if "on_demand" in allow:
        total = 0.0
        for c in demand.classes:
            od = offers[c.name].on_demand
            if od is None and any(c.gpu_hours):
                total = math.nan
                break
            total += sum(c.gpu_hours) * (od.usd_per_gpu_hour if od else 0.0)
        out["on_demand"] = None if math.isnan(total) else total
    if "spot" in allow:
        ok = all(c.preemptible_share >= 1 and offers[c.name].spot is not None for c in demand.classes
                 if any(c.gpu_hours))
        out["spot"] = sum(sum(c.gpu_hours) * offers[c.name].spot.usd_per_gpu_hour for c in demand.classes
                          if any(c.gpu_hours)) if ok else None
    for term in TERM_OPTIONS:
        if term not in allow:
            continue
        only = {name: ClassOffers(None, None, tuple(r for r in o.reserved if r.term == term))
                for name, o in offers.items()}
        try:
            out[term] = solve(demand, only, rule).tco_usd
        except NoOfferError:
            out[term] = None
    return out


def reservation_rows(report: CapacityReport) -> list[dict[str, Any]]:
    plan, P = report.plan, report.demand.period_hours
    rows = []
    for r in sorted(plan.reservations, key=lambda r: (r.demand_class, r.start_period, r.option.term)):
        served = plan.served[r.demand_class]
        window = slice(r.start_period, r.start_period + r.periods_in_horizon)
        mine = r.count * r.option.gpus_per_node * P
        cap = served.reserved_capacity[window]
        share = np.divide(served.reserved_used[window], cap, out=np.zeros_like(cap), where=cap > 0)
        od = report.offers[r.demand_class].on_demand
        rows.append({
            "class": r.demand_class, "cloud": r.option.cloud, "region": r.option.region,
            "instance_type": r.option.instance_type, "gpu": r.option.gpu, "gpus_per_node": r.option.gpus_per_node,
            "term": r.option.term, "start_period": r.start_period, "count": r.count,
            "periods_in_horizon": r.periods_in_horizon, "hourly_usd": r.option.hourly_usd,
            "charged_usd": r.charged_usd * r.count, "utilization": float(share.mean()) if mine else 0.0,
            "break_even_utilization": (r.option.usd_per_gpu_hour / od.usd_per_gpu_hour) if od else None,
        })
    return rows


def period_rows(plan: CapacityPlan) -> list[dict[str, Any]]:
    """Per period, all classes together; ``cost_usd`` holds the elastic cost plus each active term's
    charge spread evenly over the whole periods it covers (a ``whole`` term's part past the horizon
    is ``past_horizon_usd``, outside every period)."""
    T = plan.demand.horizon
    amortized = np.zeros(T)
    for r in plan.reservations:
        per_period = r.option.term_usd / r.option.term_periods(plan.demand.period_hours) * r.count
        amortized[r.start_period:r.start_period + r.periods_in_horizon] += per_period
    served = list(plan.served.values())

    def total(attr: str) -> np.ndarray:
        return np.sum([getattr(s, attr) for s in served], axis=0) if served else np.zeros(T)

    demand, cap, used = total("demand"), total("reserved_capacity"), total("reserved_used")
    spot, od, elastic = total("spot"), total("on_demand"), total("elastic_usd")
    return [{"start": t, "demand_gpu_hours": float(demand[t]), "reserved_gpu_hours": float(used[t]),
             "reserved_capacity_gpu_hours": float(cap[t]), "spot_gpu_hours": float(spot[t]),
             "on_demand_gpu_hours": float(od[t]), "cost_usd": float(elastic[t] + amortized[t])} for t in range(T)]


def past_horizon_usd(plan: CapacityPlan) -> float:
    P = plan.demand.period_hours
    return sum(r.charged_usd * r.count - r.option.term_usd * r.periods_in_horizon / r.option.term_periods(P) * r.count
               for r in plan.reservations)


def report_json(report: CapacityReport) -> dict[str, Any]:
    plan, best = report.plan, report.best_single_option
    od = report.all_on_demand_usd
    return {
        "name": report.demand.name, "status": "optimal", "period": report.demand.period,
        "period_hours": report.demand.period_hours, "horizon_periods": report.demand.horizon,
        "term_past_horizon": plan.rule, "tco_usd": plan.tco_usd,
        "reservation_usd": plan.reservation_usd, "elastic_usd": plan.elastic_usd,
        "past_horizon_usd": past_horizon_usd(plan),
        "baselines": {"all_on_demand_usd": od, "best_single_option_usd": best[1] if best else None,
                      "best_single_option": best[0] if best else None, "single_option": report.single_option},
        "savings_vs_on_demand": (1 - plan.tco_usd / od) if od else None,
        "classes": [_class_json(c.name, c.gpu, c.preemptible_share, report.offers[c.name])
                    for c in report.demand.classes],
        "reservations": reservation_rows(report),
        "periods": period_rows(plan),
        "sensitivity": report.sensitivity,
        "robust": None if report.robust is None else {
            "criterion": "min-max regret over demand x0.8, x1.0, x1.2, per GPU class",
            "reservations": [_reservation_json(r) for r in report.robust.reservations]},
        "notes": report.notes,
    }


def _class_json(name: str, gpu: str, share: float, offer: ClassOffers) -> dict[str, Any]:
    def pool(p: Any) -> dict[str, Any] | None:
        return None if p is None else {"cloud": p.cloud, "region": p.region, "zone": p.zone,
                                       "instance_type": p.instance_type, "usd_per_gpu_hour": p.usd_per_gpu_hour}
    return {"name": name, "gpu": gpu, "preemptible_share": share, "on_demand": pool(offer.on_demand),
            "spot": pool(offer.spot), "reservation_options": len(offer.reserved)}


def _reservation_json(r: Reservation) -> dict[str, Any]:
    return {"class": r.demand_class, "cloud": r.option.cloud, "region": r.option.region,
            "instance_type": r.option.instance_type, "gpu": r.option.gpu, "term": r.option.term,
            "start_period": r.start_period, "count": r.count}


def render(report: CapacityReport, console: Console) -> None:
    data = report_json(report)
    plan, width = report.plan, console.width
    base = data["baselines"]
    console.print(f"[bold]{report.demand.name}[/]: {len(report.demand.classes)} GPU class(es), "
                  f"{report.demand.horizon} {report.demand.period}s; terms past the horizon charged "
                  f"{'pro rata' if plan.rule == 'pro_rata' else 'whole'}")
    lines = [("this plan", plan.tco_usd), ("all on-demand", base["all_on_demand_usd"])]
    if base["best_single_option"]:
        lines.append((f"best single option ({base['best_single_option']})", base["best_single_option_usd"]))
    rows = [[label, _usd(v), _pct(v, base["all_on_demand_usd"])] for label, v in lines]
    console.print(fitted_table([Column("TCO"), Column("USD", "right"), Column("vs on-demand", "right")], rows,
                               width=width))
    console.print(f"  reservations ${plan.reservation_usd:,.0f} + elastic ${plan.elastic_usd:,.0f}"
                  + (f" (of which past the horizon ${data['past_horizon_usd']:,.0f})" if data["past_horizon_usd"]
                     else ""))
    res = data["reservations"]
    if res:
        cols = [Column("class"), Column("count", "right"), Column("instance"), Column("where", drop=2),
                Column("term"), Column("start", "right"), Column("util", "right"),
                Column("break-even", "right", drop=1)]
        body = [[r["class"], str(r["count"]), r["instance_type"], f"{r['cloud']}:{r['region']}",
                 r["term"].removeprefix("reserved_"), str(r["start_period"]), f"{r['utilization']:.0%}",
                 "-" if r["break_even_utilization"] is None else f"{r['break_even_utilization']:.0%}"]
                for r in res]
        console.print(fitted_table(cols, body, width=width, title="Reservations"))
    else:
        console.print("No reservation pays off: on-demand and spot serve all demand.")
    sens = [[key.replace("demand_", "demand "), _usd(v.get("optimal_tco_usd")), _usd(v.get("this_plan_tco_usd")),
             _usd(v.get("robust_tco_usd"))] for key, v in sorted(report.sensitivity.items())]
    console.print(fitted_table([Column("scenario"), Column("optimal", "right"), Column("this plan", "right"),
                                Column("robust plan", "right")], sens, width=width,
                               title="Sensitivity (robust: min-max regret per class)"))
    for note in report.notes:
        console.print(f"[dim]note: {note}[/]")


def _usd(v: float | None) -> str:
    return "-" if v is None else f"${v:,.0f}"


def _pct(v: float | None, ref: float | None) -> str:
    if v is None or not ref:
        return "-"
    return f"{v / ref - 1:+.1%}"
