"""`planner alerts flush RUN_DIR`: deliver the budget alerts a run left in its outbox.

A run's alerts are queued in ``<run>/outbox`` before they are sent, so an SMTP outage
never loses one; a run that ended while the server was down leaves them there. This
command delivers them with the run's own ``[alerts]`` settings (credentials from
``DANLU_SMTP_USER`` / ``DANLU_SMTP_PASSWORD``, as for `planner run`). It is safe beside a
running controller: the outbox never sends a message twice.

`planner status` and `planner report` only read a run directory (they may run while a
controller writes it), so they do not deliver; they show how many alerts wait.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

EXIT_UNDELIVERED = 1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("alerts", help="deliver a run's queued budget alerts (planner alerts flush RUN_DIR)",
                              description=__doc__.split("\n\n", 1)[1].replace("``", ""),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    flush = actions.add_parser("flush", help="deliver the alerts queued in RUN_DIR/outbox now",
                               description="Deliver every alert still queued in RUN_DIR/outbox over the run's SMTP "
                                           "server, ignoring the retry backoff. Exit 0 when none is left queued, 1 "
                                           "when some could not be delivered (the error is shown).")
    flush.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run directory `planner run` printed")
    flush.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                       help="how long to wait for a delivery already in progress (default 30)")
    flush.set_defaults(handler=handle)
    p.set_defaults(handler=lambda args, console: _help(p, console))


def _help(parser: argparse.ArgumentParser, console: Console) -> int:
    parser.print_help()
    return 2


def handle(args: argparse.Namespace, console: Console) -> int:
    from runtime.accounting.alerts import AlertsConfig
    from runtime.accounting.mailer import Mailer, OutboxStatus
    from runtime.control.run_state import load_state

    state = load_state(args.run_dir)
    table = {k: v for k, v in (state.job.get("alerts") or {}).items() if v is not None}
    config = AlertsConfig.from_mapping(table, source=f"{args.run_dir}/state.json")
    outbox = args.run_dir / "outbox"
    if not outbox.is_dir():
        console.print(f"{escape(str(args.run_dir))}: no alerts were queued (no outbox).")
        return 0
    mailer = Mailer(config, outbox, background=False)
    try:
        before = {e.id: e.status for e in mailer.entries()}
        if mailer.target is None:
            console.print("The run has no smtp_url: its alerts are the .eml files in "
                          f"{escape(str(outbox))} ({len(before)}).")
            return 0
        left = mailer.flush(timeout_s=args.timeout)
        after = mailer.entries()
        delivered = sum(1 for e in after if e.status is OutboxStatus.SENT and before.get(e.id) is OutboxStatus.QUEUED)
        console.print(f"{delivered} alert(s) delivered to {escape(str(mailer.target))}; {left} still queued.")
        if left:
            errors = [e.last_error for e in after if e.status is OutboxStatus.QUEUED and e.last_error]
            console.print(f"last error: {escape(mailer.last_error or (errors[-1] if errors else 'unknown'))}")
            return EXIT_UNDELIVERED
        return 0
    finally:
        mailer.close()
