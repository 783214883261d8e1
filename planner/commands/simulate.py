"""``planner simulate``: replay spot/on-demand policies on real spot availability traces."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import tomllib
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from planner.errors import JobSpecError
from planner.policy import POLICY_NAMES
from planner.simulate import (
    DEFAULT_ON_DEMAND_PRICE,
    DEFAULT_SPOT_PRICE,
    JobModel,
    SimResult,
    SimulationError,
    TickGrid,
    require_feasible,
    simulate_policies,
    spot_models,
    tick_grid,
)
from pricing.traces import MultiPoolTrace, read_traces

ALL_POLICIES = (*POLICY_NAMES, "optimal")

DESCRIPTION = """\
Replay the spot/on-demand switching policies on a spot availability trace (the
"Can't Be Late" model): a job of C hours due D hours after it starts, a restart
overhead of d hours on every launch, spot usable only in the ticks the trace says it
is available.  Policies: on_demand, greedy, uniform_progress (the paper's, pinned to
the first trace's pool or --home-pool), danlu (ours, the runtime's policy: uses every
pool given) and optimal (the cheapest schedule in hindsight: the lower bound).

Trace files: SkyPilot spot-traces JSON; in the 0/1 files 1 means spot UNAVAILABLE,
multi-node files hold instance counts (available = --gang instances up, default the
whole gang).  Give --trace several times, or a folder, to simulate several zones.

