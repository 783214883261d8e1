"""The demand file (``DEMAND.toml``) and the per-period GPU-hours it describes.

Demand comes either as a forecast per GPU class (``[[demand]]``: GPU-hours per period,
inline or from a ``period,gpu_hours`` CSV) or as a job trace (``[trace]``: one row per
job, ``submit_time_s,duration_s,num_gpus,gpu_type``), from which the GPU-hours of each
period are the exact integral of the running GPUs over it (a job runs over
``[submit, submit + duration)``; queueing is not modelled).

A series shorter than the horizon is repeated cyclically to fill it (a trace's window is
what repeats), and ``growth_per_period`` compounds on top: period ``t`` gets
``base[t mod n] * (1 + g) ** t``.  The report says when a series was repeated.
"""

from __future__ import annotations

import csv
import difflib
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from planner.capacity.errors import CapacitySpecError
from pricing.catalog import PURCHASE_OPTIONS

PERIOD_HOURS = {"day": 24.0, "week": 168.0, "month": 730.0}
"""Hours per period; a month is 8760 / 12 so that twelve of them are exactly one 1-year term."""
MAX_FILE_BYTES = 1 << 20
MAX_PERIODS = 10_000
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, str_max_length=4096)


class DemandEntry(_Section):
    """One GPU class of a forecast."""

    gpu: str = Field(min_length=1, max_length=64)
    name: str | None = Field(default=None, pattern=NAME_PATTERN, description="default: the GPU name")
    file: str | None = None
    gpu_hours: tuple[float, ...] | None = Field(default=None, max_length=MAX_PERIODS)
    preemptible_share: float = Field(default=0.0, ge=0, le=1)
    growth_per_period: float = Field(default=0.0, gt=-1, le=10)
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()

    @field_validator("gpu_hours")
    @classmethod
    def _non_negative(cls, value: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if value is not None:
            if not value:
                raise ValueError("give at least one period's GPU-hours, e.g. gpu_hours = [1200, 1300]")
            if any(v < 0 or v > 1e12 for v in value):
                raise ValueError("GPU-hours are between 0 and 1e12 per period")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> DemandEntry:
        if (self.file is None) == (self.gpu_hours is None):
            raise ValueError("give exactly one of file = \"a100.csv\" (columns period,gpu_hours) or gpu_hours = [...]")
        return self


class TraceEntry(_Section):
    """A job trace from which each period's demand is derived."""

    file: str
    gpu: str = Field(default="V100", min_length=1, max_length=64, description="for rows without gpu_type")
    preemptible_share: float = Field(default=0.0, ge=0, le=1)
    growth_per_period: float = Field(default=0.0, gt=-1, le=10)
    window_start_s: float = Field(default=0.0, ge=0)
    window_end_s: float | None = Field(default=None, gt=0, description="default: the last job's end")
    scale: float = Field(default=1.0, gt=0, le=1e6, description="multiplies every job's GPUs")

    @model_validator(mode="after")
    def _window(self) -> TraceEntry:
        if self.window_end_s is not None and self.window_end_s <= self.window_start_s:
            raise ValueError("window_end_s must be after window_start_s")
        return self


class Constraints(_Section):
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()


class Purchase(_Section):
    allow: tuple[Literal["spot", "on_demand", "reserved_1y", "reserved_3y"], ...] = PURCHASE_OPTIONS
    term_past_horizon: Literal["pro_rata", "whole"] = Field(
        default="pro_rata",
        description="a term running past the horizon is charged for its share inside it, or whole",
    )
    spot_loss_hours: float = Field(
        default=0.25, ge=0, le=24,
        description="GPU-hours lost per GPU per spot interruption (restart plus rework since the last checkpoint)",
    )

    @field_validator("allow")
    @classmethod
    def _non_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError(f"allow at least one of {', '.join(PURCHASE_OPTIONS)}")
        return tuple(dict.fromkeys(value))


class CapacitySpec(_Section):
    name: str = Field(pattern=NAME_PATTERN)
    period: Literal["day", "week", "month"] = "week"
    horizon_periods: int = Field(ge=1, le=MAX_PERIODS)
    demand: tuple[DemandEntry, ...] = Field(default=(), max_length=256)
    trace: TraceEntry | None = None
    constraints: Constraints = Constraints()
    purchase: Purchase = Purchase()

    @model_validator(mode="after")
    def _demand_or_trace(self) -> CapacitySpec:
        if bool(self.demand) == (self.trace is not None):
            raise ValueError("give either [[demand]] tables (a forecast per GPU class) or one [trace] table")
        names = [d.name or d.gpu for d in self.demand]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"two [[demand]] tables are named {dupes[0]!r}; give each a distinct name = \"...\"")
        return self


