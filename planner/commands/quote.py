"""`planner quote JOB`: the cheapest (or fastest, or greenest) plan that meets the job's constraints."""

from __future__ import annotations

import argparse
import gc
import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

EXIT_INFEASIBLE = 2


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "quote",
        help="plan a job: instance types, regions, nodes and the spot/on-demand/reserved mix",
        description=(
            "Solve a MILP over cloud prices and throughput benchmarks for the plan that finishes the job "
            "before its deadline and within its budget. Prints the plan, its cost lines (compute, "
            "checkpoint writes, preemption recovery), time and risk, the runner-up and the cost-vs-time "
            "frontier. Exit code 2 when the job is invalid or infeasible (with the smallest relaxation)."
        ),
        epilog=(
            "The job file's tables: [workload] (model or steps, tokens, checkpoint_gb, params_billions for "
            "memory by parallelism, [workload.throughput], [workload.scaling]), [constraints] (deadline_hours, "
            "budget_usd, max_nodes, clouds, regions), [purchase] (allow; [[purchase.held]] reservations the "
            "team already pays for; [[purchase.cluster]] the team's own Kubernetes GPUs), [data] (where the "
            "dataset lives: egress and staging), [objective], [overheads], [run], [alerts], [tracking]. "
            "Reference: README.md 'job.toml reference'; how a quote is made: docs/quote.md; clusters: "
            "docs/kubernetes.md."
        ),
    )
    p.add_argument("job", metavar="JOB", help="path of the job.toml file")
    p.add_argument("--catalog", metavar="PATH",
                   help="price catalog: a SkyPilot v8 catalog directory (<cloud>/*.csv) or an offerings CSV; "
                        "default: the embedded snapshot merged with `planner prices refresh`/`import` data")
    p.add_argument("--json", action="store_true", help="print one JSON object (see README) instead of tables")
    p.add_argument("--top", type=_count, default=3, metavar="N", help="number of alternatives to show (default 3)")
    p.add_argument("--objective", choices=("cost", "time", "carbon"),
                   help="override the job's [objective] minimize")
    p.add_argument("--plot", metavar="PNG", help="write the cost-vs-time frontier as a PNG")
    p.add_argument("--no-cache", action="store_true", help="ignore the local price cache and imported catalogs")
    p.add_argument("--max-price-age", type=float, default=float(os.environ.get("DANLU_MAX_PRICE_AGE_DAYS", 30)),
                   metavar="DAYS", help="warn when the prices are older than this (default 30, env "
                                        "DANLU_MAX_PRICE_AGE_DAYS)")
    p.set_defaults(handler=handle, console=False)  # --json prints without rich: the console is made for tables


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def handle(args: argparse.Namespace, console: Console | None) -> int:
    # A quote is a short computation whose objects mostly live until it ends: the cyclic garbage
    # collector's passes over the modules it imports and the configurations it builds (107 of them,
    # 19 ms of a 450 ms quote) find next to nothing; reference counting frees the rest.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _quote(args, console)
    finally:
        if collecting:
            gc.enable()


def _quote(args: argparse.Namespace, console: Console | None) -> int:
    # Imported here: `planner --help` must not pay for the optimizer (HiGHS, numpy).
    from planner.job import load_job
    from planner.quote_service import quote_job
    from planner.report import plot_frontier, quote_json, render_quote

    job = load_job(args.job)
    quote = quote_job(job, source=args.job, catalog=args.catalog, use_cache=not args.no_cache, top=args.top,
                      objective=args.objective, max_price_age_days=args.max_price_age)
    if args.plot:
        plot_frontier(quote, args.plot)
    if args.json:
        print(json.dumps(quote_json(quote), indent=2))
    else:
        from planner.cli import make_console

        console = console or make_console()
        render_quote(quote, console, args.top)
        if args.plot:
            console.print(f"[dim]frontier plot written to {args.plot}[/]")
    return 0 if quote.plan else EXIT_INFEASIBLE
