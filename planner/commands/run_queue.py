"""`planner run QUEUE.toml`: schedule the queue (as `planner capacity --queue` does), then run each job.

Kept apart from `planner run JOB` (planner/commands/run.py), which only hands a queue file over."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from planner.commands.run import detach_run
from planner.errors import PlannerError


def run_queue_command(args: argparse.Namespace, console: Console, tuning: Any) -> int:
    from planner.capacity.queue import schedule
    from planner.capacity.queue_report import render
    from planner.capacity.queue_spec import load_queue
    from pricing.sources import resolve_catalog
    from runtime.control.queue_run import QueueRunOptions, prepare_queue, run_queue

    refused = [flag for flag, given in (("--plan", args.plan), ("--chaos", args.chaos)) if given]
    if refused:
        raise PlannerError(f"{args.job}: a queue runs as `planner capacity --queue` schedules it; {', '.join(refused)} "
                           "go with one job (run that job's file, or its run directory with --resume)")
    spec = load_queue(args.job)
    catalog = resolve_catalog(args.catalog, use_cache=not args.no_cache)
    result = schedule(spec, catalog)
    if not args.json:
        render(result, console)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_root = Path(args.run_dir or f"runs/{spec.name}-{stamp}")
    if not args.json and not args.detach:  # --json: stdout is one JSON document; --detach says it itself
        console.print(f"queue run directory: {run_root} (one run directory per job)")
    options = QueueRunOptions(catalog=args.catalog, provider=args.provider, time_scale=args.time_scale,
                              policy=args.policy, use_cache=not args.no_cache, tuning=tuning)
    if args.detach:
        prepare_queue(result, run_root, options)
        return detach_run(run_root, args, console, queue=True)
    return _report(_stoppable(lambda: run_queue(result, run_root, options, on_event=_printer(args, console))),
                   run_root, args, console)


def resume_queue_command(args: argparse.Namespace, console: Console, tuning: Any) -> int:
    """`planner run --resume QUEUE_RUN`: finish a queue whose process was killed or cancelled."""
    from runtime.control import queue_record
    from runtime.control.queue_run import resume_queue

    for flag, given in (("--budget-usd", args.budget_usd), ("--deadline-in", args.deadline_in)):
        if given is not None:
            raise PlannerError(f"{args.resume}: is a queue's run directory; {flag} goes with one job "
                               f"(resume that job's run directory, {args.resume}/JOB)")
    if args.held_from is not None:
        raise PlannerError(f"{args.resume}: is a queue's run directory; its jobs run on the reservations of the "
                           "queue file's [[reservation]] tables, which --held-from does not change")
    run_root = Path(args.resume)
    if args.detach:
        queue_record.read(run_root)  # a damaged record is named here, not in the background's log
        return detach_run(run_root, args, console, queue=True)
    if not args.json:
        console.print(f"queue run directory: {run_root}")
    return _report(_stoppable(lambda: resume_queue(run_root, tuning, on_event=_printer(args, console))),
                   run_root, args, console)


def _stoppable(run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()`` with SIGTERM (`kill`, a scheduler's stop) stopping the queue as Ctrl-C does: every job's
    controller checkpoints and releases its nodes, and the outcome says "cancelled"."""
    from runtime.control import detach

    main_thread = threading.current_thread() is threading.main_thread()  # where signals can be handled
    previous = signal.signal(signal.SIGTERM, detach.on_sigterm) if main_thread else None
    try:
        return run()
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _printer(args: argparse.Namespace, console: Console) -> Callable[[str, dict[str, Any]], None]:
    def event(job: str, record: dict[str, Any]) -> None:
        if record["event"] in ("launch", "launch_end", "replan", "preemption", "run_end") and not args.json:
            console.print(f"[dim]{escape(job)}[/]: {escape(record['event'])} "
                          f"{escape(str(record.get('pool') or record.get('status') or record.get('outcome') or ''))}",
                          highlight=False)

    return event


def _report(out: dict[str, Any], run_root: Path, args: argparse.Namespace, console: Console) -> int:
    from planner.tables import Column, fitted_table
    from runtime.reports.queue_view import EndedJob

    if args.json:
        print(json.dumps(out, indent=2))
    else:
        rows = [[j["job"], j["status"], f"${j.get('cost_usd', 0):,.4f}", f"{j.get('hours', 0):.3f}", j["run_dir"]]
                for j in out["jobs"]]
        console.print(fitted_table([Column("job"), Column("status"), Column("cost", "right"), Column("hours", "right"),
                                    Column("run directory", drop=1)], rows, width=console.width))
    # A resume of the queue leaves these as they ended: each goes on by its own resume.
    hints = [EndedJob(j["job"], j["status"], j["run_dir"]).hint for j in out["jobs"]
             if j["status"] in ("failed", "budget_cap", "infeasible")]
    if out["status"] == "cancelled":
        hints.append(f"stopped ({out['stopped_by']}); continue the queue with `planner run --resume {run_root}`")
    for hint in hints:
        if args.json:  # stdout holds the JSON alone
            print(hint, file=sys.stderr)
        else:
            console.print(hint, soft_wrap=True, markup=False)  # a command to paste: never broken across lines
    if out["status"] == "cancelled":
        return 143 if out["stopped_by"] == "SIGTERM" else 130
    return 0 if out["status"] == "completed" else 1