@dataclass(frozen=True, slots=True)
class ClassDemand:
    """One GPU class's demand: GPU-hours per period over the whole horizon."""

    name: str
    gpu: str
    gpu_hours: tuple[float, ...]
    preemptible_share: float
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()

    def scaled(self, factor: float) -> ClassDemand:
        return ClassDemand(self.name, self.gpu, tuple(v * factor for v in self.gpu_hours), self.preemptible_share,
                           self.clouds, self.regions)


@dataclass(frozen=True, slots=True)
class Demand:
    """What the model plans for: every class over ``horizon`` periods of ``period_hours``."""

    name: str
    period: str
    horizon: int
    classes: tuple[ClassDemand, ...]
    notes: tuple[str, ...] = ()

    @property
    def period_hours(self) -> float:
        return PERIOD_HOURS[self.period]

    def scaled(self, factor: float) -> Demand:
        return Demand(self.name, self.period, self.horizon, tuple(c.scaled(factor) for c in self.classes), self.notes)

    def total(self) -> np.ndarray:
        return np.sum([c.gpu_hours for c in self.classes], axis=0)


def load_spec(path: str | Path) -> CapacitySpec:
    """Read and validate a demand file; raise :class:`CapacitySpecError` naming every problem."""
    path = Path(path)
    raw = read_toml(path, "capacity file")
    try:
        return CapacitySpec.model_validate(raw)
    except ValidationError as exc:
        raise CapacitySpecError(str(path), [describe(err, CapacitySpec) for err in exc.errors()]) from None


def load_demand(path: str | Path) -> tuple[CapacitySpec, Demand]:
    """The validated file and the demand it describes (CSV and trace paths are relative to it)."""
    path = Path(path)
    spec = load_spec(path)
    base = path.parent
    notes: list[str] = []
    classes: list[ClassDemand] = []
    for i, entry in enumerate(spec.demand):
        if entry.file is not None:
            series = read_forecast_csv(base / entry.file, key=f"demand[{i}].file", source=str(path))
        else:
            series = list(entry.gpu_hours or ())
        name = entry.name or entry.gpu
        hours = extend(series, spec.horizon_periods, entry.growth_per_period)
        if len(series) < spec.horizon_periods:
            notes.append(f"{name}: {len(series)} periods given, repeated to fill {spec.horizon_periods}")
        classes.append(ClassDemand(name, entry.gpu, hours, entry.preemptible_share,
                                   entry.clouds, entry.regions))
    if spec.trace is not None:
        trace = spec.trace
        jobs = read_trace(base / trace.file, source=str(path), key="trace.file")
        per_gpu = trace_period_hours(jobs, PERIOD_HOURS[spec.period], default_gpu=trace.gpu,
                                     start_s=trace.window_start_s, end_s=trace.window_end_s, scale=trace.scale)
        for gpu, series in per_gpu.items():
            hours = extend(series, spec.horizon_periods, trace.growth_per_period)
            if len(series) < spec.horizon_periods:
                notes.append(f"{gpu}: the trace window holds {len(series)} {spec.period}s, repeated to fill "
                             f"{spec.horizon_periods}")
            edges = quiet_edges_note(series, spec.period, trace.window_start_s)
            if edges is not None:
                said, start, end = edges
                notes.append(f"{gpu}: {said}. They are planned for as demand; to leave them out, set "
                             f"trace.window_start_s = {start:.0f} and trace.window_end_s = {end:.0f}")
            classes.append(ClassDemand(gpu, gpu, hours, trace.preemptible_share))
    return spec, Demand(spec.name, spec.period, spec.horizon_periods, tuple(classes), tuple(notes))


def quiet_edges(series: list[float], share: float = 0.5, least: float = 0.05) -> tuple[int, int]:
    """How many periods at the start and at the end of ``series`` stay below ``share`` of its median period
    (each counted only when at least ``least`` of the periods, and one): the signature of a job trace's
    ramp-in (jobs that started before it are missing) and cut-off (jobs still running at its end are
    missing, as in the Philly file). Repeated to terms, such edges become a sawtooth of demand that
    was never there."""
    values = np.asarray(series, dtype=float)
    if values.size == 0:
        return 0, 0
    busy = np.flatnonzero(values >= share * float(np.median(values)))
    if busy.size == 0:
        return 0, 0
    lead, tail = int(busy[0]), int(values.size - 1 - busy[-1])
    enough = max(1, round(least * values.size))
    return (lead if lead >= enough else 0), (tail if tail >= enough else 0)


