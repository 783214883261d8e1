"""Spot availability traces: the JSON files of SkyPilot's ``spot-traces`` repository.

Each file is one JSON object ``{"metadata": {"gap_seconds": G}, "data": [...],
"prices": [...]?}`` for one zone (a *pool*).  Sample ``i`` covers ``[i*G, (i+1)*G)``
seconds from the trace start.  How ``data`` is read depends on the file kind:

* single-node files hold 0/1 and **1 means spot UNAVAILABLE** (preempted / launch
  failed), 0 means available -- the polarity of the authors' own simulator
  (``spot_available = not trace[tick]``), not of the README's generic sentence;
* multi-node files (a ``N-node`` folder in the path, or values above 1) hold the
  number of instances of an ``N``-node gang that were up; the pool counts as
  available in a tick when at least ``gang`` of them were (default: the full gang).

``prices``, when present, is the spot price in USD per instance-hour, one per tick.

Several zones combine tick by tick into one :class:`MultiPoolTrace` (they must share
``gap_seconds``); a zone whose file is shorter than the others counts as unavailable
after its end, which is also how ticks past the end of any window read.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pricing.errors import PricingError

_GANG_FOLDER = re.compile(r"^(\d+)-node$")


class TraceFormatError(PricingError):
    """A trace file is missing, unreadable or malformed (names the file, key and fix)."""


@dataclass(frozen=True, slots=True)
class SpotTrace:
    """One zone's availability (``True`` = spot usable in that tick) and optional prices."""

    pool: str
    path: Path
    gap_seconds: float
    available: np.ndarray
    prices: np.ndarray | None = None
    gang: int | None = None

    def __len__(self) -> int:
        return int(self.available.shape[0])


@dataclass(frozen=True, slots=True)
class MultiPoolTrace:
    """Several pools on one tick grid: ``available[p, i]`` and ``spot_prices[p, i]``.

    ``spot_prices`` holds NaN where a pool's file had no ``prices`` array; the
    simulator fills those ticks with its default spot price.
    """

    pools: tuple[str, ...]
    gap_seconds: float
    available: np.ndarray
    spot_prices: np.ndarray
    sources: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if self.available.shape != self.spot_prices.shape or self.available.shape[0] != len(self.pools):
            raise ValueError("available and spot_prices must both have shape (len(pools), ticks)")
        if len(set(self.pools)) != len(self.pools):
            raise ValueError(f"pool names must be unique, got {self.pools}")

    @property
    def ticks(self) -> int:
        return int(self.available.shape[1])

    @property
    def tick_hours(self) -> float:
        return self.gap_seconds / 3600.0

    def window(self, start_tick: int, n_ticks: int) -> MultiPoolTrace:
        """Ticks ``[start_tick, start_tick + n_ticks)``; ticks past the end are unavailable."""
        if start_tick < 0 or n_ticks < 0:
            raise ValueError(f"start_tick and n_ticks must be >= 0, got {start_tick}, {n_ticks}")
        if start_tick >= self.ticks:
            raise ValueError(
                f"start tick {start_tick} is past the end of the trace ({self.ticks} ticks of "
                f"{self.gap_seconds:g} s); choose a start below {self.ticks}"
            )
        stop = min(start_tick + n_ticks, self.ticks)
        available = np.zeros((len(self.pools), n_ticks), dtype=bool)
        prices = np.full((len(self.pools), n_ticks), np.nan)
        available[:, : stop - start_tick] = self.available[:, start_tick:stop]
        prices[:, : stop - start_tick] = self.spot_prices[:, start_tick:stop]
        return MultiPoolTrace(self.pools, self.gap_seconds, available, prices, self.sources)

    def select(self, pools: Iterable[str]) -> MultiPoolTrace:
        """The same trace restricted to ``pools`` (in the order given)."""
        index = [self._index(p) for p in pools]
        return MultiPoolTrace(
            tuple(self.pools[i] for i in index),
            self.gap_seconds,
            self.available[index],
            self.spot_prices[index],
            tuple(self.sources[i] for i in index) if self.sources else (),
        )

    def _index(self, pool: str) -> int:
        try:
            return self.pools.index(pool)
        except ValueError:
            raise KeyError(f"unknown pool {pool!r}; the trace has {', '.join(self.pools)}") from None


