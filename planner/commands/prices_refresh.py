"""`planner prices refresh`: fetch current prices from the clouds into the local cache.

Added under ``planner prices`` by :mod:`planner.commands.prices`.  Credentials come
from each SDK's standard chain (boto3's, ``DefaultAzureCredential``, Application
Default Credentials) and are never printed.  Exit codes: 0 when everything was
fetched; 1 when some regions or clouds failed (what was fetched is stored and the
failures are listed); 2 when nothing could be fetched (one line per cloud with the
fix).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from pricing import refresh as live
from pricing.cache import PriceCache, default_cache_path
from pricing.errors import PricingError

EXIT_PARTIAL = 1
MAX_WARNINGS_SHOWN = 20


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``refresh`` to the sub-commands of ``planner prices``."""
    parser = subparsers.add_parser(
        "refresh",
        help="fetch current prices from the AWS, Azure and GCP APIs into the local cache",
        description=(
            "Fetch GPU prices (on-demand, spot, 1y/3y reserved or committed) and GPU facts from the clouds' "
            "APIs and store them in the local price cache, which 'planner quote' prefers over the embedded "
            "snapshot when it is fresher. Credentials come from each SDK's standard chain: AWS profiles or "
            "environment variables, 'az login' or AZURE_* variables with AZURE_SUBSCRIPTION_ID, "
            "'gcloud auth application-default login' with GOOGLE_CLOUD_PROJECT. Regions that fail keep their "
            "previous prices. Exit code 0: all fetched; 1: some regions or clouds failed; 2: nothing fetched."
        ),
    )
    parser.add_argument(
        "--cloud",
        action="append",
        choices=live.CLOUDS,
        metavar="CLOUD",
        help=f"one of {', '.join(live.CLOUDS)}; repeatable (default: all)",
    )
    parser.add_argument(
        "--region",
        action="append",
        metavar="REGION",
        help="only this region, in the cloud's own naming (us-east-1, eastus, us-central1); "
        "repeatable; needs exactly one --cloud (default: every region the account sees)",
    )
    parser.add_argument(
        "--cache",
        metavar="PATH",
        help="the cache file (default: prices.sqlite3 in $DANLU_DATA_DIR or the user data dir)",
    )
    parser.add_argument("--profile", metavar="NAME", help="AWS: a named profile (default: boto3's chain)")
    parser.add_argument("--subscription", metavar="ID", help="Azure: subscription id (default: $AZURE_SUBSCRIPTION_ID)")
    parser.add_argument(
        "--project",
        metavar="ID",
        help="GCP: project to list zones in (default: $GOOGLE_CLOUD_PROJECT or the ADC project)",
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    clouds = list(dict.fromkeys(args.cloud or live.CLOUDS))
    if args.region and len(clouds) != 1:
        raise PricingError("--region names one cloud's regions: give exactly one --cloud with it")
    options = {
        "aws": {"profile": args.profile},
        "azure": {"subscription": args.subscription},
        "gcp": {"project": args.project},
    }
    cache = PriceCache(Path(args.cache).expanduser() if args.cache else default_cache_path())
    with _ProgressBar(quiet=args.json) as progress_for:
        report = live.refresh(
            clouds,
            cache,
            regions=args.region,
            make_fetcher=lambda cloud: live.create_fetcher(cloud, **options[cloud]),
            progress_for=progress_for,
        )
    if len(report.failed_clouds) == len(report.results):
        # Each message already names its cloud and the fix: one line per distinct failure.
        raise PricingError("\n".join(dict.fromkeys(e.message for r in report.results for e in r.errors)))
    if args.json:
        console.out(json.dumps(report_json(report), indent=1), highlight=False)
    else:
        _print_report(report, console)
    return 0 if report.complete else EXIT_PARTIAL


def report_json(report: live.RefreshReport) -> dict[str, object]:
    """The outcome of a refresh as a JSON-ready dict."""
    return {
        "cache": str(report.cache_path),
        "stored_rows": report.stored_rows,
        "complete": report.complete,
        "clouds": [
            {
                "cloud": r.cloud,
                "fetched_at": r.fetched_at.isoformat(),
                "regions": list(r.regions),
                "offerings": len(r.offerings),
                "errors": [{"region": e.region, "message": e.message} for e in r.errors],
                "warnings": list(r.warnings),
            }
            for r in report.results
        ],
    }


def _print_report(report: live.RefreshReport, console: Console) -> None:
    table = Table(title=f"Prices stored in {escape(str(report.cache_path))}", title_justify="left", header_style="bold")
    for column, justify in (
        ("cloud", "left"),
        ("regions fetched", "right"),
        ("regions failed", "right"),
        ("offerings", "right"),
        ("warnings", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for r in report.results:
        table.add_row(
            r.cloud,
            str(len(r.regions)),
            str(len({e.region for e in r.errors})),
            str(len(r.offerings)),
            str(len(r.warnings)),
        )
    console.print(table)
    for r in report.results:
        for message in dict.fromkeys(f"{e.region}: {e.message}" for e in r.errors):
            console.print(f"[red]failed[/] {escape(message)}")
    warnings = [w for r in report.results for w in r.warnings]
    for warning in warnings[:MAX_WARNINGS_SHOWN]:
        console.print(f"[yellow]warning[/] {escape(warning)}")
    if len(warnings) > MAX_WARNINGS_SHOWN:
        console.print(f"... {len(warnings) - MAX_WARNINGS_SHOWN} more warnings; --json lists them all")


class _ProgressBar:
    """A rich progress bar on stderr with one task per cloud (none when quiet or not a terminal)."""

    def __init__(self, *, quiet: bool):
        console = Console(stderr=True)
        # Off the terminal (logs, CI, pipes) a bar would only print its last frame: leave it out.
        self._progress = None if quiet or not console.is_terminal else Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=False,
        )  # fmt: skip

    def __enter__(self) -> Callable[[str], live.ProgressCallback | None]:
        progress = self._progress
        if progress is None:
            return lambda cloud: None
        progress.start()

        def for_cloud(cloud: str) -> live.ProgressCallback:
            task = progress.add_task(cloud, total=None)

            def update(message: str, done: int, total: int) -> None:
                progress.update(task, description=escape(message), completed=done, total=total or None)

            return update

        return for_cloud

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
