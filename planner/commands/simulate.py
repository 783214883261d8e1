"""``planner simulate``: replay spot/on-demand policies on real spot availability traces."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import tomllib
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.markup import escape

from planner.errors import JobSpecError
from planner.policy import POLICY_NAMES
from planner.simulate import (
    SimResult,
    SimulationError,
    TickGrid,
    require_feasible,
    simulate_policies,
    spot_models,
    tick_grid,
)
from planner.simulate_job import SimulatedJob, job_model
from planner.tables import Column, fitted_table
from pricing.traces import MultiPoolTrace, read_traces

ALL_POLICIES = (*POLICY_NAMES, "optimal")

DESCRIPTION = """\
Replay the spot/on-demand switching policies on a spot availability trace (the
"Can't Be Late" model): a job of C hours due D hours after it starts, a restart
overhead of d hours on every launch, spot usable only in the ticks the trace says it
is available.  Policies: on_demand, greedy, uniform_progress (the paper's, pinned to
the first trace's pool or --home-pool), danlu (ours, the runtime's policy: learns the
pools' availability as it goes and uses every pool given) and optimal (the cheapest
schedule in hindsight: the lower bound).

The model comes from the job file: C from [workload] and the throughput of the pool
(--pool, else the instance type the trace's file names say, else the quote's choice),
D from constraints.deadline_hours, d from overheads.restart_minutes, on-demand and spot
prices from the trace (its prices, metadata.price_info) or the catalog.  Every flag
under "job model" overrides the value it names.

Trace files are read by their content: SkyPilot spot-traces JSON (0/1 files: 1 means
spot UNAVAILABLE; files with values above 1 hold instance counts, available = --gang
instances up, default the whole gang), SkyNomad <zone>/full.json folders, and CSV
date,availability (1 = available).  The table says which format each was read as.
Give --trace several times, or a folder, to simulate several zones.

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
    parser.add_argument("job", metavar="JOB", type=Path, help="job.toml: work, deadline, restart overhead")
    parser.add_argument(
        "--trace", action="append", required=True, type=Path, metavar="PATH",
        help="trace file (.json, .csv) or folder of them; repeat for several zones",
    )
    parser.add_argument(
        "--policy", action="append", choices=(*ALL_POLICIES, "all"), metavar="NAME",
        help=f"policy to run: {', '.join(ALL_POLICIES)} or all (default); repeatable",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write progress vs time per policy to PNG")
    where = parser.add_argument_group("pool and prices")
    where.add_argument("--pool", metavar="CLOUD:REGION:TYPE",
                       help="price and size the job on this catalog pool (default: the trace's instance type, "
                            "else the quote's choice)")
    where.add_argument("--nodes", type=int, metavar="N", help="nodes of the pool (default: the trace's gang, or 1)")
    where.add_argument("--catalog", metavar="PATH", help="price catalog, as for planner quote (default: built in)")
    where.add_argument("--no-cache", action="store_true", help="ignore the local price cache and imported catalogs")
    model = parser.add_argument_group("job model (overrides of what the job file and catalog say)")
    model.add_argument("--job-hours", type=float, metavar="C", help="compute the job needs, hours")
    model.add_argument("--deadline-hours", type=float, metavar="D", help="deadline after the start, hours")
    model.add_argument("--restart-hours", type=float, metavar="d", help="overhead of each launch, hours")
    model.add_argument("--on-demand-price", type=float, metavar="X", help="on-demand USD/h for the whole job")
    model.add_argument("--spot-price", type=float, metavar="Y",
                       help="spot USD/h for every pool, overriding a trace's own prices")
    model.add_argument("--start-tick", type=int, default=0, metavar="K", help="start the job at tick K of the trace")
    model.add_argument(
        "--gang", type=int, metavar="N", help="count traces: instances that must be up (default all)"
    )
    model.add_argument("--home-pool", metavar="POOL", help="pool of greedy and uniform_progress (default: the first)")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    name = _job_name(args.job)
    trace = read_traces(args.trace, gang=args.gang)
    if args.spot_price is not None:
        trace = dataclasses.replace(trace, spot_prices=np.full(trace.spot_prices.shape, np.nan))
    simulated, sizes = _model(args, trace)
    model = simulated.model
    grid = tick_grid(model, trace.tick_hours)
    try:
        require_feasible(model, grid)
    except SimulationError as exc:
        raise SimulationError(f"{exc}{_more_nodes(simulated, sizes, trace)}") from None
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
        print(json.dumps(_payload(name, trace, args.start_tick, simulated, grid, home, results), indent=2))
        return 0
    title = (
        f"{name}: C={model.job_hours:.4g} h, D={model.deadline_hours:g} h, d={model.restart_hours:g} h "
        f"(as {grid.overhead_ticks} tick(s)), from tick {args.start_tick} of {len(trace.pools)} pool(s)"
    )
    pinned = f" ({home})" if len(trace.pools) > 1 else ""
    _print_table(console, title, results, pinned)
    for fmt in dict.fromkeys(trace.formats):
        read = [p for p, f in zip(trace.pools, trace.formats, strict=True) if f == fmt]
        console.print(f"read as {fmt}: {', '.join(read)}")
    where = f" on {simulated.nodes} x {simulated.pool}" if simulated.pool else ""
    console.print(f"model{where}: " + "; ".join(f"{k} from {v}" for k, v in simulated.sources.items()))
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


MAX_NODES_TRIED = 64


@dataclasses.dataclass(frozen=True)
class _Sizes:
    """The job's model at another node count (``at(nodes)``), up to ``limit`` nodes: the job's max_nodes."""

    at: Callable[[int | None], SimulatedJob]
    limit: int


def _more_nodes(simulated: SimulatedJob, sizes: _Sizes, trace: MultiPoolTrace) -> str:
    """For a job too long for its deadline on the pool's node count: the fewest nodes that fit it, as a
    flag; nothing when --job-hours gave C."""
    if simulated.pool is None or not simulated.sources.get("job_hours", "").startswith("job:"):
        return ""
    where = f"; on {simulated.nodes} x {simulated.pool} the job takes {simulated.model.job_hours:.4g} h"
    for nodes in range(simulated.nodes + 1, sizes.limit + 1):
        bigger = sizes.at(nodes)
        if tick_grid(bigger.model, trace.tick_hours).feasible:
            return f"{where}: --nodes {nodes} meets the deadline ({bigger.model.job_hours:.4g} h)"
    return f"{where}, more than the deadline on up to {sizes.limit} nodes (the job's max_nodes)"


def _model(args: argparse.Namespace, trace: MultiPoolTrace) -> tuple[SimulatedJob, _Sizes]:
    """The job's model: the whole job file when C must come from it, else just what the flags lack; and
    the same model at other node counts."""
    from planner.job import load_job
    from pricing.sources import resolve_catalog

    overrides = {
        "job_hours": args.job_hours, "deadline_hours": args.deadline_hours, "restart_hours": args.restart_hours,
        "on_demand_price": args.on_demand_price, "spot_price": args.spot_price,
    }
    job, bare = None, _raw(args.job)
    if args.job_hours is None or "workload" in bare:
        job = load_job(args.job)
    if args.nodes is not None and args.nodes < 1:
        raise SimulationError(f"--nodes {args.nodes}: give 1 or more")
    catalog = resolve_catalog(args.catalog, use_cache=not args.no_cache)

    def at(nodes: int | None) -> SimulatedJob:
        return job_model(job, catalog, trace, pool=args.pool, nodes=nodes, overrides=overrides, bare=bare)

    limit = min(job.constraints.max_nodes, MAX_NODES_TRIED) if job is not None else MAX_NODES_TRIED
    return at(args.nodes), _Sizes(at, limit)


def _raw(path: Path) -> dict:
    with path.open("rb") as fh:  # _job_name has read it already: no error left to report here
        return tomllib.load(fh)


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
    simulated: SimulatedJob,
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
            "formats": list(trace.formats),
            "spot_models": spot_models(trace),  # as the quote reads these traces (pricing.spot_model)
        },
        "model": {**dataclasses.asdict(simulated.model), "effective_restart_hours": grid.overhead_hours,
                  "pool": simulated.pool, "nodes": simulated.nodes, "from": simulated.sources},
        "home_pool": home,
        "policies": {n: r.summary() for n, r in results.items()},
    }


