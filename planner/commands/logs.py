"""`planner logs RUN_DIR [--follow]`: the output of a run's background controller, or of a queue's process."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console

DESCRIPTION = """\
Print the log of a run's background controller (RUN_DIR/controller.log, written by
`planner run --detach`): every plan, launch, notice, preemption and re-plan, and the
summary at the end. With --follow, keep printing what it adds until the controller exits.
A queue's run directory (`planner run QUEUE.toml --detach`) has one log for all its jobs, that
of the queue's process, followed until that process exits. With --follow the exit code is the
run's (the queue's) outcome, as `planner run` gives it: 0 completed, 1 ended otherwise or the
process died before the end. A run started in the foreground has
no controller log: its terminal showed the same lines, and `planner status RUN_DIR` /
`planner report RUN_DIR` read its events. See docs/run.md."""

POLL_S = 0.5
EXIT_CONTROLLER_GONE = 1
EXIT_NOT_COMPLETED = 1  # the run ended otherwise (failed, budget_cap, ...), as `planner run` exits


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("logs", help="print (and --follow) the log of a detached run's controller",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                   help="the run (or queue) directory `planner run --detach` printed")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines until the controller exits (Ctrl-C stops following, not the run)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    from runtime.control import detach
    from runtime.control.queue_record import is_queue_run
    from runtime.control.run_state import load_state
    from runtime.reports.queue_view import load_queue

    run_dir: Path = args.run_dir
    queue = is_queue_run(run_dir)
    if queue:
        load_queue(run_dir)  # a damaged queue record: say so, naming the fix
    else:
        load_state(run_dir)  # not a run: say so, naming the fix

    def going() -> bool:
        """Until the process exits: it still writes its outcome to the log after queue.json or summary.json."""
        live = detach.liveness(run_dir)
        if live.record is not None:
            return live.alive
        # A controller that has not recorded itself yet: the run state says whether to wait.
        return not queue and load_state(run_dir).status == "running"
    path = run_dir / detach.LOG_FILE
    try:
        log = path.open("rb")
    except FileNotFoundError:
        if not queue and is_queue_run(run_dir.parent):
            raise detach.DetachError(
                f"{path}: a queue's job has no log of its own; its queue's process writes every job's lines to "
                f"`planner logs {run_dir.parent}` (its events: `planner status {run_dir}`)."
            ) from None
        where = f"`planner status {run_dir}`" + ("" if queue else f", `planner report {run_dir}`")
        raise detach.DetachError(f"{path}: no controller log; the {'queue' if queue else 'run'} was not started with "
                                 f"--detach (its events: {where}).") from None
    out = sys.stdout.buffer
    with log:
        _copy(log, out)
        if not args.follow:
            return 0
        while going():
            if not _copy(log, out):
                time.sleep(POLL_S)
        _copy(log, out)  # what it wrote as it exited
    if queue and load_queue(run_dir).status == "stopped":
        console.print(f"the queue's process exited before the queue ended; finish it with "
                      f"`planner run --resume {run_dir}`", soft_wrap=True)
        return EXIT_CONTROLLER_GONE
    if queue:
        return 0 if load_queue(run_dir).status == "completed" else EXIT_NOT_COMPLETED
    status = load_state(run_dir).status
    if status == "running":
        console.print(f"the controller exited before the run ended; continue it with "
                      f"`planner run --resume {run_dir}`", soft_wrap=True)
        return EXIT_CONTROLLER_GONE
    # As `planner run` exits: `planner run --detach && planner logs RUN_DIR --follow` fails with the run.
    return 0 if status == "completed" else EXIT_NOT_COMPLETED


def _copy(log, out) -> bool:
    """Copy what the log holds beyond the last read; True when there was something."""
    data = log.read()
    if data:
        out.write(data)
        out.flush()
    return bool(data)
