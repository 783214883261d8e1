"""`planner run JOB`: execute a plan, survive preemptions, account every dollar.

The runtime is imported lazily (inside :func:`handle`), so `planner quote` and
`planner --help` never pay for it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import signal
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from planner.job import load_job
from planner.policy import REPLAN_TARGET
from planner.tables import Column, fitted_table

if TYPE_CHECKING:
    from runtime.control.controller import Controller

EXIT_NOT_COMPLETED = 1

_SHOWN = {
    "plan": "plan: {pool} (expected ${expected_cost_usd:.2f}, {expected_hours:.2f} h)",
    "decision": "policy {policy}: {choice} -- {reason}",
    "replan": "re-plan ({reason}): {pool}",
    "deadline_miss": "deadline miss ({action}): {reason}",
    "provision_failed": "no capacity for {pool}: {reason}",
    "launch": "launch {launch}: {pool}, world size {world_size}, from step {start_step}",
    "training": "launch {launch}: training from step {step}",
    "chaos": "chaos: reclaiming {node}",
    "notice": "notice on {node}: {cloud} {kind} ({detail})",
    "checkpoint_request": "asked the workers to {action}: {reason}",
    "launch_end": "launch {launch}: {outcome} at step {committed_step} ({reason}; {lost_steps} steps lost)",
    "preemption": "preempted: {pool} cools down; interruption estimate {prior_rate}/h -> {interruption_rate}/h",
    "phase_end": "phase end: {pool} is left for the rest of the run after {hours} h, at step {step}",
    "too_slow": "too slow for the deadline: {pool} {reason}",
    "held_start": "held capacity started: {pool} is left ({reason})",
    "failure": "failure {failures} of {max_restarts} allowed: {cause}",
    "gpus_unmatched": "launch {launch}: {message}",
    "steps_unmatched": "launch {launch}: {message}",
    "budget_cap": "budget cap: {reason}",
    "recovered": "recovered after a controller restart: released {stale_nodes}",
    "run_end": "run ended: {status}",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a job: provision its plan, train under torchrun, recover from preemptions",
        description=(
            "Quote the job (or take --plan), provision the chosen pool, run the training under torchrun on "
            "every node and follow it: on an interruption notice the workers checkpoint at once, the node is "
            "released and the job is re-planned with the work, budget and deadline that remain. Everything is "
            "recorded in the run directory (events.jsonl, ledger.sqlite, state.json, summary.json); "
            "`planner run --resume DIR` continues a run whose controller was killed, that was cancelled "
            "(Ctrl-C, `planner cancel`) or that failed (once its cause is fixed), and "
            "`planner run --resume QUEUE_RUN` finishes a queue's jobs. "
            "With --detach the controller runs in the background: follow it with "
            "`planner logs DIR --follow`, stop it with `planner cancel DIR`. One controller per run directory. "
            "See docs/run.md."
        ),
    )
    p.add_argument("job", metavar="JOB", nargs="?",
                   help="path of the job.toml file (omit with --resume), or of a queue file (QUEUE.toml, see "
                        "`planner capacity --queue`): its jobs run as scheduled, one run directory each")
    p.add_argument("--plan", metavar="PLAN.json",
                   help="follow this plan (`planner quote --json` output); one quoted for another job, or whose "
                        "first phase the job's constraints rule out, is refused")
    p.add_argument("--run-dir", metavar="DIR", help="where the run keeps its files (default runs/<job>-<time>)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue the run in RUN_DIR after its controller died, it was cancelled or it failed "
                        "(from its last committed checkpoint, with [run].max_restarts retries anew); a queue's run "
                        "directory finishes every job of the queue as it was scheduled")
    p.add_argument("--detach", action="store_true",
                   help="start the controller (for a queue: the queue's process) in the background and return "
                        "at once (its output goes to RUN_DIR/controller.log; see `planner logs`, `planner cancel`, "
                        "`planner status`)")
    p.add_argument("--budget-usd", type=float, metavar="USD",
                   help="with --resume: a larger budget, to finish a run the hard budget cap stopped (or one "
                        "cancelled, failed or still running)")
    p.add_argument("--deadline-in", type=float, metavar="HOURS",
                   help="with --resume: a new deadline, HOURS of the run's clock from now (later or sooner), to "
                        "finish a run that ended because no plan met its deadline (or one cancelled, failed or "
                        "still running)")
    p.add_argument("--held-from", metavar="JOB",
                   help="with --resume: take the held reservations ([[purchase.held]]) of JOB -- the run's job file, "
                        "edited -- for a reservation bought, extended or given up since the start; the run "
                        "re-plans on them. JOB must not change anything else")
    p.add_argument("--provider", metavar="NAME",
                   help="where nodes come from: a provider registered under the danlu.providers entry points "
                        "(default: the job's [run].provider; an unknown name lists the registered ones)")
    p.add_argument("--chaos", metavar="SPEC", action="append", default=[],
                   help="inject preemptions and capacity refusals (the provider carries them out): at=20s,45s; "
                        "rate=1/5m; trace=PATH; notice=gcp; seed=N; node=I; refuse=aws,on_demand -- clauses "
                        "separated by ';', the flag may repeat")
    p.add_argument("--time-scale", type=_positive, default=1.0, metavar="FACTOR",
                   help="simulated seconds per real second for billing, deadlines and notice lead times "
                        "(local provider; default 1)")
    p.add_argument("--policy", default="danlu", choices=("on_demand", "greedy", "uniform_progress", "danlu"),
                   help="spot/on-demand switching policy after a preemption (default danlu)")
    p.add_argument("--catalog", metavar="PATH", help="price catalog, as for `planner quote`")
    p.add_argument("--no-cache", action="store_true", help="ignore the local price cache and imported catalogs")
    p.add_argument("--cooldown", type=_positive, default=30.0, metavar="MINUTES",
                   help="simulated minutes a preempted spot pool is left out of re-plans (default 30)")
    p.add_argument("--rdzv-timeout", type=_positive, default=60.0, metavar="SECONDS",
                   help="how long nodes wait for each other at rendezvous (default 60)")
    p.add_argument("--json", action="store_true", help="print summary.json at the end instead of a table")
    p.set_defaults(handler=handle)


def _choice(target: str | None) -> str:
    """What a policy decision means for the run: a spot pool id only says "spot" -- the re-plan
    that follows chooses the pool (and may choose another spot pool than the policy looked at)."""
    if target is None:
        return "wait for spot"
    if target in ("on_demand", "cluster"):
        return target
    if target == REPLAN_TARGET:
        return "re-plan over every pool the job allows"
    return "spot (the re-plan chooses the pool)"


def _apply_held(update: Any, console: Console) -> None:
    """Apply a checked `--held-from` (:mod:`runtime.control.held_update`) and say what it changed."""
    from runtime.control import held_update

    held_update.apply(update)
    if not update.changed:
        console.print(f"held reservations: {update.source} lists the ones the run has; nothing changed", soft_wrap=True)
    for verb, entries in (("added", update.added), ("removed", update.removed)):
        for entry in entries:
            console.print(f"held reservation {verb}: {escape(entry)}", soft_wrap=True)
    for line in update.kept:
        console.print(f"the run keeps its {escape(line)}", soft_wrap=True)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def handle(args: argparse.Namespace, console: Console) -> int:
    # Everything a run writes (state, spend, logs, checkpoints, its local nodes' files) is the
    # team's own, whatever umask the shell has.
    umask = os.umask(0o077)
    os.umask(umask | 0o077)
    try:
        return _run(args, console)
    finally:
        os.umask(umask)


def _run(args: argparse.Namespace, console: Console) -> int:
    from danlu.extras import require, require_installed
    from runtime.control import detach, held_update, queue_held
    from runtime.control.chaos import parse_chaos
    from runtime.control.controller import Controller, Tuning
    from runtime.control.run_start import new_state, preflight, preflight_resume
    from runtime.control.reopen import (
        check_budget_value,
        check_deadline_value,
        move_deadline,
        raise_budget,
        reopen_stopped,
    )
    from runtime.control.run_state import load_state
    from runtime.errors import RuntimeFailure

    # The controller reads checkpoints through fsspec; the nodes it starts need torch, which the controller
    # only checks for: importing it would cost every `planner run` a second and its controller ~180 MB.
    require("fsspec", "train", feature="planner run")
    require_installed("torch", "train", feature="planner run")
    tuning = Tuning(cooldown_minutes=args.cooldown, rdzv_timeout_s=args.rdzv_timeout)
    lock: detach.ControllerLock | None = None
    queue: queue_held.QueueHeld | None = None  # the queue whose held nodes a resumed job of it shares
    queue_lock: detach.ControllerLock | None = None
    if args.resume:
        if args.job or args.plan or args.chaos or args.provider:
            raise RuntimeFailure(
                "--resume continues a run as it was started; do not pass JOB, --plan, --chaos or --provider"
            )
        run_dir = Path(args.resume)
        from runtime.control.queue_record import is_queue_run

        if is_queue_run(run_dir):  # a queue's run directory: finish every job of it
            from planner.commands.run_queue import resume_queue_command

            return resume_queue_command(args, console, tuning)
        if args.budget_usd is not None:
            check_budget_value(args.budget_usd)
        if args.deadline_in is not None:
            check_deadline_value(args.deadline_in)
        load_state(run_dir)  # no run there: say so before anything else
        # One controller per run: refused here (exit 2) while another holds the run's lock, and
        # taken before the state changes, so two resumes cannot both reopen it.
        lock = detach.ControllerLock(run_dir).acquire()
        try:
            # Its script gone: refused before it is reopened.
            preflight_resume(run_dir, load_state(run_dir), new_terms=any(
                flag is not None for flag in (args.budget_usd, args.deadline_in, args.held_from)))
            # Checked before anything is written, applied after the budget (which refuses a smaller one).
            held = None if args.held_from is None else held_update.check(run_dir, args.held_from)
            queue = queue_held.read(run_dir)
            if queue is not None:
                queue_lock = queue_held.lock_queue(run_dir.parent, queue.queue)
            if args.budget_usd is not None:
                raise_budget(run_dir, args.budget_usd)
            if held is not None:
                _apply_held(held, console)
            if args.deadline_in is not None:  # after the budget: a run the cap stopped is reopened by that
                move_deadline(run_dir, args.deadline_in)
            if (ended := reopen_stopped(run_dir)) is not None:
                status, cause = ended
                console.print(f"continuing the {status} run from step {load_state(run_dir).steps}"
                              + (f" (it ended: {cause})" if status == "failed" and cause else ""), soft_wrap=True)
            if args.detach:
                lock.release()  # the background controller takes both
                if queue_lock is not None:
                    queue_lock.release()
        except BaseException:
            lock.release()
            if queue_lock is not None:
                queue_lock.release()
            raise
    else:
        if args.budget_usd is not None:
            raise RuntimeFailure("--budget-usd goes with --resume RUN_DIR; for a new run set [constraints] budget_usd")
        if args.deadline_in is not None:
            raise RuntimeFailure("--deadline-in goes with --resume RUN_DIR; for a new run set [constraints] "
                                 "deadline_hours")
        if args.held_from is not None:
            raise RuntimeFailure("--held-from goes with --resume RUN_DIR; a new run takes the job's "
                                 "[[purchase.held]] as it is")
        if not args.job:
            raise RuntimeFailure("give a JOB file to run, or --resume RUN_DIR")
        from planner.capacity.queue_spec import is_queue_file

        if is_queue_file(args.job):  # a queue: scheduled, then each job runs through its own controller
            from planner.commands.run_queue import run_queue_command

            return run_queue_command(args, console, tuning)
        job = load_job(args.job)
        provider = args.provider or job.run.provider
        parse_chaos(args.chaos)  # a bad spec fails before anything starts
        # An unknown provider, options it does not take, a checkpoint dir its nodes cannot reach or a
        # script they will not find fail before anything is written.
        preflight(job, Path(args.job), provider)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path(args.run_dir or f"runs/{job.name}-{stamp}")
        new_state(job_path=Path(args.job), job=job, run_dir=run_dir, catalog=args.catalog, provider=provider,
                  time_scale=args.time_scale, policy=args.policy, chaos=args.chaos,
                  plan_path=Path(args.plan) if args.plan else None, use_cache=not args.no_cache)
    if args.detach:
        return detach_run(run_dir, args, console)
    if lock is None:
        lock = detach.ControllerLock(run_dir).acquire()
    with lock, queue_lock or contextlib.nullcontext():
        console.print(f"run directory: {run_dir}")
        view = _View(console)
        held = None if queue is None else queue.allotment()
        controller = Controller.open(run_dir, tuning=tuning, on_event=view.event, on_progress=view.progress,
                                     held=held)
        view.simulated = controller.state.time_scale != 1
        if view.simulated:
            console.print(f"times marked 'sim' are simulated ({controller.state.time_scale:g}x real time); "
                          "a notice's own times are wall clock")
        main_thread = threading.current_thread() is threading.main_thread()  # where signals can be handled
        previous = signal.signal(signal.SIGTERM, detach.on_sigterm) if main_thread else None  # `planner cancel`
        try:
            with view:
                summary = controller.run()
        except (OSError, sqlite3.Error) as exc:  # the run directory refused a write (read-only, full)
            raise RuntimeFailure(
                f"{run_dir}: the run directory could not be written ({type(exc).__name__}: {exc}); "
                f"{_released(controller, run_dir)} To fix: make it writable (and give it room), then "
                f"`planner run --resume {run_dir}`."
            ) from None
        except RuntimeFailure as exc:  # a cloud API that kept failing, say: the run ended "failed"
            if controller.state.current is None:
                raise
            raise RuntimeFailure(f"{exc}. {_released(controller, run_dir)}") from None
        except KeyboardInterrupt as exc:  # the controller checkpointed, released and wrote the summary
            summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
            _render_summary(summary, console)
            console.print(f"stopped at step {summary['steps']}; continue it with `planner run --resume {run_dir}`",
                          soft_wrap=True)  # a command to paste: never broken across lines
            return 143 if isinstance(exc, detach.Cancelled) else 130
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _render_summary(summary, console)
    return 0 if summary["status"] == "completed" else EXIT_NOT_COMPLETED


def _released(controller: Controller, run_dir: Path) -> str:
    """Whether the run's nodes were released when its controller stopped on an error, and if not, the fix."""
    current = controller.state.current
    if current is None:
        return "its nodes were released."
    return (f"The nodes of launch {current.launch_id} were not released and may still be billed: `planner cancel "
            f"{run_dir}` releases them (`planner gc` lists what runs left on a cloud).")