Tick rules: preemption takes effect at the tick boundary (work up to it is kept);
the restart overhead is rounded up to whole ticks; every tick is billed in full
except the last, billed up to the moment the work is done; the deadline is met when
that moment is <= D.  See docs/simulate.md."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="replay spot policies on real availability traces",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job", metavar="JOB", type=Path, help="job.toml (only its name is used for now)")
    parser.add_argument(
        "--trace", action="append", required=True, type=Path, metavar="PATH",
        help="trace .json file or folder of them; repeat for several zones",
    )
    parser.add_argument(
        "--policy", action="append", choices=(*ALL_POLICIES, "all"), metavar="NAME",
        help=f"policy to run: {', '.join(ALL_POLICIES)} or all (default); repeatable",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write progress vs time per policy to PNG")
    model = parser.add_argument_group("job model (the paper's parameters)")
    model.add_argument("--job-hours", type=float, metavar="C", help="compute the job needs, hours (required for now)")
    model.add_argument(
        "--deadline-hours", type=float, metavar="D", help="deadline after the start, hours (required for now)"
    )
    model.add_argument("--restart-hours", type=float, default=0.2, metavar="d",
                       help="overhead of each launch, hours (default 0.2, the paper's 12 min)")
    model.add_argument("--on-demand-price", type=float, default=DEFAULT_ON_DEMAND_PRICE, metavar="X",
                       help=f"on-demand USD/h (default {DEFAULT_ON_DEMAND_PRICE}, p3.2xlarge)")
    model.add_argument("--spot-price", type=float, metavar="Y",
                       help=f"spot USD/h for every pool, overriding a trace's own 'prices' "
                            f"(default: the trace's prices, else {DEFAULT_SPOT_PRICE})")
    model.add_argument("--start-tick", type=int, default=0, metavar="K", help="start the job at tick K of the trace")
    model.add_argument(
        "--gang", type=int, metavar="N", help="multi-node traces: instances that must be up (default all)"
    )
    model.add_argument("--home-pool", metavar="POOL", help="pool of greedy and uniform_progress (default: the first)")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    name = _job_name(args.job)
    if args.job_hours is None or args.deadline_hours is None:
        raise SimulationError(
            f"{args.job}: planner simulate needs --job-hours and --deadline-hours; deriving the job length and "
            "deadline from the job file is not supported yet, so give both flags"
        )
    model = JobModel(
        args.job_hours,
        args.deadline_hours,
        args.restart_hours,
        args.on_demand_price,
        DEFAULT_SPOT_PRICE if args.spot_price is None else args.spot_price,
    )
    trace = read_traces(args.trace, gang=args.gang)
    if args.spot_price is not None:
        trace = dataclasses.replace(trace, spot_prices=np.full(trace.spot_prices.shape, np.nan))
    grid = tick_grid(model, trace.tick_hours)
    require_feasible(model, grid)
    if not 0 <= args.start_tick < trace.ticks:
        raise SimulationError(f"--start-tick {args.start_tick} is outside the trace: give 0 to {trace.ticks - 1}")
    home = args.home_pool or trace.pools[0]
    if home not in trace.pools:
        raise SimulationError(f"--home-pool {home!r} is not among the trace's pools: {', '.join(trace.pools)}")
    window = trace.window(args.start_tick, grid.horizon_ticks(model))
    names = ALL_POLICIES if not args.policy or "all" in args.policy else tuple(dict.fromkeys(args.policy))
    results = simulate_policies(window, model, names, home_pool=home)
    if args.plot:
        from planner.simulate_plot import plot_progress  # matplotlib only when asked

        plot_progress(results, window, model, args.plot, home_pool=home)
    short = args.start_tick + grid.last_tick + 1 > trace.ticks
    if args.json:
        print(json.dumps(_payload(name, trace, args.start_tick, model, grid, home, results), indent=2))
        return 0
    title = (
        f"{name}: C={model.job_hours:g} h, D={model.deadline_hours:g} h, d={model.restart_hours:g} h "
        f"(as {grid.overhead_ticks} tick(s)), from tick {args.start_tick} of {len(trace.pools)} pool(s)"
    )
    pinned = f" ({home})" if len(trace.pools) > 1 else ""
    _print_table(console, title, results, pinned)
    if not math.isclose(model.restart_hours, grid.overhead_hours):
        console.print(
            f"restart overhead {model.restart_hours:g} h is simulated as {grid.overhead_ticks} whole tick(s) "
            f"= {grid.overhead_hours:.4g} h"
        )
    if short:
        console.print("[yellow]note:[/] the deadline lies past the end of the trace; spot counts as unavailable there")
    if args.plot:
        console.print(f"plot written to {args.plot}")
    return 0


def _job_name(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise JobSpecError(str(path), ["file not found: pass the path of a job.toml"]) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise JobSpecError(str(path), [f"not readable TOML: {exc}"]) from None
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise JobSpecError(str(path), ['name: missing or empty; add name = "my-job" at the top'])
    return name


def _payload(
    name: str,
    trace: MultiPoolTrace,
    start: int,
    model: JobModel,
    grid: TickGrid,
    home: str,
    results: dict[str, SimResult],
) -> dict[str, object]:
    return {
        "job": name,
        "trace": {
            "pools": list(trace.pools),
            "gap_seconds": trace.gap_seconds,
            "start_tick": start,
            "sources": [str(s) for s in trace.sources],
            "spot_models": spot_models(trace),  # as the quote reads these traces (pricing.spot_model)
        },
        "model": {**dataclasses.asdict(model), "effective_restart_hours": grid.overhead_hours},
        "home_pool": home,
        "policies": {n: r.summary() for n, r in results.items()},
    }


def _print_table(console: Console, title: str, results: dict[str, SimResult], pinned: str) -> None:
    optimal = results.get("optimal")
    on_demand = results.get("on_demand")
    table = Table(title=title)
    table.add_column("policy", no_wrap=True)
    table.add_column("cost $", justify="right")
    if optimal:
        table.add_column("x optimal", justify="right")
    if on_demand:
        table.add_column("saved vs on-demand", justify="right")
    for column in ("finish h", "deadline", "launches", "preemptions", "spot h", "on-demand h"):
        table.add_column(column, justify="right")
    for policy, r in results.items():
        row = [policy + (pinned if policy in ("greedy", "uniform_progress") else ""), f"{r.cost_usd:,.2f}"]
        if optimal:
            row.append(f"{r.cost_usd / optimal.cost_usd:.3f}")
        if on_demand:
            row.append(f"{1 - r.cost_usd / on_demand.cost_usd:.1%}")
        finish = "-" if r.finish_hours is None else f"{r.finish_hours:.2f}"
        met = "met" if r.deadline_met else "[red]MISSED[/]"
        row += [finish, met, str(r.launches), str(r.preemptions), f"{r.spot_hours:.2f}", f"{r.on_demand_hours:.2f}"]
        table.add_row(*row)
    console.print(table)
