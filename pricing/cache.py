"""The local price cache: live-fetched offerings in one SQLite file.

The file lives in the user's data directory (``platformdirs.user_data_dir("danlu")``),
or in ``$DANLU_DATA_DIR`` when that is set, or wherever an explicit path says.  Each
row carries the UTC time it was fetched.  A refresh replaces a cloud's regions in
one transaction, so a reader sees either the old prices or the new ones, never half
of each, and a refresh that fails part-way leaves the file as it was.

``planner quote`` reads the cache with :func:`load_cached_catalog`.
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from pricing.catalog import Catalog, Offering
from pricing.errors import PricingError

if TYPE_CHECKING:
    from pricing.refresh import FetchResult

DATA_DIR_ENV = "DANLU_DATA_DIR"
"""Environment variable that moves the data directory (and so the cache) elsewhere."""

CACHE_FILENAME = "prices.sqlite3"
SCHEMA_VERSION = 1

_COLUMNS = (
    "cloud", "region", "zone", "instance_type", "gpu", "gpus_per_node", "gpu_memory_gb", "vcpus",
    "memory_gb", "on_demand", "spot", "reserved_1y", "reserved_3y", "interruption_rate",
    "interruption_bucket", "source", "fetched_at",
)  # fmt: skip

_SCHEMA = """
CREATE TABLE IF NOT EXISTS offerings (
    cloud TEXT NOT NULL,
    region TEXT NOT NULL,
    zone TEXT NOT NULL,              -- '' when the price is regional
    instance_type TEXT NOT NULL,
    gpu TEXT NOT NULL,
    gpus_per_node INTEGER NOT NULL CHECK (gpus_per_node > 0),
    gpu_memory_gb REAL NOT NULL,
    vcpus REAL NOT NULL,
    memory_gb REAL NOT NULL,
    on_demand REAL CHECK (on_demand IS NULL OR on_demand >= 0),
    spot REAL CHECK (spot IS NULL OR spot >= 0),
    reserved_1y REAL CHECK (reserved_1y IS NULL OR reserved_1y >= 0),
    reserved_3y REAL CHECK (reserved_3y IS NULL OR reserved_3y >= 0),
    interruption_rate REAL,
    interruption_bucket TEXT,
    source TEXT NOT NULL,
    fetched_at TEXT NOT NULL,        -- ISO 8601, UTC
    PRIMARY KEY (cloud, region, zone, instance_type)
);
"""


class CacheError(PricingError):
    """The cache file is unreadable or was written by an incompatible version."""


def default_cache_path() -> Path:
    """``$DANLU_DATA_DIR/prices.sqlite3``, else the platform's user data directory."""
    base = os.environ.get(DATA_DIR_ENV)
    root = Path(base).expanduser() if base else Path(platformdirs.user_data_dir("danlu"))
    return root / CACHE_FILENAME


@dataclass(frozen=True, slots=True)
class CloudSummary:
    """What the cache holds for one cloud."""

    cloud: str
    rows: int
    regions: int
    oldest: dt.datetime
    newest: dt.datetime


