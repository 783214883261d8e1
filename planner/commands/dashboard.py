"""`planner dashboard`: the runs, their spend and quotes in a browser, updating live.

The web app lives in :mod:`runtime.dashboard` (FastAPI on uvicorn, the ``dashboard`` extra),
imported inside :func:`handle`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape

TOKEN_ENV = "DANLU_DASHBOARD_TOKEN"

DESCRIPTION = """\
Serve a web dashboard of the runs under the runs directory ($DANLU_RUNS_DIR, else ./runs):
the runs list (status, work done, spend against budget and forecast, ETA against the
deadline, current pool), each run's page (progress, the spend curve with the budget and its
alert thresholds, the pool timeline with preemptions, notices and re-plans, the event log,
the final summary) and a quote page (a job from the runs directory or a pasted job.toml:
the plan, cost lines, alternatives and the cost/time frontier, the numbers of
`planner quote --json`). Pages update live (server-sent events) while runs progress.

The run directories are only read: a running controller is never blocked. It binds
127.0.0.1 by default; bound to any other address every request needs a token (--token, or
$DANLU_DASHBOARD_TOKEN, else a random one), and the address to open, with the token, is
printed once. Nothing is loaded from the internet. Needs pip install 'danlu[dashboard]'.
See docs/dashboard.md."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("dashboard", help="a live web dashboard of runs, spend and quotes",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs-dir", metavar="DIR", type=Path,
                   help="the directory holding the run directories (default: $DANLU_RUNS_DIR, else ./runs)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; any other address requires the token)")
    p.add_argument("--port", type=_port, default=8765, metavar="N", help="port to listen on (default 8765)")
    p.add_argument("--token", metavar="TOKEN",
                   help=f"the token requests must carry (default: ${TOKEN_ENV}; off loopback, a random one)")
    p.add_argument("--catalog", metavar="PATH", help="price catalog for the quote page, as `planner quote --catalog`")
    p.add_argument("--no-cache", action="store_true", help="quotes ignore the local price cache and imported catalogs")
    p.add_argument("--poll", type=float, default=1.0, metavar="SECONDS",
                   help="how often the live pages look for changes in the run directories (default 1)")
    p.set_defaults(handler=handle)


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError("a port is 1..65535")
    return value


def handle(args: argparse.Namespace, console: Console) -> int:
    from runtime.dashboard.app import DashboardConfig
    from runtime.dashboard.quotes import QuoteSettings
    from runtime.dashboard.security import is_loopback, new_token
    from runtime.dashboard.server import serve
    from runtime.errors import RuntimeFailure
    from runtime.reports.run_view import default_runs_dir

    runs_dir = args.runs_dir or default_runs_dir()
    if not runs_dir.is_dir():
        raise RuntimeFailure(f"{runs_dir}: no such runs directory. To fix: pass --runs-dir DIR, run from the "
                             "directory that holds runs/, or set DANLU_RUNS_DIR.")
    if args.poll <= 0:
        raise RuntimeFailure(f"--poll {args.poll:g}: must be a positive number of seconds.")
    loopback = is_loopback(args.host)
    token = args.token or os.environ.get(TOKEN_ENV) or (None if loopback else new_token())
    config = DashboardConfig(runs_dir=runs_dir, token=token, loopback=loopback, poll_s=args.poll,
                             quote=QuoteSettings(catalog=args.catalog, use_cache=not args.no_cache))
    def announce(port: int) -> None:
        shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
        url = f"http://{f'[{shown}]' if ':' in shown else shown}:{port}/"
        if token is not None and not (args.token or os.environ.get(TOKEN_ENV)):
            url += f"?token={token}"  # a random token: this line is the only place it is said
        console.print(f"danlu dashboard of {escape(str(runs_dir))} at {escape(url)}"
                      + ("" if loopback else " (every request needs the token)") + "; Ctrl-C stops it",
                      soft_wrap=True)
        console.file.flush()

    try:
        serve(config, args.host, args.port, announce=announce)
    except OSError as exc:
        raise RuntimeFailure(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}). To fix: pick another "
                             "--port, or a --host address of this machine.") from None
    return 0