def read_trace(path: str | Path, *, gang: int | None = None) -> SpotTrace:
    """Read one trace file.

    ``gang`` overrides the number of instances that must be up for a multi-node
    (count) file to count as available; it is an error for a 0/1 file.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: no such trace file; pass a .json trace or a folder of them") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceFormatError(f"{path}: not a readable JSON trace ({exc})") from None
    if not isinstance(raw, dict):
        raise TraceFormatError(f"{path}: expected a JSON object with 'metadata' and 'data', got {type(raw).__name__}")
    gap = _gap_seconds(path, raw)
    data = _number_list(path, raw, "data")
    values = np.asarray(data, dtype=float)
    if np.any(values < 0) or np.any(values != np.round(values)):
        raise TraceFormatError(f"{path}: key 'data' must hold non-negative integers (0/1 or instance counts)")
    folder_gang = _folder_gang(path)
    is_count_file = (folder_gang or 1) > 1 or values.max(initial=0) > 1
    if is_count_file:
        full = folder_gang or int(values.max())
        threshold = full if gang is None else gang
        if not 1 <= threshold <= max(full, 1):
            raise TraceFormatError(
                f"{path}: gang {threshold} is outside 1..{full}, the instance counts this file holds"
            )
        available = values >= threshold
    else:
        if gang not in (None, 1):
            raise TraceFormatError(f"{path}: --gang {gang} needs a multi-node count file; this one holds 0/1 values")
        available = values == 0
        threshold = None
    prices = None
    if "prices" in raw:
        prices = np.asarray(_number_list(path, raw, "prices"), dtype=float)
        if prices.shape != values.shape:
            raise TraceFormatError(
                f"{path}: key 'prices' has {prices.size} entries but 'data' has {values.size}; they must align per tick"
            )
        if np.any(prices <= 0):
            raise TraceFormatError(f"{path}: key 'prices' must hold positive USD per hour")
    return SpotTrace(_pool_name(path), path, gap, available, prices, threshold)


def read_traces(paths: Sequence[str | Path], *, gang: int | None = None) -> MultiPoolTrace:
    """Read trace files and folders (a folder = every ``*.json`` in it) into one multi-pool trace.

    Pools are named by zone (the file name up to the first ``_``), or by the whole file
    stem where two files share a zone (e.g. the K80 and V100 files of one zone).
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(path.glob("*.json"))
            if not found:
                raise TraceFormatError(f"{path}: folder has no *.json trace files")
            files.extend(found)
        else:
            files.append(path)
    if not files:
        raise TraceFormatError("no trace given; pass --trace FILE or --trace FOLDER")
    if len(set(files)) != len(files):
        raise TraceFormatError(f"the same trace file was given twice: {', '.join(str(f) for f in files)}")
    traces = [read_trace(f, gang=gang) for f in files]
    gaps = {t.gap_seconds for t in traces}
    if len(gaps) > 1:
        listing = ", ".join(f"{t.path} ({t.gap_seconds:g} s)" for t in traces)
        raise TraceFormatError(f"traces have different gap_seconds and cannot share one tick grid: {listing}")
    zones = [t.pool for t in traces]
    names = [t.pool if zones.count(t.pool) == 1 else t.path.stem for t in traces]
    if len(set(names)) != len(names):
        raise TraceFormatError(f"two traces have the same file name; rename one: {', '.join(str(f) for f in files)}")
    ticks = max(len(t) for t in traces)
    available = np.zeros((len(traces), ticks), dtype=bool)
    prices = np.full((len(traces), ticks), np.nan)
    for row, trace in enumerate(traces):
        available[row, : len(trace)] = trace.available
        if trace.prices is not None:
            prices[row, : len(trace)] = trace.prices
    return MultiPoolTrace(tuple(names), gaps.pop(), available, prices, tuple(files))


def _gap_seconds(path: Path, raw: dict) -> float:
    meta = raw.get("metadata")
    gap = meta.get("gap_seconds") if isinstance(meta, dict) else None
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not math.isfinite(gap) or gap <= 0:
        raise TraceFormatError(
            f"{path}: key 'metadata.gap_seconds' must be a positive number of seconds per tick, got {gap!r}"
        )
    return float(gap)


def _number_list(path: Path, raw: dict, key: str) -> list[float]:
    values = raw.get(key)
    if not isinstance(values, list) or not values:
        raise TraceFormatError(f"{path}: key '{key}' must be a non-empty list of numbers")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise TraceFormatError(f"{path}: key '{key}[{i}]' must be a number, got {v!r}")
    return values


def _folder_gang(path: Path) -> int | None:
    for part in path.parts:
        match = _GANG_FOLDER.match(part)
        if match:
            return int(match.group(1))
    return None


def _pool_name(path: Path) -> str:
    return path.stem.split("_", 1)[0]