def _print_table(console: Console, title: str, results: dict[str, SimResult], pinned: str) -> None:
    # The policy, its cost against the optimum and whether it kept the deadline stay at any width;
    # the hour and launch counts make way first.
    optimal = results.get("optimal")
    on_demand = results.get("on_demand")
    columns = [Column("policy", wrap=True), Column("cost $", "right")]
    if optimal:
        columns.append(Column("x optimal", "right"))
    if on_demand:
        columns.append(Column("saved vs on-demand", "right", drop=2))
    columns += [Column("finish h", "right", drop=3), Column("deadline"), Column("launches", "right", drop=4),
                Column("preemptions", "right", drop=5), Column("spot h", "right", drop=1),
                Column("on-demand h", "right", drop=1)]
    rows = []
    for policy, r in results.items():
        row = [escape(policy + (pinned if policy in ("greedy", "uniform_progress") else "")), f"{r.cost_usd:,.2f}"]
        if optimal:
            row.append(f"{r.cost_usd / optimal.cost_usd:.3f}")
        if on_demand:
            row.append(f"{1 - r.cost_usd / on_demand.cost_usd:.1%}")
        finish = "-" if r.finish_hours is None else f"{r.finish_hours:.2f}"
        met = "met" if r.deadline_met else "[red]MISSED[/]"
        row += [finish, met, str(r.launches), str(r.preemptions), f"{r.spot_hours:.2f}", f"{r.on_demand_hours:.2f}"]
        rows.append(row)
    console.print(fitted_table(columns, rows, width=console.width, title=title))
