"""One spot-availability trace file, whatever its format: what it holds is read from its content.

Three formats are known (see docs/simulate.md, "Traces"):

* **SkyPilot spot-traces JSON** (``{"metadata": {"gap_seconds": G}, "data": [...],
  "prices": [...]?}``, the files of *Can't Be Late*).  Whether ``data`` holds 0/1
  availability or instance counts is decided from the values, never from the folder:
  values all in {0, 1} are **0/1 files, where 1 means spot UNAVAILABLE** (the polarity
  of the authors' simulator, ``spot_available = not trace[tick]``); any value above 1
  makes a **count file** (instances of a gang that were up; the pool is available in a
  tick when at least ``gang`` were, by default the whole gang: the ``N`` of an
  ``N-node`` folder when it is at least the largest count, else the largest count).
* **SkyNomad ``full.json``** (``andylizf/skynomad-artifact``, ``data/README.md``): the
  same JSON in the same 0/1 polarity, one folder per zone (``<zone>/full.json``), with
  ``metadata.price_info`` = ``{"price": spot, "on_demand_price": od}`` in USD/h, which
  become the trace's default prices.
* **CSV ``date,availability``** (the artifact's ``data/real/availability/*/processed``):
  one timestamped row per probe, **1 = available** as the column says and as the
  artifact's converter reads it (``create_aligned_traces.py`` inverts it into the JSON
  polarity).  The tick is the median gap between rows; rows are placed on that grid by
  their timestamps, and a missing tick repeats the row before it.

Every :class:`SpotTrace` says in ``format`` which of these was read, and how.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pricing.errors import PricingError

_GANG_FOLDER = re.compile(r"^(\d+)-node$")
MAX_TRACE_BYTES = 256 << 20
"""A trace is a few MB at most; anything larger is a wrong path, not a trace."""


class TraceFormatError(PricingError):
    """A trace file is missing, unreadable or malformed (names the file, key and fix)."""


@dataclass(frozen=True, slots=True)
class SpotTrace:
    """One zone's availability (``True`` = spot usable in that tick) and optional prices.

    ``format`` names the format read (e.g. ``"json 0/1 (1 = unavailable)"``);
    ``on_demand_price``/``spot_price`` are the file's own USD/h defaults, if it has them.
    """

    pool: str
    path: Path
    gap_seconds: float
    available: np.ndarray
    prices: np.ndarray | None = None
    gang: int | None = None
    format: str = "json 0/1 (1 = unavailable)"
    on_demand_price: float | None = None
    spot_price: float | None = None

    def __len__(self) -> int:
        return int(self.available.shape[0])


def read_trace(path: str | Path, *, gang: int | None = None) -> SpotTrace:
    """Read one trace file (JSON or CSV, see the module docstring).

    ``gang`` overrides the number of instances that must be up for a count file to
    count as available; it is an error for a 0/1 file.
    """
    path = Path(path)
    text = _text(path)
    suffix = path.suffix.lower()
    if suffix == ".csv" or (suffix != ".json" and text.lstrip()[:1] not in ("{", "[")):
        return _read_csv(path, text, gang)
    return _read_json(path, text, gang)


def pool_name(path: Path) -> str:
    """The zone a file is about: ``us-east-1a_v100_1.json`` and ``us-east-1a_v100_1/full.json``
    are both ``us-east-1a``."""
    stem = path.parent.name if path.stem == "full" and path.parent.name else path.stem
    return stem.split("_", 1)[0]


def _text(path: Path) -> str:
    try:
        if path.stat().st_size > MAX_TRACE_BYTES:
            raise TraceFormatError(f"{path}: larger than {MAX_TRACE_BYTES >> 20} MB; this is not a trace file")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: no such trace file; pass a .json or .csv trace or a folder of them") from None
    except IsADirectoryError:
        raise TraceFormatError(f"{path}: is a folder; pass it as a folder of traces") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"{path}: not a readable trace ({exc})") from None


def _read_json(path: Path, text: str, gang: int | None) -> SpotTrace:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{path}: not a readable JSON trace ({exc})") from None
    if not isinstance(raw, dict):
        raise TraceFormatError(f"{path}: expected a JSON object with 'metadata' and 'data', got {type(raw).__name__}")
    gap = _gap_seconds(path, raw)
    values = np.asarray(_number_list(path, raw, "data"), dtype=float)
    if np.any(values < 0) or np.any(values != np.round(values)):
        raise TraceFormatError(f"{path}: key 'data' must hold non-negative integers (0/1 or instance counts)")
    layout = "full.json" if path.name == "full.json" else "json"
    if values.max(initial=0) > 1:
        available, threshold, kind = _counts(path, values, gang)
    else:
        if gang not in (None, 1):
            raise TraceFormatError(
                f"{path}: --gang {gang} needs a count file (values above 1); this one holds only 0/1 values"
            )
        available, threshold, kind = values == 0, None, "0/1 (1 = unavailable)"
    prices = None
    if "prices" in raw:
        prices = np.asarray(_number_list(path, raw, "prices"), dtype=float)
        if prices.shape != values.shape:
            raise TraceFormatError(
                f"{path}: key 'prices' has {prices.size} entries but 'data' has {values.size}; they must align per tick"
            )
        if np.any(prices <= 0):
            raise TraceFormatError(f"{path}: key 'prices' must hold positive USD per hour")
    spot, on_demand = _price_info(path, raw)
    return SpotTrace(pool_name(path), path, gap, available, prices, threshold, f"{layout} {kind}", on_demand, spot)


def _counts(path: Path, values: np.ndarray, gang: int | None) -> tuple[np.ndarray, int, str]:
    largest = int(values.max())
    folder = _folder_gang(path)
    full = folder if folder is not None and folder >= largest else largest
    threshold = full if gang is None else gang
    if not 1 <= threshold <= full:
        raise TraceFormatError(f"{path}: gang {threshold} is outside 1..{full}, the instance counts this file holds")
    return values >= threshold, threshold, f"instance counts (available = {threshold} of {full} up)"


def _price_info(path: Path, raw: dict) -> tuple[float | None, float | None]:
    info = raw["metadata"].get("price_info")
    if info is None:
        return None, None
    if not isinstance(info, dict):
        raise TraceFormatError(f"{path}: key 'metadata.price_info' must be an object with 'price' and 'on_demand_price'")
    found: list[float | None] = []
    for key in ("price", "on_demand_price"):
        value = info.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise TraceFormatError(f"{path}: key 'metadata.price_info.{key}' must be a positive USD per hour")
        found.append(None if value is None else float(value))
    return found[0], found[1]


def _read_csv(path: Path, text: str, gang: int | None) -> SpotTrace:
    rows = list(csv.reader(text.splitlines()))
    header = [c.strip().lower() for c in rows[0]] if rows else []
    if header[:2] != ["date", "availability"]:
        raise TraceFormatError(
            f"{path}: not a trace: expected JSON, or a CSV whose header is 'date,availability' (got {','.join(header)!r})"
        )
    if gang not in (None, 1):
        raise TraceFormatError(f"{path}: --gang {gang} needs a count file; a date,availability CSV holds 0/1 values")
    times: list[float] = []
    values: list[int] = []
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        try:
            stamp = dt.datetime.fromisoformat(row[0].strip())
            value = int(row[1])
        except (ValueError, IndexError):
            raise TraceFormatError(
                f"{path}: line {line}: expected 'YYYY-MM-DD HH:MM:SS,0 or 1', got {','.join(row)!r}"
            ) from None
        if value not in (0, 1):
            raise TraceFormatError(f"{path}: line {line}: availability must be 0 or 1, got {value}")
        times.append(stamp.replace(tzinfo=stamp.tzinfo or dt.UTC).timestamp())
        values.append(value)
    if len(times) < 2:
        raise TraceFormatError(f"{path}: needs at least two rows to tell its tick length")
    stamps = np.asarray(times)
    steps = np.diff(stamps)
    if np.any(steps <= 0):
        line = int(np.argmax(steps <= 0)) + 3
        raise TraceFormatError(f"{path}: line {line}: dates must increase row by row")
    gap = float(round(np.median(steps)))
    ticks = np.rint((stamps - stamps[0]) / gap).astype(int)
    grid = np.full(int(ticks[-1]) + 1, -1)
    grid[ticks] = values
    for i in range(1, grid.size):  # a missing probe repeats the one before it
        if grid[i] < 0:
            grid[i] = grid[i - 1]
    return SpotTrace(pool_name(path), path, gap, grid == 1, None, None, "csv date,availability (1 = available)")


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
