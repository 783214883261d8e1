"""`planner cancel RUN_DIR`: stop a run (or a whole queue) cleanly (checkpoint, release every node, summary).

A live controller gets SIGTERM -- only the process recorded in ``RUN_DIR/controller.json``,
verified by its pid *and* start time -- and stops as on Ctrl-C; this command waits until
it has. A run whose controller is gone is ended here: its nodes are released through the
provider (``release_stale``) and its summary written. Either way the run ends
"cancelled" and ``planner run --resume RUN_DIR`` continues it from its last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape

DESCRIPTION = """\
Stop a run cleanly: the workers checkpoint, every node is released and billing stops, and
the summary is written; the run ends "cancelled". A running controller (detached or in
another terminal) is sent SIGTERM -- the process recorded in RUN_DIR/controller.json,
checked by pid and start time, never by name -- and handles it like Ctrl-C; cancel waits
(up to --timeout) until it is done. If the controller is gone (killed, machine rebooted),
cancel releases the nodes it left itself. Continue a cancelled run later with
`planner run --resume RUN_DIR`. A queue's run directory (`planner run QUEUE.toml`) stops
the whole queue: every job checkpoints and releases its nodes; `planner run --resume`
of that directory finishes it. See docs/run.md and docs/capacity.md."""

EXIT_NOT_STOPPED = 1
LOCK_WAIT_S = 15.0
PROGRESS_EVERY_S = 5.0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("cancel", help="stop a run cleanly: checkpoint, release its nodes, write the summary",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                   help="the run directory `planner run` printed (a queue's: every job of the queue)")
    p.add_argument("--timeout", type=_positive, default=300.0, metavar="SECONDS",
                   help="how long to wait for the controller to stop (default 300; it goes on stopping after)")
    p.set_defaults(handler=handle)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def handle(args: argparse.Namespace, console: Console) -> int:
    from runtime.control.queue_record import is_queue_run
    from runtime.control.run_state import load_state

    run_dir: Path = args.run_dir
    if is_queue_run(run_dir):
        return _cancel_queue(run_dir, args.timeout, console)
    state = load_state(run_dir)
    if state.status != "running" and state.current is not None:
        console.print(f"{escape(str(run_dir))}: the run ended ({state.status}) but the release of launch "
                      f"{state.current.launch_id}'s nodes failed: releasing them now", soft_wrap=True)
        _end_orphan(run_dir, console, leftover=True)
        _outcome(run_dir, console, hint=False)
        return 0
    if state.status != "running":
        console.print(f"{escape(str(run_dir))}: the run already ended ({state.status}); nothing to cancel.",
                      soft_wrap=True)
        return 0
    if not _stop_run(run_dir, args.timeout, console):
        return EXIT_NOT_STOPPED
    _outcome(run_dir, console)
    return 0


def _stop_run(run_dir: Path, timeout_s: float, console: Console) -> bool:
    """End the running run in ``run_dir``: SIGTERM its live controller and wait for it, or end it here
    when its controller is gone; False when the controller had not stopped after ``timeout_s``."""
    from runtime.control import detach
    from runtime.control.run_state import load_state

    live = detach.liveness(run_dir)
    if live.record is not None and live.other_host:
        raise detach.DetachError(
            f"{run_dir}: its controller runs on {live.record.host} (pid {live.record.pid}); run `planner cancel` "
            "there."
        )
    if live.alive and live.record is not None and detach.signal_controller(live.record, signal.SIGTERM):
        console.print(f"asked the controller (pid {live.record.pid}) to stop: the workers checkpoint, then every "
                      f"node is released ({escape(str(run_dir))})", soft_wrap=True)
        if not _wait(live.record, timeout_s, console, lambda: _last_event(run_dir)):
            console.print(f"[red]the controller (pid {live.record.pid}) has not stopped after {timeout_s:g} s[/]; "
                          f"it goes on stopping. Watch it with `planner logs {escape(str(run_dir))} --follow`, or "
                          "cancel again later.")
            return False
        if load_state(run_dir).status == "running":  # it died before ending the run: end it here
            _end_orphan(run_dir, console)
    else:
        _end_orphan(run_dir, console)
    return True


def _cancel_queue(run_root: Path, timeout_s: float, console: Console) -> int:
    """`planner cancel QUEUE_RUN`: SIGTERM the queue's process, which stops every job at a checkpoint
    (runtime.control.queue_run); then end here each job still "running" (the process was gone, or
    died while it stopped) as for one run whose controller is gone."""
    from runtime.control import detach, queue_record
    from runtime.control.run_state import STATE_FILE, load_state
    from runtime.reports.queue_view import load_queue

    record = queue_record.read(run_root)
    live = detach.liveness(run_root)
    if live.record is not None and live.other_host:
        raise detach.DetachError(f"{run_root}: its queue runs on {live.record.host} (pid {live.record.pid}); run "
                                 "`planner cancel` there.")
    started = [job.name for job in record.jobs if (run_root / job.name / STATE_FILE).exists()]
    ended = load_queue(run_root).status
    if ended in ("completed", "incomplete") and all(load_state(run_root / n).status != "running" for n in started):
        console.print(f"{escape(str(run_root))}: the queue already ended ({ended}); nothing to cancel.",
                      soft_wrap=True)
        return 0
    if live.alive and live.record is not None and detach.signal_controller(live.record, signal.SIGTERM):
        console.print(f"asked the queue (pid {live.record.pid}) to stop: every job's workers checkpoint, then "
                      "their nodes are released", soft_wrap=True)

        def progress() -> str:
            return "; ".join(f"{name}: {_last_event(run_root / name)}" for name in started)

        if not _wait(live.record, timeout_s, console, progress):
            console.print(f"[red]the queue (pid {live.record.pid}) has not stopped after {timeout_s:g} s[/]; it goes "
                          "on stopping. Cancel again later.")
            return EXIT_NOT_STOPPED
        started = [job.name for job in record.jobs if (run_root / job.name / STATE_FILE).exists()]
    for name in started:
        # still running: its controller was the queue's process, gone now, or a resume of this job alone
        if load_state(run_root / name).status == "running" and not _stop_run(run_root / name, timeout_s, console):
            return EXIT_NOT_STOPPED
    left = False  # a job the resume would run: not started, or stopped before it ended
    for job in record.jobs:
        if job.name in started:
            _outcome(run_root / job.name, console, hint=False)
            left = left or load_state(run_root / job.name).status == "cancelled"
        else:
            console.print(f"{escape(job.name)}: not started", soft_wrap=True)
            left = True
    if left:
        console.print(f"continue the queue with `planner run --resume {escape(str(run_root))}`", soft_wrap=True)
    return 0


def _wait(record, timeout_s: float, console: Console, describe: Callable[[], str]) -> bool:
    """Wait until the controller has exited, saying what it does every few seconds; False on timeout.

    Its summary comes before its exit (the alert outbox is flushed last): cancel returns only
    when nothing of the run is running any more.
    """
    from runtime.control import detach

    began = time.monotonic()
    said = began
    while detach.is_alive(record):
        now = time.monotonic()
        if now - began > timeout_s:
            return False
        if now - said >= PROGRESS_EVERY_S:
            said = now
            console.print(f"  stopping ({now - began:.0f} s): {escape(describe())}")
        time.sleep(0.2)
    return True


def _last_event(run_dir: Path) -> str:
    try:
        lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
        record = json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        return "?"
    fields = ", ".join(f"{k}={v}" for k, v in record.items() if k in ("node", "launch", "action", "status", "reason"))
    return f"{record.get('event', '?')}" + (f" ({fields})" if fields else "")


def _end_orphan(run_dir: Path, console: Console, *, leftover: bool = False) -> None:
    """The controller is gone: release what it left through the provider and end the run (``leftover``: a
    run that ended without its nodes released keeps its status)."""
    from runtime.control import detach
    from runtime.control.controller import Controller

    if not leftover:
        console.print("the run's controller is gone: releasing its nodes and ending the run here", soft_wrap=True)
    lock = detach.ControllerLock(run_dir)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:  # a controller killed a moment ago may not have let go of the lock yet
        try:
            lock.acquire()
            break
        except detach.ControllerAlive:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
    with lock:  # no controller may start on it meanwhile
        Controller.open(run_dir, leftover=leftover).cancel("cancelled (planner cancel; its controller was gone)")


def _outcome(run_dir: Path, console: Console, *, hint: bool = True) -> None:
    from runtime.control.run_state import load_state

    state = load_state(run_dir)
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        summary = {}
    cost = f", ${summary['cost_usd']:,.4f} spent" if "cost_usd" in summary else ""
    console.print(f"{escape(str(run_dir))}: {state.status} at step {state.steps}{cost}; every node released.",
                  soft_wrap=True)
    if hint and state.status == "cancelled":
        console.print(f"continue it with `planner run --resume {escape(str(run_dir))}`", soft_wrap=True)
