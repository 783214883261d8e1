"""The spend ledger: every billed interval of a run, in SQLite inside the run directory.

A *billed interval* is one stretch of time during which ``nodes`` instances of one pool
were billed at ``hourly_usd`` each.  Intervals are keyed by :class:`IntervalKey`
``(launch_id, node, segment)``, and every write is an idempotent upsert in its own
transaction, so a controller that was SIGKILLed can replay what it knows after
``--resume`` without counting anything twice::

    ledger = Ledger(run_dir)
    key = IntervalKey("launch-3", "i-0abc")
    ledger.open_interval(key, pool="aws:us-east-1:p4d.24xlarge", purchase="spot",
                         hourly_usd=11.2, start=t0)    # a replay returns the stored row
    ledger.extend(key, until=t1)                       # heartbeat: billed at least until t1
    ledger.close(key, end=t2, reason="preempted")      # a second close changes nothing
    ledger.total_usd(), ledger.by_pool()

An open interval is billed up to its last heartbeat (``billed_until``); pass ``now`` to
the totals to count it up to the present instead.  Timestamps are POSIX seconds (UTC).

Held capacity (``purchase="reserved_held"``) is billed at $0/h but recorded like any other
interval, so its node-hours show in :meth:`Ledger.by_pool`.  A reserved term bought for
the run is a one-time *charge* (:meth:`Ledger.charge`, or :meth:`Ledger.buy_term` which
charges only the nodes not bought yet); charges are keyed like intervals, so a replay
never charges twice, and they count in every total, the curve and the snapshot::

    ledger.buy_term("aws:us-east-1:p4d.24xlarge", "reserved_1y", term_usd=98_000.0,
                    nodes=2, launch_id="launch-1", at=t0)   # $196,000 once, whatever replays

The database uses WAL with ``synchronous=FULL``, so a commit is on disk (fsync'd)
before a call returns, and readers (``planner status``) never block the controller.
Which alerts were sent is kept here too, so a resumed run does not send them again.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pricing.pool import PURCHASES
from runtime.errors import RuntimeFailure

__all__ = [
    "FILENAME",
    "Charge",
    "Interval",
    "IntervalKey",
    "Ledger",
    "LedgerConflictError",
    "LedgerError",
    "LedgerSnapshot",
    "PoolSpend",
    "spend_curve",
]

FILENAME = "ledger.sqlite"
"""Name of the ledger database inside a run directory."""

SCHEMA_VERSION = 2
"""1: intervals and alerts; 2: one-time charges (a version-1 file gains the table on open)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS intervals (
    launch_id    TEXT    NOT NULL,
    node         TEXT    NOT NULL,
    segment      INTEGER NOT NULL,
    pool         TEXT    NOT NULL,
    purchase     TEXT    NOT NULL,
    hourly_usd   REAL    NOT NULL,
    nodes        INTEGER NOT NULL,
    start        REAL    NOT NULL,
    billed_until REAL    NOT NULL,
    "end"        REAL,
    open_reason  TEXT    NOT NULL,
    close_reason TEXT,
    PRIMARY KEY (launch_id, node, segment)
);
CREATE TABLE IF NOT EXISTS charges (
    key       TEXT    PRIMARY KEY,
    pool      TEXT    NOT NULL,
    purchase  TEXT    NOT NULL,
    nodes     INTEGER NOT NULL,
    usd       REAL    NOT NULL,
    at        REAL    NOT NULL,
    launch_id TEXT,
    reason    TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS alerts_sent (
    key     TEXT PRIMARY KEY,
    kind    TEXT NOT NULL,
    sent_at REAL NOT NULL
);
"""

_COLUMNS = (
    'launch_id, node, segment, pool, purchase, hourly_usd, nodes, start, billed_until, "end", '
    "open_reason, close_reason"
)


_CHARGE_COLUMNS = "key, pool, purchase, nodes, usd, at, launch_id, reason"


class LedgerError(RuntimeFailure):
    """The ledger could not be opened or was asked to record something invalid."""


class LedgerConflictError(LedgerError):
    """An interval was re-recorded with different immutable fields (pool, price, start, ...)."""


@dataclass(frozen=True, slots=True)
class IntervalKey:
    """Identity of a billed interval: one launch, one node (or ``"*"`` for all), one segment."""

    launch_id: str
    node: str
    segment: int = 0

    def __str__(self) -> str:
        return f"{self.launch_id}/{self.node}/{self.segment}"


@dataclass(frozen=True, slots=True)
class Interval:
    """One billed interval as stored.  ``end`` is ``None`` while the interval is open."""

    key: IntervalKey
    pool: str
    purchase: str
    hourly_usd: float
    nodes: int
    start: float
    billed_until: float
    end: float | None
    open_reason: str
    close_reason: str | None

    @property
    def is_open(self) -> bool:
        return self.end is None

    def billed_end(self, now: float | None = None) -> float:
        """Where billing stops: the close time, or for an open interval the last heartbeat
        (or ``now`` when that is later)."""
        if self.end is not None:
            return self.end
        return self.billed_until if now is None else max(self.billed_until, now)

    def node_hours(self, now: float | None = None) -> float:
        return self.nodes * (self.billed_end(now) - self.start) / 3600.0

    def cost_usd(self, now: float | None = None) -> float:
        return self.hourly_usd * self.node_hours(now)


@dataclass(frozen=True, slots=True)
class Charge:
    """A one-time charge as stored: ``usd`` for ``nodes`` nodes of ``pool``, paid at ``at``."""

    key: str
    pool: str
    purchase: str
    nodes: int
    usd: float
    at: float
    launch_id: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class PoolSpend:
    """Spend in one pool with one purchase option, over every launch of the run.

    ``usd`` is everything the pool cost: its billed hours plus ``charged_usd``, the
    one-time charges (reserved terms bought for the run).
    """

    pool: str
    purchase: str
    node_hours: float
    usd: float
    charged_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class LedgerSnapshot:
    """Everything the alert policy and the alert emails need, read in one transaction.

    ``curve`` is cumulative spend over time, ``((t, usd), ...)``, one point per change
    of burn rate or charge; ``alerts_sent`` holds the keys of alerts already sent for
    this run.  ``total_usd`` includes ``charged_usd``, the one-time charges.
    """

    taken_at: float
    total_usd: float
    by_pool: tuple[PoolSpend, ...]
    open_intervals: int
    burn_usd_per_hour: float
    curve: tuple[tuple[float, float], ...]
    alerts_sent: frozenset[str]
    charged_usd: float = 0.0


def spend_curve(intervals: Iterable[Interval], now: float | None = None,
                charges: Iterable[Charge] = ()) -> list[tuple[float, float]]:
    """Cumulative spend at every time the burn rate changes (a sweep over starts and ends);
    a charge is a step up at its time."""
    changes: dict[float, float] = {}
    steps: dict[float, float] = {}
    for iv in intervals:
        end = iv.billed_end(now)
        if end <= iv.start:
            continue
        rate = iv.hourly_usd * iv.nodes / 3600.0
        changes[iv.start] = changes.get(iv.start, 0.0) + rate
        changes[end] = changes.get(end, 0.0) - rate
    for charge in charges:
        steps[charge.at] = steps.get(charge.at, 0.0) + charge.usd
    points: list[tuple[float, float]] = []
    spent, rate, last = 0.0, 0.0, None
    for t in sorted(changes.keys() | steps.keys()):
        if last is not None:
            spent += rate * (t - last)
        rate += changes.get(t, 0.0)
        spent += steps.get(t, 0.0)
        points.append((t, spent))
        last = t
    return points


class Ledger:
    """The spend ledger of one run directory (``<run_dir>/ledger.sqlite``).

    Every method runs in its own transaction and is safe to call from several threads.
    Invalid input raises :class:`LedgerError`; replaying an interval with different
    immutable fields raises :class:`LedgerConflictError` and changes nothing.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, clock: Callable[[], float] = time.time):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / FILENAME
        self._clock = clock
        self._lock = threading.Lock()
        self._db = _connect(self.path)

    # -- lifecycle -------------------------------------------------------------------

    def disconnect(self) -> None:
        """Close the database connection.  The ledger cannot be used afterwards."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.disconnect()

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        with self._lock:
            # IMMEDIATE takes the write lock up front so a read-then-write cannot race a
            # second writer; a read transaction gives a consistent snapshot.
            self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- writing intervals -----------------------------------------------------------

    def open_interval(
        self,
        key: IntervalKey,
        *,
        pool: str,
        purchase: str,
        hourly_usd: float,
        start: float | None = None,
        nodes: int = 1,
        reason: str = "launch",
    ) -> Interval:
        """Start billing ``nodes`` instances of ``pool`` at ``hourly_usd`` each from ``start``.

        Idempotent: if ``key`` is already recorded with the same pool, purchase option,
        price, node count and start, the stored interval is returned unchanged.
        """
        start = self._clock() if start is None else start
        _check_interval(key, pool, purchase, hourly_usd, nodes, start)
        with self._transaction(write=True) as db:
            stored = _fetch(db, key)
            if stored is not None:
                _check_same(stored, pool, purchase, hourly_usd, nodes, start)
                return stored
            db.execute(
                f"INSERT INTO intervals ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,NULL,?,NULL)",
                (key.launch_id, key.node, key.segment, pool, purchase, float(hourly_usd), nodes,
                 float(start), float(start), reason),
            )
            return _require(db, key)

    def extend(self, key: IntervalKey, until: float | None = None) -> Interval:
        """Record that the interval was still billed at ``until`` (default: now).

        Billing never moves backwards, and a closed interval is left as it is (a late
        heartbeat must not reopen it).
        """
        until = self._clock() if until is None else until
        _check_time("until", until)
        with self._transaction(write=True) as db:
            stored = _require(db, key)
            if stored.is_open and until > stored.billed_until:
                db.execute(
                    "UPDATE intervals SET billed_until = ? WHERE launch_id = ? AND node = ? AND segment = ?",
                    (float(until), key.launch_id, key.node, key.segment),
                )
                return _require(db, key)
            return stored

    def close(self, key: IntervalKey, *, end: float | None = None, reason: str) -> Interval:
        """Stop billing the interval at ``end`` (default: now) because of ``reason``.

        The end is never earlier than the last heartbeat.  Closing an interval that is
        already closed returns it unchanged: the first close is the one that counts.
        """
        end = self._clock() if end is None else end
        _check_time("end", end)
        with self._transaction(write=True) as db:
            return _close_open(db, _require(db, key), end, reason)

    def record(
        self,
        key: IntervalKey,
        *,
        pool: str,
        purchase: str,
        hourly_usd: float,
        start: float,
        end: float,
        nodes: int = 1,
        reason: str,
    ) -> Interval:
        """Record a finished interval in one transaction (open + close).  Idempotent."""
        _check_interval(key, pool, purchase, hourly_usd, nodes, start)
        _check_time("end", end)
        if end < start:
            raise LedgerError(f"interval {key}: end {end} is before start {start}; pass end >= start")
        with self._transaction(write=True) as db:
            stored = _fetch(db, key)
            if stored is None:
                db.execute(
                    f"INSERT INTO intervals ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (key.launch_id, key.node, key.segment, pool, purchase, float(hourly_usd), nodes,
                     float(start), float(end), float(end), reason, reason),
                )
                return _require(db, key)
            _check_same(stored, pool, purchase, hourly_usd, nodes, start)
            return _close_open(db, stored, end, reason)

    # -- one-time charges ------------------------------------------------------------

    def charge(self, key: str, *, pool: str, purchase: str, usd: float, at: float | None = None, nodes: int = 1,
               launch_id: str | None = None, reason: str) -> Charge:
        """Charge ``usd`` once for ``nodes`` nodes of ``pool`` (e.g. a reserved term bought at ``at``).

        Idempotent by ``key``: a replay with the same figures returns the stored charge;
        one with other figures raises :class:`LedgerConflictError` and charges nothing.
        """
        at = self._clock() if at is None else at
        charge = _checked_charge(key, pool, purchase, usd, at, nodes, launch_id, reason)
        with self._transaction(write=True) as db:
            return _insert_charge(db, charge)

    def buy_term(self, pool: str, purchase: str, *, term_usd: float, nodes: int, launch_id: str,
                 at: float | None = None) -> Charge | None:
        """Charge the whole term (``term_usd`` per node) for the nodes of ``(pool, purchase)``
        this run has not bought yet; None when it already owns ``nodes`` of them.

        A term once bought serves every later launch on the same pool, so only a launch
        with more nodes than the run owns pays, and only for the extra ones.  The check and
        the charge are one transaction keyed by ``(pool, purchase, launch_id)``: a resumed
        controller that replays the launch pays nothing more.
        """
        at = self._clock() if at is None else at
        if not isinstance(nodes, int) or nodes < 1:
            raise LedgerError(f"term of {pool}: nodes={nodes!r} must be an integer >= 1")
        key = f"term:{pool}:{purchase}:{launch_id}"
        with self._transaction(write=True) as db:
            stored = _fetch_charge(db, key)
            if stored is not None:
                return stored
            extra = nodes - _term_nodes(db, pool, purchase)
            if extra <= 0:
                return None
            charge = _checked_charge(key, pool, purchase, term_usd * extra, at, extra, launch_id,
                                     f"{extra} node(s) of the {purchase} term at ${term_usd:,.2f} each")
            return _insert_charge(db, charge)

    def term_nodes(self, pool: str, purchase: str) -> int:
        """How many nodes of ``(pool, purchase)`` this run has bought a term for (what a plan need not buy again)."""
        with self._transaction(write=False) as db:
            return _term_nodes(db, pool, purchase)

    def charges(self) -> list[Charge]:
        """Every one-time charge, oldest first."""
        with self._transaction(write=False) as db:
            return _all_charges(db)

    # -- reading ---------------------------------------------------------------------

    def get(self, key: IntervalKey) -> Interval | None:
        with self._transaction(write=False) as db:
            return _fetch(db, key)

    def intervals(self) -> list[Interval]:
        """Every interval, oldest first."""
        with self._transaction(write=False) as db:
            return _all(db)

    def open_intervals(self) -> list[Interval]:
        """Intervals still being billed (what a resumed controller must extend or close)."""
        return [iv for iv in self.intervals() if iv.is_open]

    def total_usd(self, now: float | None = None) -> float:
        """Spend of the whole run, over every launch and recovery, one-time charges included."""
        intervals, charges = self._everything()
        return _total(intervals, charges, now)

    def by_pool(self, now: float | None = None) -> list[PoolSpend]:
        """Spend per (pool, purchase option), largest first."""
        return list(_group_by_pool(*self._everything(), now))

    def by_launch(self, now: float | None = None) -> dict[str, float]:
        """Spend per launch id, in the order the launches started (a term counts for the launch that bought it)."""
        intervals, charges = self._everything()
        totals: dict[str, float] = {}
        for iv in intervals:
            totals[iv.key.launch_id] = totals.get(iv.key.launch_id, 0.0) + iv.cost_usd(now)
        for charge in charges:
            if charge.launch_id is not None:
                totals[charge.launch_id] = totals.get(charge.launch_id, 0.0) + charge.usd
        return totals

    def snapshot(self, now: float | None = None) -> LedgerSnapshot:
        """Totals, the spend curve and the sent-alert keys, all from one read transaction."""
        with self._transaction(write=False) as db:
            intervals = _all(db)
            charges = _all_charges(db)
            sent = frozenset(row[0] for row in db.execute("SELECT key FROM alerts_sent"))
        taken_at = self._clock() if now is None else now
        open_ivs = [iv for iv in intervals if iv.is_open]
        return LedgerSnapshot(
            taken_at=taken_at,
            total_usd=_total(intervals, charges, now),
            by_pool=tuple(_group_by_pool(intervals, charges, now)),
            open_intervals=len(open_ivs),
            burn_usd_per_hour=sum(iv.hourly_usd * iv.nodes for iv in open_ivs),
            curve=tuple(spend_curve(intervals, now, charges)),
            alerts_sent=sent,
            charged_usd=sum(c.usd for c in charges),
        )

    def _everything(self) -> tuple[list[Interval], list[Charge]]:
        with self._transaction(write=False) as db:
            return _all(db), _all_charges(db)

    # -- alert bookkeeping -----------------------------------------------------------

    def mark_alerts_sent(self, keys: Iterable[str], *, kind: str, at: float | None = None) -> None:
        """Remember that the alerts ``keys`` went out; marking a key twice keeps the first."""
        at = self._clock() if at is None else at
        with self._transaction(write=True) as db:
            db.executemany(
                "INSERT OR IGNORE INTO alerts_sent (key, kind, sent_at) VALUES (?, ?, ?)",
                [(k, kind, float(at)) for k in keys],
            )

    def sent_alerts(self) -> frozenset[str]:
        with self._transaction(write=False) as db:
            return frozenset(row[0] for row in db.execute("SELECT key FROM alerts_sent"))


# -- helpers ---------------------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists():
            # Create the file ourselves so its mode does not depend on the umask (the
            # team's spend is its own); SQLite gives the -wal and -shm files the same.
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
            os.fchmod(fd, 0o600)
            os.close(fd)
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
    except (OSError, sqlite3.Error) as exc:
        raise LedgerError(f"{path}: cannot open the spend ledger ({exc}); check that the run "
                          "directory is writable") from exc
    try:
        # WAL when the filesystem supports it (not over NFS): otherwise SQLite keeps its
        # rollback journal, which is just as safe, only slower for readers.
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise LedgerError(f"{path}: ledger schema version {version} was written by a newer "
                              f"danlu (this one reads version {SCHEMA_VERSION}); upgrade danlu")
        db.execute("BEGIN IMMEDIATE")
        for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
            db.execute(statement)
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        db.close()
        raise LedgerError(f"{path}: not a readable spend ledger ({exc}); move it away to start "
                          "a fresh ledger") from exc
    except LedgerError:
        db.close()
        raise
    return db


def _row_to_interval(row: tuple) -> Interval:
    (launch_id, node, segment, pool, purchase, hourly, nodes, start, billed_until, end,
     open_reason, close_reason) = row
    return Interval(IntervalKey(launch_id, node, segment), pool, purchase, hourly, nodes, start,
                    billed_until, end, open_reason, close_reason)


def _fetch(db: sqlite3.Connection, key: IntervalKey) -> Interval | None:
    row = db.execute(
        f"SELECT {_COLUMNS} FROM intervals WHERE launch_id = ? AND node = ? AND segment = ?",
        (key.launch_id, key.node, key.segment),
    ).fetchone()
    return None if row is None else _row_to_interval(row)


def _require(db: sqlite3.Connection, key: IntervalKey) -> Interval:
    stored = _fetch(db, key)
    if stored is None:
        raise LedgerError(f"interval {key} is not in the ledger; call open_interval() first")
    return stored


def _close_open(db: sqlite3.Connection, stored: Interval, end: float, reason: str) -> Interval:
    if not stored.is_open:
        return stored  # the first close is the one that counts
    final = max(float(end), stored.billed_until)
    key = stored.key
    db.execute(
        'UPDATE intervals SET "end" = ?, billed_until = ?, close_reason = ? '
        "WHERE launch_id = ? AND node = ? AND segment = ?",
        (final, final, reason, key.launch_id, key.node, key.segment),
    )
    return _require(db, key)


def _all(db: sqlite3.Connection) -> list[Interval]:
    rows = db.execute(f"SELECT {_COLUMNS} FROM intervals ORDER BY start, launch_id, node, segment")
    return [_row_to_interval(row) for row in rows]


def _total(intervals: Iterable[Interval], charges: Iterable[Charge], now: float | None) -> float:
    return sum(iv.cost_usd(now) for iv in intervals) + sum(c.usd for c in charges)


def _group_by_pool(intervals: Iterable[Interval], charges: Iterable[Charge], now: float | None) -> list[PoolSpend]:
    groups: dict[tuple[str, str], tuple[float, float, float]] = {}
    for iv in intervals:
        hours, usd, charged = groups.get((iv.pool, iv.purchase), (0.0, 0.0, 0.0))
        groups[(iv.pool, iv.purchase)] = (hours + iv.node_hours(now), usd + iv.cost_usd(now), charged)
    for c in charges:
        hours, usd, charged = groups.get((c.pool, c.purchase), (0.0, 0.0, 0.0))
        groups[(c.pool, c.purchase)] = (hours, usd + c.usd, charged + c.usd)
    spends = [PoolSpend(pool, purchase, h, u, c) for (pool, purchase), (h, u, c) in groups.items()]
    return sorted(spends, key=lambda s: (-s.usd, s.pool, s.purchase))


def _term_nodes(db: sqlite3.Connection, pool: str, purchase: str) -> int:
    (owned,) = db.execute(
        "SELECT COALESCE(SUM(nodes), 0) FROM charges WHERE pool = ? AND purchase = ? AND key LIKE 'term:%'",
        (pool, purchase),
    ).fetchone()
    return int(owned)


def _row_to_charge(row: tuple) -> Charge:
    return Charge(*row)


def _fetch_charge(db: sqlite3.Connection, key: str) -> Charge | None:
    row = db.execute(f"SELECT {_CHARGE_COLUMNS} FROM charges WHERE key = ?", (key,)).fetchone()
    return None if row is None else _row_to_charge(row)


def _all_charges(db: sqlite3.Connection) -> list[Charge]:
    return [_row_to_charge(row) for row in db.execute(f"SELECT {_CHARGE_COLUMNS} FROM charges ORDER BY at, key")]


def _insert_charge(db: sqlite3.Connection, charge: Charge) -> Charge:
    stored = _fetch_charge(db, charge.key)
    if stored is None:
        db.execute(f"INSERT INTO charges ({_CHARGE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)",
                   (charge.key, charge.pool, charge.purchase, charge.nodes, charge.usd, charge.at,
                    charge.launch_id, charge.reason))
        return charge
    differ = [f"{name} {getattr(stored, name)!r} != {getattr(charge, name)!r}"
              for name in ("pool", "purchase", "nodes", "usd", "at", "launch_id")
              if getattr(stored, name) != getattr(charge, name)]
    if differ:
        raise LedgerConflictError(f"charge {charge.key!r} is already recorded with other values "
                                  f"({'; '.join(differ)}); a new charge needs a new key")
    return stored


def _checked_charge(key: str, pool: str, purchase: str, usd: float, at: float, nodes: int,
                    launch_id: str | None, reason: str) -> Charge:
    if not isinstance(key, str) or not key:
        raise LedgerError(f"charge key={key!r} must be a non-empty string such as 'term:<pool>:<purchase>:<launch>'")
    if not pool:
        raise LedgerError(f"charge {key!r}: pool must be a non-empty string such as 'aws:us-east-1:p4d.24xlarge'")
    _check_purchase(f"charge {key!r}", purchase)
    if not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd < 0:
        raise LedgerError(f"charge {key!r}: usd={usd!r} must be a finite amount >= 0")
    if not isinstance(nodes, int) or nodes < 1:
        raise LedgerError(f"charge {key!r}: nodes={nodes!r} must be an integer >= 1")
    _check_time("at", at)
    return Charge(key, pool, purchase, nodes, float(usd), float(at), launch_id, reason)


def _check_purchase(what: str, purchase: str) -> None:
    if purchase not in PURCHASES:
        raise LedgerError(f"{what}: purchase={purchase!r} is not one of {', '.join(PURCHASES)}")


def _check_time(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LedgerError(f"{name}={value!r} is not a finite POSIX timestamp; pass time.time()-style seconds")


def _check_interval(key: IntervalKey, pool: str, purchase: str, hourly_usd: float, nodes: int,
                    start: float) -> None:
    if not isinstance(key, IntervalKey):
        raise LedgerError(f"key={key!r} is not an IntervalKey; build one with IntervalKey(launch_id, node)")
    if not key.launch_id or not key.node:
        raise LedgerError(f"interval {key}: launch_id and node must be non-empty strings")
    if not pool:
        raise LedgerError(f"interval {key}: pool must be a non-empty string such as 'aws:us-east-1:p4d.24xlarge'")
    _check_purchase(f"interval {key}", purchase)
    if not isinstance(hourly_usd, (int, float)) or not math.isfinite(hourly_usd) or hourly_usd < 0:
        raise LedgerError(f"interval {key}: hourly_usd={hourly_usd!r} must be a finite price >= 0 (USD per node-hour)")
    if not isinstance(nodes, int) or nodes < 1:
        raise LedgerError(f"interval {key}: nodes={nodes!r} must be an integer >= 1")
    _check_time("start", start)


def _check_same(stored: Interval, pool: str, purchase: str, hourly_usd: float, nodes: int,
                start: float) -> None:
    wanted = {"pool": pool, "purchase": purchase, "hourly_usd": float(hourly_usd), "nodes": nodes,
              "start": float(start)}
    have = {"pool": stored.pool, "purchase": stored.purchase, "hourly_usd": stored.hourly_usd,
            "nodes": stored.nodes, "start": stored.start}
    differ = [f"{name} {have[name]!r} != {wanted[name]!r}" for name in wanted if have[name] != wanted[name]]
    if differ:
        raise LedgerConflictError(
            f"interval {stored.key} is already recorded with other values ({'; '.join(differ)}); "
            "a new billing period needs a new IntervalKey (e.g. the next segment)"
        )