def detach_run(run_dir: Path, args: argparse.Namespace, console: Console, *, queue: bool = False) -> int:
    """Start the run's controller (``queue``: the queue's process) in the background, say where, return at once."""
    from runtime.control import detach

    extra = ["--cooldown", repr(args.cooldown), "--rdzv-timeout", repr(args.rdzv_timeout)]
    if args.json:
        extra.append("--json")
    record = detach.start_detached(run_dir, extra)
    if args.json:  # what was started, for a script; the background process's own --json goes to its log
        print(json.dumps({"run_dir": str(run_dir), "queue": queue, "pid": None if record is None else record.pid,
                          "log": str(run_dir / detach.LOG_FILE)}, indent=2))
        return 0
    where = f"pid {record.pid}" if record is not None else "still starting"
    console.print(f"{'queue' if queue else 'run'} directory: {run_dir}")
    console.print(f"{'queue' if queue else 'controller'}: in the background ({where}); its log: "
                  f"{run_dir / detach.LOG_FILE}", soft_wrap=True)
    console.print(f"  follow it:   planner logs {run_dir} --follow", soft_wrap=True)
    console.print(f"  where it is: planner status {run_dir}", soft_wrap=True)
    console.print(f"  stop it:     planner cancel {run_dir}   (continue later: planner run --resume {run_dir})",
                  soft_wrap=True)
    return 0