def quiet_edges_note(series: list[float], period: str, window_start_s: float) -> tuple[str, float, float] | None:
    """What :func:`quiet_edges` found in ``series`` (periods of ``period`` from ``window_start_s``), said in
    words, and the window (start, end seconds) that leaves it out; None when the edges are busy."""
    lead, tail = quiet_edges(series)
    if not lead and not tail:
        return None
    median = float(np.median(series))
    parts = []
    if lead:
        parts.append(f"the first {periods(lead, period)} average {np.mean(series[:lead]) / median:.0%} of the "
                     f"median {period} (a ramp-in: jobs that started before the trace are missing?)")
    if tail:
        parts.append(f"the last {periods(tail, period)} {np.mean(series[-tail:]) / median:.0%} (a cut-off: jobs "
                     "still running at its end are missing?)")
    length = PERIOD_HOURS[period] * 3600.0
    return "; ".join(parts), window_start_s + lead * length, window_start_s + (len(series) - tail) * length


def periods(count: int, period: str) -> str:
    """``3 weeks``, ``1 week``."""
    return f"{count} {period}" + ("s" if count != 1 else "")


def extend(series: list[float], horizon: int, growth: float) -> tuple[float, ...]:
    """``series`` repeated cyclically to ``horizon`` periods, with compound growth per period."""
    if not series:
        return (0.0,) * horizon
    return tuple(float(series[t % len(series)]) * (1.0 + growth) ** t for t in range(horizon))


def read_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        if path.exists() and not path.is_file() and not path.is_dir():
            raise CapacitySpecError(str(path), ["not a regular file"], what)
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise CapacitySpecError(str(path), [f"larger than {MAX_FILE_BYTES // 1024} KiB"], what)
        return tomllib.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise CapacitySpecError(str(path), ["file not found"], what) from None
    except IsADirectoryError:
        raise CapacitySpecError(str(path), ["is a directory; give the path of a .toml file"], what) from None
    except PermissionError:
        raise CapacitySpecError(str(path), ["cannot be read (permission denied)"], what) from None
    except UnicodeDecodeError as exc:
        raise CapacitySpecError(str(path), [f"not UTF-8 text ({exc.reason} at byte {exc.start})"], what) from None
    except tomllib.TOMLDecodeError as exc:
        raise CapacitySpecError(str(path), [f"not valid TOML: {exc}"], what) from None


def read_forecast_csv(path: Path, *, key: str, source: str) -> list[float]:
    """GPU-hours per period from a ``period,gpu_hours`` CSV, in period order (periods 0..n-1, each once)."""
    rows = _csv_rows(path, ("period", "gpu_hours"), key=key, source=source)
    by_period: dict[int, float] = {}
    for line, row in rows:
        try:
            period = int(row["period"])
            hours = float(row["gpu_hours"])
        except (TypeError, ValueError):
            raise CapacitySpecError(source, [(
                f"{key}: {path} line {line}: period must be a whole number and gpu_hours a number "
                f"(got {row['period']!r}, {row['gpu_hours']!r})")]) \
                from None
        if not (math.isfinite(hours) and 0 <= hours <= 1e12):
            raise CapacitySpecError(source, [f"{key}: {path} line {line}: gpu_hours must be between 0 and 1e12"])
        if period in by_period:
            raise CapacitySpecError(source, [f"{key}: {path} line {line}: period {period} appears twice"])
        by_period[period] = hours
    if sorted(by_period) != list(range(len(by_period))):
        raise CapacitySpecError(source, [f"{key}: {path}: periods must be 0, 1, 2, ... with none missing"])
    return [by_period[p] for p in range(len(by_period))]


@dataclass(frozen=True, slots=True)
class Jobs:
    """A job trace as arrays (seconds, GPUs) plus each row's GPU class."""

    submit_s: np.ndarray
    duration_s: np.ndarray
    gpus: np.ndarray
    gpu_type: tuple[str, ...]


