"""`planner status [RUN_DIR]`: where a run stands, or every run under the runs directory.

Reads the run directory only (state.json, events.jsonl, ledger.sqlite, summary.json), so it
is safe while `planner run` is writing it. The runtime is imported inside :func:`handle`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path

from rich.console import Console
from rich.markup import escape

DESCRIPTION = """\
Show one run: its state, progress, steps, spend (from the ledger), forecast total, ETA
against the deadline, current pool, preemptions and re-plans. Without RUN_DIR, list every
run under the runs directory ($DANLU_RUNS_DIR, else ./runs, where `planner run` puts them);
a RUN_DIR that holds runs rather than being one is listed the same way. A run still in
progress is shown from its state, events and ledger, with its controller: "running
(controller pid N)" while it lives, "controller gone" with the `planner run --resume`
that continues it otherwise (detached runs: `planner logs`, `planner cancel`). A queue's run
directory (`planner run QUEUE.toml`) first says where the queue stands (running with its
process id, completed, incomplete, cancelled, or stopped with its process gone, and how to
finish it) and which jobs have not started, then lists its jobs' runs. See docs/report.md,
docs/run.md and docs/capacity.md."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("status", help="where a run stands (or every run): progress, spend, forecast, ETA",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?", type=Path,
                   help="a run directory (default: list the runs under $DANLU_RUNS_DIR or ./runs)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object (one run) or a JSON list (several) instead of tables")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    from runtime.control.queue_record import is_queue_run
    from runtime.errors import RuntimeFailure
    from runtime.reports.queue_view import load_queue
    from runtime.reports.run_report import figures_table, status_table
    from runtime.reports.run_view import default_runs_dir, find_runs, is_run, load_run

    runs = None
    queue = None
    if args.run_dir is None:
        root = default_runs_dir()
        runs = find_runs(root)
    elif is_queue_run(args.run_dir):
        root = args.run_dir
        queue = load_queue(root)
        runs = find_runs(root)
    elif not is_run(args.run_dir) and args.run_dir.is_dir():
        root = args.run_dir
        runs = find_runs(root) or None  # holds no runs either: load_run below says it is not a run
    if runs is None:
        view = load_run(args.run_dir)
        if args.json:
            print(json.dumps(_with_controller(view), indent=2))
        else:
            table = figures_table(view)
            controller = _controller_text(view)
            if controller:
                table.add_row("Controller", controller)
            console.print(table)
        return 0
    views, broken = [], []
    for path in runs:
        try:
            views.append(load_run(path))
        except RuntimeFailure as exc:  # one broken run must not hide the others
            broken.append((path, str(exc)))
    if args.json:
        rows = [_with_controller(view) for view in views] + [{"run_dir": str(p), "error": e} for p, e in broken]
        print(json.dumps(rows if queue is None else {"queue": queue.to_dict(), "runs": rows}, indent=2))
        return 0
    if queue is not None:
        _print_queue(queue, console)
    if views:
        console.print(status_table(views, width=console.width))
    for view in views:
        controller = _controller_text(view, resume=None if queue is None else queue.run_dir)
        if controller:
            console.print(f"{escape(view.run_dir.name)}: {controller}", highlight=False, soft_wrap=True)
    for path, error in broken:
        console.print(f"[red]unreadable[/] {escape(path.name)}: {escape(error)}", highlight=False)
    if not runs and queue is None:
        console.print(f"no runs under {os.fspath(root)} yet (a run directory holds a state.json)")
    return 0


def _print_queue(queue, console: Console) -> None:
    """The queue's line, and its jobs that have no run yet; the started ones follow as runs."""
    root = escape(str(queue.run_dir))
    if queue.status == "running":
        where = "" if queue.host is None or queue.host == socket.gethostname() else f" on {escape(queue.host)}"
        text = f"running (queue pid {queue.pid}{where}); stop it: `planner cancel {root}`"
    elif queue.resumable:
        text = (f"[red]{queue.status}[/] (its process is gone) -- finish it: `planner run --resume {root}`"
                if queue.status == "stopped" else f"cancelled -- finish it: `planner run --resume {root}`")
    else:
        text = queue.status
    console.print(f"queue {escape(queue.queue)}: {text}", highlight=False, soft_wrap=True)
    for job in queue.not_started:
        due = "starts" if queue.status == "running" else "was due"
        console.print(f"{escape(job.job)}: not started (slot {job.start_slot}, {due} {job.starts_at})",
                      highlight=False, soft_wrap=True)


def _controller_text(view, resume: Path | None = None) -> str | None:
    """What is known of a running run's controller (None: the run ended, or nothing is recorded);
    ``resume``: the directory whose resume continues it (a queue's, for its jobs), else the run's."""
    from runtime.control import detach

    if not view.running:
        return None
    live = detach.liveness(view.run_dir)
    if live.record is None:
        return None
    run_dir = escape(str(view.run_dir))
    if live.other_host:
        return f"controller pid {live.record.pid} on {escape(live.record.host)} (not checked from here)"
    if live.alive:
        log = view.run_dir / detach.LOG_FILE
        follow = f"; follow it: `planner logs {run_dir} --follow`" if log.exists() else ""
        return f"running (controller pid {live.record.pid}){follow}"
    target = run_dir if resume is None else escape(str(resume))
    return f"[red]controller gone[/] -- continue it: `planner run --resume {target}`"


def _with_controller(view) -> dict:
    from runtime.control import detach

    row = view.to_dict()
    live = detach.liveness(view.run_dir)
    row["controller"] = None if live.record is None else {
        "pid": live.record.pid, "host": live.record.host, "alive": live.alive,
        "log": str(view.run_dir / detach.LOG_FILE) if (view.run_dir / detach.LOG_FILE).exists() else None,
    }
    return row
