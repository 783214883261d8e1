"""`planner prices`: look at the price catalog and bring in other catalogs.

``prices show`` lists offerings cheapest GPU-hour first, as a table or ``--json``;
``prices import --format skypilot PATH`` reads a SkyPilot catalog directory, checks it,
and stores it as an offerings CSV in danlu's data directory, where ``planner quote`` and
``prices show`` merge it over the embedded snapshot.  ``prices refresh`` (live prices)
is added by :mod:`planner.commands.prices_refresh` when that module is installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.errors import PlannerError
from planner.tables import Column, fitted_table
from pricing.catalog import PURCHASE_OPTIONS, Catalog, CatalogFilter, Offering
from pricing.embedded_catalog import imported_dir, write_offerings_csv
from pricing.errors import CatalogFormatError
from pricing.risk import interruption_rate
from pricing.skypilot import scan_skypilot_catalog
from pricing.sources import resolve_catalog

try:
    from planner.commands import prices_refresh
except ImportError:
    prices_refresh = None

DEFAULT_TABLE_ROWS = 50


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "prices",
        help="show, import and refresh GPU prices",
        description="Show the GPU offerings danlu knows (embedded snapshot, imports, live cache), "
        "import a SkyPilot catalog, or refresh prices from the clouds.",
    )
    parser.set_defaults(handler=lambda args, console: _usage(parser, console))
    sub = parser.add_subparsers(dest="prices_command", metavar="ACTION")

    show = sub.add_parser(
        "show",
        help="list offerings, cheapest GPU-hour first",
        description="List GPU offerings sorted by price per GPU-hour (on-demand, or the --purchase option). "
        "Without --catalog: the embedded snapshot with imported catalogs and cached live prices over it.",
    )
    show.add_argument("--catalog", metavar="PATH",
                      help="a SkyPilot catalog directory (<cloud>/vms.csv) or an offerings .csv file")
    show.add_argument("--gpu", action="append", default=[], metavar="G",
                      help="only this GPU (canonical name such as A100, A100-80GB, H100); repeatable")
    show.add_argument("--cloud", action="append", default=[], metavar="C", help="only this cloud; repeatable")
    show.add_argument("--region", action="append", default=[], metavar="GLOB",
                      help="only regions matching this glob, e.g. 'us-*'; repeatable")
    show.add_argument("--purchase", choices=PURCHASE_OPTIONS,
                      help="only offerings sold this way, sorted by that price (default: sort by on-demand)")
    show.add_argument("--limit", type=_count, metavar="N",
                      help=f"at most N rows (default: {DEFAULT_TABLE_ROWS} in the table, all with --json; 0 = all)")
    show.add_argument("--json", action="store_true", help="print a JSON list of offerings instead of a table")
    show.set_defaults(handler=handle)

    imp = sub.add_parser(
        "import",
        help="import a SkyPilot catalog directory",
        description="Read a SkyPilot v8 catalog directory (<cloud>/vms.csv, e.g. ~/.sky/catalogs/v8), check it, "
        "and store its GPU offerings as an offerings CSV that quotes and 'prices show' merge over the "
        "embedded snapshot.  The store is $DANLU_DATA_DIR/imported (default: the platform's user data dir).",
    )
    imp.add_argument("path", metavar="PATH", help="the catalog directory")
    imp.add_argument("--format", choices=("skypilot",), default="skypilot", help="catalog format (default: skypilot)")
    imp.add_argument("--into", metavar="DIR", help="write the offerings CSV here instead of the data directory")
    imp.add_argument("--as-of", type=_date, metavar="YYYY-MM-DD",
                     help="the date the catalog's prices stand for (default: the documented date of a known "
                     "snapshot, else today)")
    imp.set_defaults(handler=handle)

    if prices_refresh is not None:
        prices_refresh.add_parser(sub)


def handle(args: argparse.Namespace, console: Console) -> int:
    if args.prices_command == "import":
        return _import(args, console)
    return _show(args, console)


def _usage(parser: argparse.ArgumentParser, console: Console) -> int:
    console.print(escape(parser.format_help()))
    return 2


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return value


def _known(given: list[str], known: tuple[str, ...], flag: str, origin: str) -> None:
    """A name the catalog has never heard of is a typo, not an empty result."""
    lower = {k.lower() for k in known}
    unknown = [g for g in given if g.lower() not in lower]
    if unknown:
        raise PlannerError(f"{flag} {', '.join(unknown)}: not in the catalog ({origin}); known: {', '.join(known)}")


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date like 2026-11-30") from None


def _show(args: argparse.Namespace, console: Console) -> int:
    catalog = resolve_catalog(args.catalog)
    _known(args.cloud, catalog.clouds, "--cloud", catalog.origin)
    _known(args.gpu, catalog.gpus, "--gpu", catalog.origin)
    rows = select(catalog, gpus=args.gpu, clouds=args.cloud, regions=args.region, purchase=args.purchase)
    limit = args.limit if args.limit is not None else (0 if args.json else DEFAULT_TABLE_ROWS)
    shown = rows[:limit] if limit > 0 else rows
    if args.json:
        console.out(json.dumps([offering_json(o) for o in shown], indent=1), highlight=False)
        return 0
    if not rows:
        console.print(f"No offerings match in {escape(catalog.origin)}.")
        return 0
    console.print(price_table(shown, args.purchase, title=catalog.origin, width=console.width))
    if len(shown) < len(rows):
        console.print(f"{len(rows) - len(shown)} more rows; use --limit 0 to see all, or filter with --gpu/--cloud/--region.")
    return 0


def select(
    catalog: Catalog,
    *,
    gpus: list[str] | None = None,
    clouds: list[str] | None = None,
    regions: list[str] | None = None,
    purchase: str | None = None,
) -> list[Offering]:
    """Offerings matching the filters, cheapest per GPU-hour first.

    With ``purchase`` only offerings sold that way, sorted by that price; otherwise
    sorted by on-demand price, with offerings that have none after them.
    """
    flt = CatalogFilter(clouds=tuple(c.lower() for c in clouds or ()), region_globs=tuple(regions or ()),
                        gpus=tuple(gpus or ()))
    rows = list(catalog.filter(flt))
    if purchase is not None:
        rows = [o for o in rows if o.price(purchase) is not None]
    return sorted(rows, key=lambda o: _sort_key(o, purchase))


def _sort_key(o: Offering, purchase: str | None) -> tuple[bool, float, str, str, str]:
    per_gpu = _per_gpu(o, purchase)
    unpriced = o.on_demand is None and purchase is None
    return (unpriced, math.inf if per_gpu is None else per_gpu, o.cloud, o.location, o.instance_type)


def _per_gpu(o: Offering, purchase: str | None) -> float | None:
    """Hourly price per GPU of ``purchase``, or of the first option sold when ``None``."""
    options = (purchase,) if purchase else ("on_demand", "spot", "reserved_1y", "reserved_3y")
    price = next((p for p in map(o.price, options) if p is not None), None)
    return None if price is None else price / o.gpus_per_node


def offering_json(o: Offering) -> dict[str, object]:
    """An offering as a JSON object: its fields, with the date as an ISO string."""
    data = dataclasses.asdict(o)
    data["as_of"] = o.as_of.isoformat()
    return data


def price_table(rows: list[Offering], purchase: str | None, title: str, width: int | None = None) -> Table:
    """A rich table of offerings with their prices, the sort price per GPU-hour and spot risk.

    Nothing is ever clipped: where an instance type is sold (``cloud:region/zone``, as pool
    ids spell it), the instance type and the prices keep their full width; when the
    terminal is narrower than the table, less important columns are left out instead
    (the date, GPU memory, 3y and 1y prices, spot risk, GPUs, in that order). The 1y/3y columns
    appear only when some row has a value there, and a date shared by every row goes into
    the title instead of a column.
    """
    dates = sorted({o.as_of for o in rows})
    if len(dates) == 1:
        title = f"{title} — prices as of {dates[0].isoformat()}"
    columns: list[tuple[Column, Callable[[Offering], str]]] = [
        (Column("where"), lambda o: escape(f"{o.cloud}:{o.location}")),
        (Column("instance type"), lambda o: escape(o.instance_type)),
        (Column("GPU×n", drop=1), lambda o: f"{o.gpu}×{o.gpus_per_node}"),
        (Column("mem", drop=5), lambda o: f"{o.gpu_memory_gb:g}G"),
    ]
    for option, header in _PRICE_HEADERS.items():
        if option in ("on_demand", "spot") or any(o.price(option) is not None for o in rows):
            rank = {"reserved_1y": 3, "reserved_3y": 4}.get(option, 0)
            columns.append((Column(header, "right", rank),
                            lambda o, option=option: _money(o.price(option))))
    sort_header = "$/GPU-h" if purchase in (None, "on_demand") else f"$/GPU-h {_PRICE_HEADERS[purchase]}"
    columns.append((Column(sort_header, "right"), lambda o: _money(_per_gpu(o, purchase))))
    columns.append((Column("spot risk/h", drop=2), _risk))
    if len(dates) > 1:
        columns.append((Column("as of", drop=6), lambda o: o.as_of.isoformat()))
    return fitted_table([c for c, _ in columns], [[render(o) for _, render in columns] for o in rows], width=width,
                        title=escape(title))


_PRICE_HEADERS = {"on_demand": "on-demand", "spot": "spot", "reserved_1y": "1y", "reserved_3y": "3y"}


def _money(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.2f}" if value >= 10 else f"{value:.3f}"


def _risk(o: Offering) -> str:
    if o.spot is None:
        return ""
    if o.interruption_rate is not None:
        label = "measured"
    elif o.interruption_bucket:
        label = escape(o.interruption_bucket)
    else:
        label = "default"
    return f"{interruption_rate(o):.2f} {label}"


def _import(args: argparse.Namespace, console: Console) -> int:
    source = Path(args.path).expanduser()
    scan = scan_skypilot_catalog(source, as_of=args.as_of)
    if not scan.offerings:
        raise CatalogFormatError(
            f"{source}: no GPU offerings found in {len(scan.files)} file(s) "
            f"(skipped: {_counts(scan.skipped) or 'nothing'}); is this a SkyPilot catalog with GPU rows?"
        )
    target_dir = Path(args.into).expanduser() if args.into else imported_dir()
    target = write_offerings_csv(target_dir / f"skypilot-{_slug(source)}.csv", scan.offerings)

    table = Table(title=f"Imported {len(scan.offerings)} offerings from {escape(str(source))}",
                  title_justify="left", header_style="bold")
    for column in ("cloud", "rows", "regions", "GPUs", "as of", "source"):
        table.add_column(column)
    for cloud in sorted({o.cloud for o in scan.offerings}):
        mine = [o for o in scan.offerings if o.cloud == cloud]
        table.add_row(
            cloud, str(len(mine)), str(len({o.region for o in mine})),
            ", ".join(sorted({o.gpu for o in mine})),
            ", ".join(sorted({o.as_of.isoformat() for o in mine})), escape(mine[0].source),
        )
    console.print(table)
    if scan.skipped:
        console.print(f"Skipped rows: {escape(_counts(scan.skipped))}")
    for warning in scan.quarantined[:QUARANTINE_SHOWN]:
        console.print(f"[yellow]warning:[/] left out {escape(warning)}")
    if len(scan.quarantined) > QUARANTINE_SHOWN:
        console.print(f"[yellow]warning:[/] and {len(scan.quarantined) - QUARANTINE_SHOWN} more implausible rows")
    console.print(f"Wrote {escape(str(target))}")
    return 0


QUARANTINE_SHOWN = 10


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in counter.most_common())


def _slug(path: Path) -> str:
    name = path.resolve().name or "catalog"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "catalog"