def read_trace(path: Path, *, source: str, key: str) -> Jobs:
    rows = _csv_rows(path, ("submit_time_s", "duration_s", "num_gpus"), key=key, source=source)
    submit, duration, gpus, types = [], [], [], []
    for line, row in rows:
        try:
            s, d, g = float(row["submit_time_s"]), float(row["duration_s"]), float(row["num_gpus"])
        except (TypeError, ValueError):
            raise CapacitySpecError(source, [
                f"{key}: {path} line {line}: submit_time_s, duration_s and num_gpus must be numbers"]) from None
        if not (math.isfinite(s) and math.isfinite(d) and math.isfinite(g)) or s < 0 or d < 0 or g < 0:
            raise CapacitySpecError(source, [f"{key}: {path} line {line}: times and GPUs must be finite and >= 0"])
        submit.append(s)
        duration.append(d)
        gpus.append(g)
        types.append((row.get("gpu_type") or "").strip())
    if not submit:
        raise CapacitySpecError(source, [f"{key}: {path} holds no jobs"])
    return Jobs(np.array(submit), np.array(duration), np.array(gpus), tuple(types))


def trace_period_hours(jobs: Jobs, period_hours: float, *, default_gpu: str, start_s: float = 0.0,
                       end_s: float | None = None, scale: float = 1.0) -> dict[str, list[float]]:
    """GPU-hours per period per GPU class: the exact integral of the running GPUs over each period.

    Periods start at ``start_s``; the last partial period (if ``end_s`` is not a whole number
    of periods after it) is dropped, because a repeated partial period would under-count.
    """
    ends = jobs.submit_s + jobs.duration_s
    end = float(ends.max()) if end_s is None else float(end_s)
    length = period_hours * 3600.0
    count = int((end - start_s) // length + 1e-9)
    if count < 1:
        raise CapacitySpecError("trace", [(
            f"the trace window ({end - start_s:.0f} s) is shorter than one period ({length:.0f} s); "
            "widen window_start_s/window_end_s")])
    bounds = start_s + length * np.arange(count + 1)
    types = np.array([t or default_gpu for t in jobs.gpu_type])
    out: dict[str, list[float]] = {}
    for gpu in sorted(set(types.tolist())):
        mask = types == gpu
        integral = _integral_at(jobs.submit_s[mask], ends[mask], jobs.gpus[mask] * scale, bounds)
        out[gpu] = (np.diff(integral) / 3600.0).tolist()
    return out


def _integral_at(starts: np.ndarray, ends: np.ndarray, gpus: np.ndarray, at: np.ndarray) -> np.ndarray:
    """GPU-seconds of running jobs over [0, x) for each x in ``at`` (a step function, integrated exactly)."""
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([gpus, -gpus])
    order = np.argsort(times, kind="stable")
    times, deltas = times[order], deltas[order]
    running = np.cumsum(deltas)  # GPUs running just after each event
    area = np.concatenate([[0.0], np.cumsum(running[:-1] * np.diff(times))])  # integral up to each event
    idx = np.searchsorted(times, at, side="right") - 1
    result = np.where(idx >= 0, area[np.maximum(idx, 0)] + running[np.maximum(idx, 0)]
                      * (at - times[np.maximum(idx, 0)]), 0.0)
    return result


def _csv_rows(path: Path, required: tuple[str, ...], *, key: str, source: str) -> list[tuple[int, dict[str, str]]]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in (reader.fieldnames or [])]
            missing = [c for c in required if c not in header]
            if missing:
                raise CapacitySpecError(source, [
                    f"{key}: {path} has no column {missing[0]!r}; expected columns {','.join(required)}"])
            reader.fieldnames = header
            return [(i + 2, row) for i, row in enumerate(reader)]
    except FileNotFoundError:
        raise CapacitySpecError(source, [f"{key}: {path} not found (paths are relative to the demand file)"]) \
            from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CapacitySpecError(source, [f"{key}: {path} cannot be read as CSV ({exc})"]) from None


def describe(error: dict[str, Any], root: type[BaseModel]) -> str:
    """One pydantic error as ``key.path: what is wrong (got X)``, with a did-you-mean for unknown keys."""
    loc = error["loc"]
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "(top level)"
    if error["type"] == "extra_forbidden":
        fields = _fields_at(root, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), fields, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else (f"; known keys here: {', '.join(fields)}" if fields else "")
        return f"{key}: unknown key{hint}"
    if error["type"] == "missing":
        return f"{key}: required key is missing"
    given = error.get("input")
    shown = "" if isinstance(given, (dict, list, tuple)) or given is None else f" (got {given!r:.60})"
    return f"{key}: {error['msg'].removeprefix('Value error, ')}{shown}"


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        inner = [a for c in candidates for a in getattr(c, "__args__", ()) if isinstance(a, type)
                 and issubclass(a, BaseModel)]
        found = nested or inner
        if not found:
            return []
        model = found[0]
    return list(model.model_fields)
