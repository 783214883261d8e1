"""`planner capacity DEMAND.toml` and `planner capacity replay TRACE`: what to reserve for a team's demand."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from planner.errors import PlannerError

DESCRIPTION = """\
Plan a team's GPU capacity over months: how many 1-year and 3-year reservations
(commitments) to buy, of which instance type, where and when, and how much of each
period's demand to leave to on-demand and to spot (only the share the file declares
preemptible). A MILP (PuLP on HiGHS) over the catalog's prices; terms that run past the
horizon are charged pro rata or whole ([purchase] term_past_horizon). The report
compares the plan with all on-demand and with the best single-option strategy, gives each
reservation's utilization and break-even utilization, the cost with demand 20% lower
and higher, and a plan robust to both (min-max regret). --json prints one object
(tco_usd, baselines, reservations, periods, ...). See docs/capacity.md.

  planner capacity DEMAND.toml [--json] [--plot PNG] [--catalog PATH]
  planner capacity replay TRACE [options]     (planner capacity replay --help)
  planner capacity --queue QUEUE.toml [--json] [--catalog PATH]

Queue mode (--queue): schedule a queue of jobs (each a job.toml, or its keys inline:
work, throughput, deadline, budget) onto the reservations the team holds and elastic
spot/on-demand capacity, in time slots of slot_hours. Each job runs on one pool per slot,
at its effective throughput there (its own speed on that GPU type, DDP scaling, spot net
of expected preemption loss, as Gavel does); the MILP meets every deadline at the least
elastic spend and prints each job's schedule and the nodes to run per slot.
`planner run QUEUE.toml` runs the jobs as scheduled. An infeasible queue exits 2 naming the job."""

REPLAY_DESCRIPTION = """\
Replay a job trace (submit_time_s,duration_s,num_gpus[,gpu_type]) period by period, deciding
reservations with only the past, and compare: the hindsight optimum (the capacity MILP, which
knows the future), all on-demand, the deterministic online rule of Wang, Li and Liang (ICAC
2013; at most 2 - alpha times the optimum, alpha = 0 for cloud terms, which are billed whole)
and danlu's history rule (reserve a level when its use over the last --lookback periods is
above break-even). The trace's window is repeated to --horizon-periods, --rotations times
from different offsets; the figures are the mean and the worst over those runs. A window that
starts or ends with quiet periods (a trace's ramp-in or cut-off, which repeating would turn into
demand) gets a note with the window that leaves them out."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "capacity", help="plan reservations (1y/3y) vs on-demand and spot for a team's demand; replay online",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("demand", metavar="DEMAND", nargs="?", help="the demand file (DEMAND.toml), or 'replay'")
    _plan_options(p)
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(handler=handle)


def _plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--plot", metavar="PNG", help="write the chart of demand vs reserved capacity per period")
    p.add_argument("--catalog", metavar="PATH", help="price catalog (a SkyPilot v8 directory or offerings CSV); "
                                                      "default: the embedded snapshot")
    p.add_argument("--no-robust", action="store_true", help="skip the robust plan (saves three solves)")
    p.add_argument("--queue", metavar="QUEUE.toml",
                   help="schedule a queue of jobs onto held reservations and spot/on-demand, slot by slot "
                        "(see docs/capacity.md, 'Queue mode')")


