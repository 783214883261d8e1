"""The catalogs danlu reads from disk: the embedded snapshot, offerings CSV files, imports.

An *offerings CSV* has exactly the fields of :class:`~pricing.catalog.Offering` as its
header, in order (``cloud,region,zone,...,as_of,source``); an empty cell is ``None``.
It is the format of the embedded snapshot (``pricing/embedded/offerings.csv``, compiled
by ``tools/build_embedded_catalog.py``) and of ``planner prices import``, whose files
land in :func:`imported_dir` and are merged over the snapshot by
:func:`load_local_catalog`.

``--catalog PATH`` on the command line means :func:`load_catalog_path`: a directory is
a SkyPilot catalog (``<cloud>/vms*.csv``), a ``.csv`` file is an offerings CSV.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import functools
import io
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import platformdirs

from danlu import atomic_file
from pricing.catalog import Catalog, Offering
from pricing.errors import CatalogFormatError
from pricing.plausible import conflict, implausible, strict_number

EMBEDDED_OFFERINGS = Path(__file__).resolve().parent / "embedded" / "offerings.csv"

OFFERING_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Offering))
"""The offerings CSV header: every :class:`Offering` field, in declaration order."""

_EMPTY: dict[str, Any] = {
    name: None for name in ("zone", "on_demand", "spot", "reserved_1y", "reserved_3y", "interruption_rate",
                            "interruption_bucket")
} | {"source": ""}
"""What an empty cell means per optional column; other columns are required."""


def _count(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError("must be at least 1")
    return number


def _amount(value: str) -> float:
    number = strict_number(value)
    if number < 0:
        raise ValueError("must be non-negative")
    return number


_PARSERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "gpus_per_node": (_count, "a whole number >= 1"),
    "as_of": (dt.date.fromisoformat, "an ISO date such as 2026-11-30"),
    **{name: (_amount, "a finite non-negative number") for name in (
        "gpu_memory_gb", "vcpus", "memory_gb", "on_demand", "spot", "reserved_1y", "reserved_3y", "interruption_rate")},
}
"""Parser and the expected form for every non-text column."""


def read_offerings_csv(path: str | Path) -> list[Offering]:
    """Offerings from an offerings CSV file; errors name the file, line and column.

    A row no cloud could sell (:func:`pricing.plausible.implausible`) or a second row of the
    same offering with other figures is refused: these files are written by tools, so a
    lie in one is a bug to fix, not a row to skip.
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        raise CatalogFormatError(f"{path}: not a regular file; give the path of an offerings .csv file")
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None or tuple(h.strip() for h in header) != OFFERING_COLUMNS:
                raise CatalogFormatError(
                    f"{path}:1: header must be exactly {','.join(OFFERING_COLUMNS)} (the Offering fields); "
                    f"got {','.join(header or [])!r}"
                )
            return _checked(path, [(reader.line_num, _offering(path, reader.line_num, row)) for row in reader if row])
    except OSError as exc:
        raise CatalogFormatError(f"{path}: cannot read the offerings CSV ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise CatalogFormatError(f"{path}: not UTF-8 text ({exc.reason}); re-save it as UTF-8") from None
    except csv.Error as exc:
        raise CatalogFormatError(f"{path}: {exc}; fix the CSV quoting") from None


def _checked(path: Path, rows: list[tuple[int, Offering]]) -> list[Offering]:
    today = dt.date.today()
    seen: dict[tuple[str, str, str | None, str], tuple[int, Offering]] = {}
    out: list[Offering] = []
    for line, o in rows:
        why = implausible(o, today=today)
        if why is not None:
            raise CatalogFormatError(f"{path}:{line}: {why}; fix or delete the row")
        first = seen.get(o.key)
        if first is not None:
            differ = conflict(first[1], o)
            if differ is not None:
                raise CatalogFormatError(f"{path}:{line}: a second row for {':'.join(filter(None, o.key))} "
                                         f"(line {first[0]}) with other figures ({differ}); keep one of them")
            continue
        seen[o.key] = (line, o)
        out.append(o)
    return out


def _offering(path: Path, line: int, row: list[str]) -> Offering:
    if len(row) != len(OFFERING_COLUMNS):
        raise CatalogFormatError(f"{path}:{line}: {len(row)} fields, but the header has {len(OFFERING_COLUMNS)}")
    values: dict[str, Any] = {}
    for column, cell in zip(OFFERING_COLUMNS, row):
        cell = cell.strip()
        if not cell:
            if column not in _EMPTY:
                raise CatalogFormatError(f"{path}:{line}: column {column!r} is empty; it is required")
            values[column] = _EMPTY[column]
        elif column in _PARSERS:
            parse, expected = _PARSERS[column]
            try:
                values[column] = parse(cell)
            except ValueError:
                raise CatalogFormatError(f"{path}:{line}: column {column!r}: {cell!r} is not {expected}") from None
        else:
            values[column] = cell
    return Offering(**values)


def write_offerings_csv(path: str | Path, offerings: Iterable[Offering]) -> Path:
    """Write ``offerings`` as an offerings CSV, atomically (see :mod:`danlu.atomic_file`)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(OFFERING_COLUMNS)
    for o in offerings:
        writer.writerow(_cell(getattr(o, column)) for column in OFFERING_COLUMNS)
    return atomic_file.write_text(path, buffer.getvalue())


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


@functools.lru_cache(maxsize=1)
def load_embedded_catalog() -> Catalog:
    """The snapshot shipped with danlu, origin ``"embedded snapshot <newest as_of>"``."""
    offerings = read_offerings_csv(EMBEDDED_OFFERINGS)
    newest = max(o.as_of for o in offerings)
    return Catalog.of(offerings, origin=f"embedded snapshot {newest.isoformat()}")


def load_catalog_path(path: str | Path) -> Catalog:
    """The catalog at ``path``: a SkyPilot catalog directory or an offerings ``.csv`` file."""
    path = Path(path).expanduser()
    if path.is_dir():
        from pricing.skypilot import read_skypilot_catalog  # its parsers load only for a SkyPilot catalog

        return read_skypilot_catalog(path)
    if path.is_file() and path.suffix.lower() == ".csv":
        return Catalog.of(read_offerings_csv(path), origin=str(path))
    if not path.exists():
        raise CatalogFormatError(f"{path}: no such file or directory; --catalog takes a SkyPilot catalog "
                                 "directory (<cloud>/vms.csv) or an offerings .csv file")
    raise CatalogFormatError(f"{path}: not a directory or a .csv file; --catalog takes a SkyPilot catalog "
                             "directory (<cloud>/vms.csv) or an offerings .csv file")


def data_dir() -> Path:
    """danlu's per-user data directory: ``$DANLU_DATA_DIR``, else the platform's user data dir."""
    override = os.environ.get("DANLU_DATA_DIR")
    return Path(override).expanduser() if override else Path(platformdirs.user_data_dir("danlu"))


def imported_dir() -> Path:
    """Where ``planner prices import`` writes offerings CSV files."""
    return data_dir() / "imported"


COMMITMENT_TOLERANCE = 0.005
"""A 1y/3y price stays attached to a row only while the row's on-demand price is within
0.5% of the one it was published against: a discount quoted against another list price
is not a price for this row."""


def load_local_catalog() -> Catalog:
    """The embedded snapshot with every imported offerings CSV merged over it.

    Imports are applied in file-name order; a row replaces the snapshot's row with the
    same (cloud, region, zone, instance type) unless it is older.  What an import cannot
    know is kept from the row it replaces (:func:`carry_over`): SkyPilot catalogs have no
    commitment prices and no interruption buckets.
    """
    catalog = load_embedded_catalog()
    folder = imported_dir()
    if folder.is_dir():
        for file in sorted(folder.glob("*.csv")):
            catalog = overlay(catalog, Catalog.of(read_offerings_csv(file), origin=f"import {file.name}"))
    return catalog


def overlay(base: Catalog, newer: Catalog, *, whole_regions: bool = False) -> Catalog:
    """``base`` with ``newer``'s rows merged over it, each keeping what it lacks from the row it replaces.

    With ``whole_regions`` (a live refresh lists everything a region sells), every older row
    of a (cloud, region) that ``newer`` covers is dropped, so types the cloud stopped selling
    and per-zone rows of a now regional price do not linger.
    """
    rows = {o.key: o for o in base}
    by_type: dict[tuple[str, str, str], Offering] = {}
    for o in base:  # per type, the zone row that knows the most (commitments, spot bucket)
        key = (o.cloud, o.region, o.instance_type)
        if key not in by_type or _known(o) > _known(by_type[key]):
            by_type[key] = o
    fresh = [carry_over(rows.get(o.key) or by_type.get((o.cloud, o.region, o.instance_type)), o) for o in newer]
    if not whole_regions:
        return base.merged_with(Catalog.of(fresh, origin=newer.origin))
    covered = {(o.cloud, o.region) for o in newer}
    kept = [o for o in base if (o.cloud, o.region) not in covered]
    return Catalog.of([*kept, *fresh], origin=f"{base.origin} + {newer.origin}")


def _known(o: Offering) -> int:
    return (o.reserved_1y is not None) + (o.reserved_3y is not None) + (o.interruption_bucket is not None)


def carry_over(old: Offering | None, new: Offering) -> Offering:
    """``new`` with the commitment prices and interruption data of ``old`` it lacks.

    Commitment prices move over only if both rows have (nearly) the same on-demand price
    (:data:`COMMITMENT_TOLERANCE`); the interruption bucket (AWS publishes it per region
    and instance type, whatever the price) always does.  The parts of ``old.source`` that
    name what moved are appended to ``new.source``.
    """
    if old is None:
        return new
    changes: dict[str, Any] = {}
    notes: list[str] = []
    same_list_price = (
        old.on_demand is not None and new.on_demand is not None
        and abs(new.on_demand / old.on_demand - 1) <= COMMITMENT_TOLERANCE
    )
    if same_list_price and new.reserved_1y is None and new.reserved_3y is None and (old.reserved_1y or old.reserved_3y):
        changes.update(reserved_1y=old.reserved_1y, reserved_3y=old.reserved_3y)
        notes += [part for part in old.source.split("; ") if part.startswith(("RI:", "CUD:"))]
    if new.interruption_rate is None and new.interruption_bucket is None and old.interruption_bucket:
        changes["interruption_bucket"] = old.interruption_bucket
        notes += [part for part in old.source.split("; ") if part.startswith("interruption bucket:")]
    if not changes:
        return new
    return dataclasses.replace(new, **changes, source="; ".join([new.source, *notes]))