class PriceCache:
    """The SQLite price store at ``path`` (created on first write).

    Usage::

        cache = PriceCache(default_cache_path())
        cache.store(offerings, cloud="aws", fetched_at=now, regions=["us-east-1"])
        catalog = cache.load()
    """

    def __init__(self, path: Path | str):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"PriceCache({str(self.path)!r})"

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    def store(
        self,
        offerings: Iterable[Offering],
        *,
        cloud: str,
        fetched_at: dt.datetime,
        regions: Iterable[str] | None = None,
    ) -> int:
        """Replace ``cloud``'s rows in ``regions`` (all its rows when ``None``) by ``offerings``.

        One transaction: on any error nothing changes.  Returns the rows written.
        """
        with self._transaction() as conn:
            return self._replace(conn, list(offerings), cloud, fetched_at, regions)

    def store_results(self, results: Sequence[FetchResult]) -> int:
        """Store several :class:`~pricing.refresh.FetchResult` in one transaction.

        Only each result's completely fetched ``regions`` are replaced; regions that
        failed keep the prices they had.
        """
        if not any(result.regions for result in results):
            return 0
        written = 0
        with self._transaction() as conn:
            for result in results:
                if not result.regions:
                    continue
                offerings = [o for o in result.offerings if o.region in result.regions]
                written += self._replace(conn, offerings, result.cloud, result.fetched_at, result.regions)
        return written

    def load(self) -> Catalog:
        """Every cached offering, with ``as_of`` set to the (UTC) day it was fetched."""
        if not self.exists:
            return Catalog((), origin=self.origin)
        rows = self._query(f"SELECT {', '.join(_COLUMNS)} FROM offerings ORDER BY cloud, region, zone, instance_type")
        return Catalog(tuple(_offering(dict(zip(_COLUMNS, row, strict=True))) for row in rows), origin=self.origin)

    def summary(self) -> list[CloudSummary]:
        """Rows, regions and fetch times per cloud."""
        if not self.exists:
            return []
        rows = self._query(
            "SELECT cloud, COUNT(*), COUNT(DISTINCT region), MIN(fetched_at), MAX(fetched_at) "
            "FROM offerings GROUP BY cloud ORDER BY cloud"
        )
        return [
            CloudSummary(c, n, r, _parse_time(lo, self.path), _parse_time(hi, self.path)) for c, n, r, lo, hi in rows
        ]

    def age(self, now: dt.datetime | None = None) -> dt.timedelta | None:
        """How old the oldest cached price is (``None`` when the cache is empty)."""
        oldest = min((s.oldest for s in self.summary()), default=None)
        if oldest is None:
            return None
        return (now or dt.datetime.now(dt.timezone.utc)) - oldest

    @property
    def origin(self) -> str:
        return f"cache {self.path}"

    # -- internals ---------------------------------------------------------------

    def _replace(
        self,
        conn: sqlite3.Connection,
        offerings: list[Offering],
        cloud: str,
        fetched_at: dt.datetime,
        regions: Iterable[str] | None,
    ) -> int:
        if fetched_at.tzinfo is None:
            raise ValueError("fetched_at must be timezone-aware (UTC)")
        stamp = fetched_at.astimezone(dt.timezone.utc).isoformat()
        for o in offerings:
            if o.cloud != cloud:
                raise ValueError(f"offering {o.key} is not a {cloud} offering")
        if regions is None:
            conn.execute("DELETE FROM offerings WHERE cloud = ?", (cloud,))
        else:
            conn.executemany("DELETE FROM offerings WHERE cloud = ? AND region = ?", [(cloud, r) for r in regions])
        conn.executemany(
            f"INSERT INTO offerings ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
            [_row(o, stamp) for o in offerings],
        )
        return len(offerings)

    def _query(self, sql: str) -> list[tuple[object, ...]]:
        with self._connect() as conn:
            try:
                return conn.execute(sql).fetchall()
            except sqlite3.DatabaseError as exc:
                raise self._unreadable(exc) from exc

    def _unreadable(self, exc: BaseException) -> CacheError:
        return CacheError(
            f"{self.path}: not a readable price cache ({exc}); delete the file and run 'planner prices refresh'"
        )

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise self._unreadable(exc) from exc
        with closing(conn):
            if version > SCHEMA_VERSION:
                raise CacheError(
                    f"{self.path}: price cache schema {version} is newer than this danlu understands "
                    f"({SCHEMA_VERSION}); upgrade danlu or delete the file and run 'planner prices refresh'"
                )
            yield conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(_SCHEMA)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                yield conn
                conn.execute("COMMIT")
            except sqlite3.IntegrityError as exc:
                conn.execute("ROLLBACK")
                raise CacheError(
                    f"{self.path}: refused rows that break the cache's rules ({exc}); nothing was written"
                ) from exc
            except sqlite3.DatabaseError as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise self._unreadable(exc) from exc
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise


def _row(o: Offering, stamp: str) -> tuple[object, ...]:
    return (
        o.cloud, o.region, o.zone or "", o.instance_type, o.gpu, o.gpus_per_node, o.gpu_memory_gb, o.vcpus,
        o.memory_gb, o.on_demand, o.spot, o.reserved_1y, o.reserved_3y, o.interruption_rate,
        o.interruption_bucket, o.source, stamp,
    )  # fmt: skip


def _offering(row: dict[str, object]) -> Offering:
    fetched = _parse_time(str(row.pop("fetched_at")), None)
    row["zone"] = row["zone"] or None
    return Offering(**row, as_of=fetched.date())  # type: ignore[arg-type]


def _parse_time(text: str, path: Path | None) -> dt.datetime:
    try:
        stamp = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        where = f"{path}: " if path else ""
        raise CacheError(f"{where}bad fetched_at {text!r} in the price cache; run 'planner prices refresh'") from exc
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc)


def load_cached_catalog(path: Path | None = None) -> Catalog | None:
    """The cached prices, or ``None`` when the cache is absent or empty.

    ``path`` defaults to :func:`default_cache_path` (which honours ``$DANLU_DATA_DIR``).
    """
    catalog = PriceCache(path or default_cache_path()).load()
    return catalog if len(catalog) else None
