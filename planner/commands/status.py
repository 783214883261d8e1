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
finish it) and which jobs have not started, then lists its jobs' runs; in a listing, a
queue's jobs are named QUEUE_DIR/JOB and its line follows the table. See docs/report.md,
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
    from runtime.reports.queue_view import find_queues
    from runtime.reports.run_report import figures_table
    from runtime.reports.run_view import default_runs_dir, find_runs, is_run, load_run

    run_dir: Path | None = args.run_dir
    root = default_runs_dir() if run_dir is None else run_dir
    if run_dir is None or is_queue_run(run_dir) or (not is_run(run_dir) and run_dir.is_dir()):
        queue_dirs = [root] if is_queue_run(root) else find_queues(root, linked=True)
        runs = find_runs(root) + [r for q in queue_dirs if q != root for r in find_runs(q)]
        if run_dir is None or runs or queue_dirs:
            return _list(root, runs, queue_dirs, args.json, console)
    view = load_run(root)  # not a run either: it says so
    if args.json:
        print(json.dumps(_with_controller(view), indent=2))
    else:
        table = figures_table(view)
        controller = _controller_text(view)
        if controller:
            table.add_row("Controller", controller)
        console.print(table)
    return 0


def _list(root: Path, runs: list[Path], queue_dirs: list[Path], as_json: bool, console: Console) -> int:
    """The runs under ``root`` (with the jobs of the queues there), and each queue's line.  A queue's
    own directory as ``root``: its line first, and --json as ``{"queue", "runs"}``."""
    from runtime.errors import RuntimeFailure
    from runtime.reports.queue_view import load_queue
    from runtime.reports.run_report import status_table
    from runtime.reports.run_view import load_run

    views, broken, queues = [], [], []
    for path in runs:
        try:
            views.append(load_run(path))
        except RuntimeFailure as exc:  # one broken run must not hide the others
            broken.append((path, str(exc)))
    for path in queue_dirs:
        try:
            queues.append(load_queue(path))
        except RuntimeFailure as exc:
            broken.append((path, str(exc)))
    own = queues[0] if queue_dirs == [root] and queues else None
    if as_json:
        rows = [_with_controller(view) for view in views] + [{"run_dir": str(p), "error": e} for p, e in broken]
        if own is None:  # each queue's own line too, as a queue's directory gives it
            rows += [{"run_dir": str(q.run_dir), "queue": q.to_dict()} for q in queues]
        print(json.dumps(rows if own is None else {"queue": own.to_dict(), "runs": rows}, indent=2))
        return 0
    if own is not None:
        _print_queue(own, console, label=None)
    if views:
        console.print(status_table(views, width=console.width, root=root))
    queue_roots = {q.run_dir for q in queues}
    for view in views:
        in_queue = view.run_dir.parent in queue_roots
        controller = _controller_text(view, resume=view.run_dir.parent if in_queue else None)
        if controller:
            console.print(f"{escape(str(view.run_dir.relative_to(root)))}: {controller}", highlight=False,
                          soft_wrap=True)
    for queue in queues:
        if queue is not own:
            _print_queue(queue, console, label=str(queue.run_dir.relative_to(root)))
    for path, error in broken:
        console.print(f"[red]unreadable[/] {escape(path.name)}: {escape(error)}", highlight=False)
    if not runs and not queues:
        console.print(f"no runs under {os.fspath(root)} yet (a run directory holds a state.json)")
    return 0


def _print_queue(queue, console: Console, *, label: str | None) -> None:
    """The queue's line, and its jobs that have no run yet; the started ones are listed as runs
    (``label``: the queue's directory under the runs listed, its jobs named under it)."""
    root = escape(str(queue.run_dir))
    if queue.status == "running":
        where = "" if queue.host is None or queue.host == socket.gethostname() else f" on {escape(queue.host)}"
        text = f"running (queue pid {queue.pid}{where}); stop it: `planner cancel {root}`"
    elif queue.resumable:
        gone = " (its process is gone)" if queue.status == "stopped" else ""
        text = f"[red]{queue.status}[/]{gone} -- finish it: `planner run --resume {root}`"
    else:
        text = queue.status
    name = escape(queue.queue) if label is None else f"{escape(queue.queue)} ({escape(label)})"
    console.print(f"queue {name}: {text}", highlight=False, soft_wrap=True)
    for job in queue.ended:
        console.print(escape(job.hint), highlight=False, soft_wrap=True)
    prefix = "" if label is None else f"{escape(label)}/"
    for job in queue.not_started:
        due = "starts" if queue.status == "running" else "was due"
        console.print(f"{prefix}{escape(job.job)}: not started (slot {job.start_slot}, {due} {job.starts_at})",
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
