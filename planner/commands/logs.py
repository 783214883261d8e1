"""`planner logs RUN_DIR [--follow]`: the output of a run's background controller."""

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
A run started in the foreground has no controller log: its terminal showed the same lines,
and `planner status RUN_DIR` / `planner report RUN_DIR` read its events. See docs/run.md."""

POLL_S = 0.5
EXIT_CONTROLLER_GONE = 1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("logs", help="print (and --follow) the log of a detached run's controller",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run directory `planner run --detach` printed")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines until the controller exits (Ctrl-C stops following, not the run)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    from runtime.control import detach
    from runtime.control.run_state import load_state

    run_dir: Path = args.run_dir
    load_state(run_dir)  # not a run: say so, naming the fix
    path = run_dir / detach.LOG_FILE
    try:
        log = path.open("rb")
    except FileNotFoundError:
        raise detach.DetachError(
            f"{path}: no controller log; the run was not started with --detach (its events: `planner status "
            f"{run_dir}`, `planner report {run_dir}`)."
        ) from None
    out = sys.stdout.buffer
    with log:
        _copy(log, out)
        if not args.follow:
            return 0
        while True:
            live = detach.liveness(run_dir)
            # Without a record (a controller that has not started yet) the run state says whether to wait.
            going = live.alive if live.record is not None else load_state(run_dir).status == "running"
            if not going:
                _copy(log, out)  # what it wrote as it exited
                break
            if not _copy(log, out):
                time.sleep(POLL_S)
    state = load_state(run_dir)
    if state.status == "running":
        console.print(f"the controller exited before the run ended; continue it with "
                      f"`planner run --resume {run_dir}`", soft_wrap=True)
        return EXIT_CONTROLLER_GONE
    return 0


def _copy(log, out) -> bool:
    """Copy what the log holds beyond the last read; True when there was something."""
    data = log.read()
    if data:
        out.write(data)
        out.flush()
    return bool(data)
