"""The `planner` command line: the one place that turns errors into messages and exit codes.

Each sub-command lives in ``planner/commands/<name>.py`` and exposes
``add_parser(subparsers)`` and ``handle(args, console) -> int``.  Handlers raise the
packages' own exceptions; this module catches them once, prints one clear message and
exits 2, so a user never sees a traceback for bad input.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from rich.console import Console
from rich.markup import escape

from danlu.extras import MissingExtra
from planner import __version__
from planner.errors import PlannerError
from pricing.errors import PricingError
from runtime.errors import RuntimeFailure

# Sub-commands in the order --help lists them; imported lazily so `planner quote`
# never pays for torch or the cloud SDKs.
COMMANDS = ("quote", "run", "status", "logs", "cancel", "report", "dashboard", "alerts", "gc", "prices", "bench",
            "simulate", "capacity")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


# runtime.errors imports nothing heavy, so the CLI can name its base class up front.
USER_ERRORS = (PlannerError, PricingError, RuntimeFailure, MissingExtra)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="planner",
        description=(
            "danlu: plan, run and account deep-learning training on GPU clouds. "
            "Quote the cheapest way to finish a job before its deadline, run it on spot "
            "capacity that survives preemption, and get budget alerts."
        ),
        epilog="Run 'planner COMMAND --help' for the options of each command.",
    )
    parser.add_argument("--version", action="version", version=f"danlu {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"planner.commands.{name}").add_parser(subparsers)
    return parser


def output_width() -> int | None:
    """The terminal's width; piped output gets COLUMNS when set (a tmux pane, a user who asks) or 120,
    a readable table width instead of rich's 80-column fallback."""
    if sys.stdout.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else 120


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    console = Console(stderr=False, highlight=False, width=output_width())
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        return int(args.handler(args, console) or EXIT_OK)
    except USER_ERRORS as exc:
        errors.print(f"[bold red]error:[/] {escape(str(exc))}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        errors.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