class _View:
    """Event lines always; a live status table when the console is a terminal."""

    def __init__(self, console: Console):
        self.console = console
        self.simulated = False  # a scaled run's event times are simulated: marked, so none reads as wall clock
        self.live = Live(console=console, refresh_per_second=4, transient=True) if console.is_terminal else None

    def __enter__(self) -> _View:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()

    def event(self, record: dict[str, Any]) -> None:
        template = _SHOWN.get(record["event"])
        if template is None:
            return
        if record["event"] in ("plan", "replan") and record.get("pool") is None:
            template = "no plan: {reason}"
        if record["event"] == "decision":
            target = record.get("target")
            reason = str(record.get("reason", ""))
            if _choice(target).startswith("spot ("):  # the pool the policy looked at is not the one the re-plan takes
                reason = reason.replace(f" in {target}", "")
            record = {**record, "choice": _choice(target), "reason": reason}
        try:
            text = template.format(**record)
        except (KeyError, ValueError):
            text = f"{record['event']}: {record}"
        when = dt.datetime.fromtimestamp(record["t"], dt.UTC).strftime("%H:%M:%S")
        if self.simulated:
            when = f"sim {when}"
            if record["event"] == "notice":
                text += " [wall clock]"
        self.console.print(f"[dim]{when}[/] {escape(text)}", highlight=False)

    def progress(self, p: Any) -> None:
        if self.live is None:
            return
        table = Table.grid(padding=(0, 2))
        done = p.work_done / p.work_total if p.work_total else 0.0
        table.add_row("work", f"{p.work_done:,.0f} / {p.work_total:,.0f} {p.unit} ({done:.0%})")
        if p.units_per_hour:
            table.add_row("throughput", f"{p.units_per_hour:,.1f} {p.unit}/h")
        spend = f"${p.spent_usd:,.4f}"
        if p.forecast_usd is not None:
            spend += f", forecast ${p.forecast_usd:,.4f}"
        if p.budget_usd:
            spend += f" of ${p.budget_usd:,.2f}"
        table.add_row("spend", spend)
        if p.eta is not None:
            eta = f"{(p.eta - p.now) / 3600:.2f} h"
            if p.deadline_at is not None:
                eta += f" (deadline in {(p.deadline_at - p.now) / 3600:.2f} h)"
            table.add_row("ETA", eta)
        table.add_row("pool", escape(f"{p.pool} ({p.launch}, {p.state})"))
        self.live.update(table)


def _render_summary(summary: dict[str, Any], console: Console) -> None:
    columns = [Column("pool"), Column("purchase"), Column("hours", "right", drop=2),
               Column("node-hours", "right", drop=1), Column("cost", "right")]
    rows = [[escape(pool["pool"]), pool["purchase"], f"{pool['hours']:.3f}", f"{pool['node_hours']:.3f}",
             f"${pool['cost_usd']:,.4f}"] for pool in summary["pools"]]
    console.print(fitted_table(columns, rows, width=console.width, title=f"{summary['job']}: {summary['status']}"))
    console.print(
        f"work {summary['work_done']:,.0f}/{summary['work_total']:,.0f} {summary['unit']}, "
        f"{summary['preemptions']} preemptions, {summary['replans']} re-plans, {summary['lost_steps']} steps lost, "
        f"${summary['cost_usd']:,.4f} in {summary['hours']:.3f} h; world sizes {summary['world_sizes']}"
    )
    if summary.get("cause"):
        console.print(f"cause: {escape(summary['cause'])}")
    if summary.get("final_checkpoint"):
        console.print(f"final checkpoint: {summary['final_checkpoint']}")
