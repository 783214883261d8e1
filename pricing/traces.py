"""Spot availability traces of several zones on one tick grid (:class:`MultiPoolTrace`).

One file is one zone (a *pool*); :mod:`pricing.trace_files` reads it in whichever
format it is (SkyPilot JSON 0/1 or counts, SkyNomad ``<zone>/full.json``, CSV
``date,availability``), deciding from the content.  Sample ``i`` covers ``[i*G,
(i+1)*G)`` seconds from the trace start.  Several zones combine tick by tick (they must
share ``gap_seconds``); a zone whose file is shorter than the others counts as
unavailable after its end, which is also how ticks past the end of any window read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pricing.trace_files import SpotTrace, TraceFormatError, read_trace

__all__ = ["MultiPoolTrace", "SpotTrace", "TraceFormatError", "read_trace", "read_traces", "trace_files"]


@dataclass(frozen=True, slots=True)
class MultiPoolTrace:
    """Several pools on one tick grid: ``available[p, i]`` and ``spot_prices[p, i]``.

    ``spot_prices`` holds NaN where a pool's file had no prices (neither ``prices``
    nor ``metadata.price_info``); the simulator fills those ticks with its default spot
    price.  ``formats`` says how each pool's file was read, ``gangs`` the instances a
    count file needed up (``None`` for 0/1 files); ``on_demand_price`` is the
    lowest on-demand USD/h the files state (``None`` when none does).
    """

    pools: tuple[str, ...]
    gap_seconds: float
    available: np.ndarray
    spot_prices: np.ndarray
    sources: tuple[Path, ...] = ()
    formats: tuple[str, ...] = ()
    gangs: tuple[int | None, ...] = ()
    on_demand_price: float | None = field(default=None, compare=False)

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
        return MultiPoolTrace(
            self.pools, self.gap_seconds, available, prices, self.sources, self.formats, self.gangs,
            self.on_demand_price,
        )

    def select(self, pools: Iterable[str]) -> MultiPoolTrace:
        """The same trace restricted to ``pools`` (in the order given)."""
        index = [self._index(p) for p in pools]
        return MultiPoolTrace(
            tuple(self.pools[i] for i in index),
            self.gap_seconds,
            self.available[index],
            self.spot_prices[index],
            tuple(self.sources[i] for i in index) if self.sources else (),
            tuple(self.formats[i] for i in index) if self.formats else (),
            tuple(self.gangs[i] for i in index) if self.gangs else (),
            self.on_demand_price,
        )

    def _index(self, pool: str) -> int:
        try:
            return self.pools.index(pool)
        except ValueError:
            raise KeyError(f"unknown pool {pool!r}; the trace has {', '.join(self.pools)}") from None


def trace_files(paths: Sequence[str | Path]) -> list[Path]:
    """The trace files that ``paths`` name.

    A file is itself.  A folder is every ``*.json`` and ``*.csv`` in it, plus
    ``<zone>/full.json`` of each sub-folder that has one (the SkyNomad layout); a
    folder that holds a ``full.json`` is that file alone (its numbered shards are
    windows of it).
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            files.append(path)
            continue
        if (path / "full.json").is_file():
            files.append(path / "full.json")
            continue
        found = sorted(p for p in path.iterdir() if p.suffix.lower() in (".json", ".csv") and p.is_file())
        found += sorted(d / "full.json" for d in path.iterdir() if (d / "full.json").is_file())
        if not found:
            raise TraceFormatError(
                f"{path}: folder has no trace files (*.json, *.csv, or <zone>/full.json in sub-folders)"
            )
        files.extend(found)
    if not files:
        raise TraceFormatError("no trace given; pass --trace FILE or --trace FOLDER")
    if len(set(files)) != len(files):
        raise TraceFormatError(f"the same trace file was given twice: {', '.join(str(f) for f in files)}")
    return files


def read_traces(paths: Sequence[str | Path], *, gang: int | None = None) -> MultiPoolTrace:
    """Read trace files and folders (see :func:`trace_files`) into one multi-pool trace.

    Pools are named by zone (the file name, or the ``<zone>`` folder of a ``full.json``,
    up to the first ``_``), or by the whole name where two files share a zone (e.g. the
    K80 and V100 files of one zone).
    """
    files = trace_files(paths)
    traces = [read_trace(f, gang=gang) for f in files]
    gaps = {t.gap_seconds for t in traces}
    if len(gaps) > 1:
        listing = ", ".join(f"{t.path} ({t.gap_seconds:g} s)" for t in traces)
        raise TraceFormatError(f"traces have different gap_seconds and cannot share one tick grid: {listing}")
    zones = [t.pool for t in traces]
    names = [t.pool if zones.count(t.pool) == 1 else _long_name(t.path) for t in traces]
    if len(set(names)) != len(names):
        raise TraceFormatError(f"two traces have the same file name; rename one: {', '.join(str(f) for f in files)}")
    ticks = max(len(t) for t in traces)
    available = np.zeros((len(traces), ticks), dtype=bool)
    prices = np.full((len(traces), ticks), np.nan)
    for row, trace in enumerate(traces):
        available[row, : len(trace)] = trace.available
        if trace.prices is not None:
            prices[row, : len(trace)] = trace.prices
        elif trace.spot_price is not None:
            prices[row, : len(trace)] = trace.spot_price
    stated = [t.on_demand_price for t in traces if t.on_demand_price is not None]
    return MultiPoolTrace(
        tuple(names), gaps.pop(), available, prices, tuple(files), tuple(t.format for t in traces),
        tuple(t.gang for t in traces), min(stated) if stated else None,
    )


def _long_name(path: Path) -> str:
    return path.parent.name if path.name == "full.json" else path.stem
