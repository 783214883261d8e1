"""The `planner` command line: the one place that turns errors into messages and exit codes.

Each sub-command lives in ``planner/commands/<name>.py`` and exposes
``add_parser(subparsers)`` and ``handle(args, console) -> int``.  Handlers raise the
packages' own exceptions; this module catches them once, prints one clear message and
exits 2, so a user never sees a traceback for bad input.

Start-up is lazy: ``planner --version`` and ``planner --help`` import no sub-command
(the top-level help lists :data:`SUMMARIES`), and ``planner quote ...`` imports only
``planner.commands.quote``; rich is imported after parsing, and only by commands that print
with it (``planner quote --json`` does not).  Every sub-command imports
pydantic, numpy or the optimizer only inside its handler or its own module, so a
command never pays for another's dependencies (``bench/quote.py`` measures it).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import TYPE_CHECKING

from danlu.extras import MissingExtra
from planner import __version__
from planner.errors import PlannerError
from pricing.errors import PricingError
from runtime.errors import RuntimeFailure

if TYPE_CHECKING:
    from rich.console import Console

# Sub-commands in the order --help lists them; imported lazily so `planner quote`
# never pays for torch or the cloud SDKs.
COMMANDS = ("quote", "run", "status", "logs", "cancel", "report", "dashboard", "alerts", "gc", "prices", "bench",
            "simulate", "capacity")

SUMMARIES = {
    "quote": "plan a job: instance types, regions, nodes and the spot/on-demand/reserved mix",
    "run": "run a job: provision its plan, train under torchrun, recover from preemptions",
    "status": "where a run stands (or every run): progress, spend, forecast, ETA",
    "logs": "print (and --follow) the log of a detached run's controller",
    "cancel": "stop a run cleanly: checkpoint, release its nodes, write the summary",
    "report": "a run's timeline of pools, preemptions and re-plans; PNG and HTML",
    "dashboard": "a live web dashboard of runs, spend and quotes",
    "alerts": "deliver a run's queued budget alerts (planner alerts flush RUN_DIR)",
    "gc": "find and delete cloud instances of ended or deleted runs",
    "prices": "show, import and refresh GPU prices",
    "bench": "show the training-throughput table (per GPU, with sources)",
    "simulate": "replay spot policies on real availability traces",
    "capacity": "plan reservations (1y/3y) vs on-demand and spot for a team's demand; replay online",
}
"""Each sub-command's one-line help, as its own ``add_parser`` gives it (tests/test_cli_help.py
checks they agree): the top-level ``--help`` lists these without importing any sub-command.
A command missing here is imported to build its entry (correct, only slower)."""

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


# runtime.errors imports nothing heavy, so the CLI can name its base class up front.
USER_ERRORS = (PlannerError, PricingError, RuntimeFailure, MissingExtra)


def _chosen_command(argv: list[str] | None) -> str | None:
    """The sub-command ``argv`` names: its first word that is not an option (the top level has
    only ``--help`` and ``--version``, which take no value)."""
    words = sys.argv[1:] if argv is None else argv
    return next((w for w in words if not w.startswith("-")), None)


def build_parser(argv: list[str] | None = None, *, full: bool = False) -> argparse.ArgumentParser:
    """The parser for ``argv``: the named sub-command in full, the others as their one-line
    summaries (``full``: every sub-command in full, as the tests that inspect them need)."""
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
    chosen = _chosen_command(argv)
    for name in COMMANDS:
        if full or name == chosen or name not in SUMMARIES:
            importlib.import_module(f"planner.commands.{name}").add_parser(subparsers)
        else:  # listed by --help; never parsed (argv names another command)
            subparsers.add_parser(name, help=SUMMARIES[name], add_help=False)
    return parser


def output_width() -> int | None:
    """The terminal's width; piped output gets COLUMNS when set (a tmux pane, a user who asks) or 120,
    a readable table width instead of rich's 80-column fallback."""
    if sys.stdout.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else 120


def make_console() -> Console:
    """The console a command prints on (rich is imported here, after parsing: --help and --version
    never pay for it)."""
    from rich.console import Console

    return Console(stderr=False, highlight=False, width=output_width())


def _error(text: str) -> None:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(text)}")


class _MessagesOnly(logging.StreamHandler):
    """Logging's handler of last resort (what prints a library's warnings when nothing is configured)
    without the tracebacks it would add: gcsfs, say, logs every failed retry with one, ahead of the
    one clear error this module prints."""

    def __init__(self) -> None:
        super().__init__()
        self.setLevel(logging.WARNING)

    @property  # type: ignore[override]
    def stream(self):  # the stderr of the moment, as logging's own last resort (tests swap it)
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass

    def format(self, record: logging.LogRecord) -> str:
        ours = record.name.split(".")[0] in ("planner", "pricing", "runtime", "danlu")
        return f"{record.levelname.lower()}{'' if ours else f' ({record.name})'}: {record.getMessage()}"


def quiet_library_tracebacks() -> None:
    """Warnings and errors that libraries log reach the terminal as one line each, never a traceback."""
    logging.lastResort = _MessagesOnly()


def main(argv: list[str] | None = None) -> int:
    quiet_library_tracebacks()
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    # A command that sets ``console=False`` makes its own when it prints tables (see quote: its
    # --json output never imports rich).
    console = make_console() if getattr(args, "console", True) else None
    try:
        return int(args.handler(args, console) or EXIT_OK)
    except USER_ERRORS as exc:
        _error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