def replay_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="planner capacity replay", description=REPLAY_DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", metavar="TRACE", help="job trace CSV: submit_time_s,duration_s,num_gpus[,gpu_type]")
    p.add_argument("--gpu", default="V100", help="GPU class of rows without gpu_type (default V100)")
    p.add_argument("--period", choices=("day", "week", "month"), default="day", help="decision period (default day)")
    p.add_argument("--term", choices=("reserved_1y", "reserved_3y"), default="reserved_1y",
                   help="the reservation term on offer (default reserved_1y)")
    p.add_argument("--horizon-periods", type=_positive, metavar="N",
                   help="periods to replay (default: two terms)")
    p.add_argument("--window-start-s", type=float, default=0.0, metavar="S",
                   help="start of the trace window that is repeated (default 0)")
    p.add_argument("--window-end-s", type=float, metavar="S", help="end of the window (default: the last job's end)")
    p.add_argument("--rotations", type=_positive, default=4, metavar="K",
                   help="replays, each repeating the window from another offset (default 4)")
    p.add_argument("--growth-per-period", type=float, default=0.0, metavar="G", help="compound demand growth")
    p.add_argument("--lookback", type=_positive, metavar="N",
                   help="our rule's history, in periods (default: 28 days' worth)")
    p.add_argument("--term-past-horizon", choices=("pro_rata", "whole"), default="pro_rata",
                   help="how a term running past the end is charged (default pro_rata)")
    p.add_argument("--catalog", metavar="PATH", help="price catalog (default: the embedded snapshot)")
    p.add_argument("--clouds", nargs="*", default=(), help="clouds allowed (default all)")
    p.add_argument("--regions", nargs="*", default=(), help="region globs allowed (default all)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def handle(args: argparse.Namespace, console: Console) -> int:
    if args.demand == "replay":
        return handle_replay(replay_parser().parse_args(args.rest), console)
    if args.rest:
        extra = argparse.ArgumentParser(prog="planner capacity DEMAND")
        _plan_options(extra)
        more = extra.parse_args(args.rest)
        for key, value in vars(more).items():
            if value not in (None, False):
                setattr(args, key, value)
    if args.queue:
        if args.demand:
            raise PlannerError(f"planner capacity: give either DEMAND ({args.demand}) or --queue {args.queue}, not both")
        return handle_queue(args, console)
    if not args.demand:
        raise PlannerError("planner capacity: give the demand file, e.g. `planner capacity examples/capacity/team.toml`"
                           " (or `planner capacity replay TRACE`)")
    return handle_plan(args, console)


def handle_plan(args: argparse.Namespace, console: Console) -> int:
    # Imported here: `planner --help` must not pay for PuLP, numpy or matplotlib.
    from planner.capacity.demand import load_demand
    from planner.capacity.offers import class_offers
    from planner.capacity.report import make_report, render, report_json
    from pricing.sources import resolve_catalog

    spec, demand = load_demand(args.demand)
    catalog = resolve_catalog(args.catalog, use_cache=False)
    offers = class_offers(demand, catalog, allow=spec.purchase.allow, clouds=spec.constraints.clouds,
                          regions=spec.constraints.regions, spot_loss_hours=spec.purchase.spot_loss_hours)
    report = make_report(demand, offers, spec.purchase.term_past_horizon, spec.purchase.allow,
                         robust=not args.no_robust)
    if args.plot:
        from planner.capacity.plot import plot_capacity

        plot_capacity(report.plan, args.plot)
    if args.json:
        print(json.dumps(report_json(report), indent=2))
    else:
        render(report, console)
        if args.plot:
            console.print(f"[dim]chart written to {args.plot}[/]")
    return 0


def handle_queue(args: argparse.Namespace, console: Console) -> int:
    from planner.capacity.queue import schedule
    from planner.capacity.queue_report import render, schedule_json
    from planner.capacity.queue_spec import load_queue
    from pricing.sources import resolve_catalog

    spec = load_queue(args.queue)
    catalog = resolve_catalog(args.catalog, use_cache=False)
    result = schedule(spec, catalog)
    if args.json:
        print(json.dumps(schedule_json(result), indent=2))
    else:
        render(result, console)
    return 0


def handle_replay(args: argparse.Namespace, console: Console) -> int:
    import numpy as np

    from planner.capacity.demand import (
        PERIOD_HOURS,
        ClassDemand,
        Demand,
        read_trace,
        trace_period_hours,
    )
    from planner.capacity.errors import NoOfferError
    from planner.capacity.offers import class_offers
    from planner.capacity.replay import cheapest_option, replay_all, rotations
    from planner.tables import Column, fitted_table
    from pricing.sources import resolve_catalog

    P = PERIOD_HOURS[args.period]
    jobs = read_trace(Path(args.trace), source=args.trace, key="TRACE")
    per_gpu = trace_period_hours(jobs, P, default_gpu=args.gpu, start_s=args.window_start_s,
                                 end_s=args.window_end_s)
    if len(per_gpu) != 1:
        raise PlannerError(f"{args.trace}: replay takes one GPU class; the trace has {', '.join(per_gpu)}")
    gpu, series = next(iter(per_gpu.items()))
    catalog = resolve_catalog(args.catalog, use_cache=False)
    probe = Demand("replay", args.period, 1, (ClassDemand(gpu, gpu, (1.0,), 0.0),))
    offers = class_offers(probe, catalog, allow=("on_demand", args.term), clouds=tuple(args.clouds),
                          regions=tuple(args.regions))[gpu]
    option = cheapest_option(offers, args.term)
    if option is None or offers.on_demand is None:
        raise NoOfferError(f"{args.trace}: the catalog sells no {gpu} {args.term} cheaper than on-demand (and "
                           "on-demand) in the clouds/regions given; try another --term, --gpu or --catalog")
    term_periods = option.term_periods(P)
    horizon = args.horizon_periods or 2 * term_periods
    lookback = args.lookback or max(1, round(28 * 24 / P))
    runs = rotations(series, horizon, args.rotations, args.growth_per_period)
    summary = replay_all(runs, args.period, option, offers.on_demand, args.term_past_horizon, lookback=lookback)
    notes = _edge_notes(series, args, horizon)
    out = {
        "trace": args.trace, "gpu": gpu, "period": args.period, "window_periods": len(series),
        "horizon_periods": horizon, "rotations": args.rotations, "term": args.term, "term_periods": term_periods,
        "reservation": {"cloud": option.cloud, "region": option.region, "instance_type": option.instance_type,
                        "gpus_per_node": option.gpus_per_node, "hourly_usd": option.hourly_usd},
        "on_demand_usd_per_gpu_hour": offers.on_demand.usd_per_gpu_hour, "lookback_periods": lookback,
        "term_past_horizon": args.term_past_horizon, "bound": summary.bound,
        "mean": {k: summary.mean(k) for k in ("hindsight_usd", "all_on_demand_usd", "baseline_usd", "ours_usd",
                                              "baseline_ratio", "ours_ratio")},
        "worst_ratio": {"baseline": summary.worst("baseline_ratio"), "ours": summary.worst("ours_ratio")},
        "runs": [{"hindsight_usd": r.hindsight_usd, "all_on_demand_usd": r.all_on_demand_usd,
                  "baseline_usd": r.baseline_usd, "ours_usd": r.ours_usd,
                  "reservations": {"hindsight": r.hindsight_reservations, "baseline": r.baseline_reservations,
                                   "ours": r.ours_reservations}} for r in summary.runs],
        "notes": notes,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    console.print(f"[bold]replay[/] {args.trace}: {gpu}, {len(series)}-{args.period} window repeated to {horizon} "
                  f"{args.period}s, {args.rotations} offsets; {args.term} {option.instance_type} "
                  f"{option.cloud}:{option.region} vs on-demand ${offers.on_demand.usd_per_gpu_hour:.3f}/GPU-h")
    m = out["mean"]
    rows = [["hindsight optimum", f"${m['hindsight_usd']:,.0f}", "1.000", "1.000"],
            ["all on-demand", f"${m['all_on_demand_usd']:,.0f}",
             f"{np.mean([r.all_on_demand_usd / r.hindsight_usd for r in summary.runs]):.3f}", "-"],
            ["Wang-Li-Liang", f"${m['baseline_usd']:,.0f}", f"{m['baseline_ratio']:.3f}",
             f"{out['worst_ratio']['baseline']:.3f}"],
            ["danlu (history)", f"${m['ours_usd']:,.0f}", f"{m['ours_ratio']:.3f}", f"{out['worst_ratio']['ours']:.3f}"]]
    console.print(fitted_table([Column("strategy"), Column("mean cost", "right"), Column("x optimum", "right"),
                                Column("worst", "right")], rows, width=console.width))
    console.print(f"bound of the online rule: {summary.bound:g} x optimum (alpha = 0)")
    for note in notes:
        console.print(escape(f"note: {note}"), soft_wrap=True)
    return 0


def _edge_notes(series: list[float], args: argparse.Namespace, horizon: int) -> list[str]:
    """A note when the window starts or ends with quiet periods, with the window that leaves them out."""
    from planner.capacity.demand import PERIOD_HOURS, periods, quiet_edges_note

    edges = quiet_edges_note(series, args.period, args.window_start_s)
    if edges is None:
        return []
    said, start, end = edges
    inside = round((end - start) / (PERIOD_HOURS[args.period] * 3600.0))
    return [f"{args.trace}: {said}. Repeated to {periods(horizon, args.period)} they count as demand. To replay "
            f"the {periods(inside, args.period)} between: --window-start-s {start:.0f} --window-end-s {end:.0f}"]
