"""``planner simulate --plot``: work done over time for each policy on one window."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from danlu import atomic_file
from planner.policy import ON_DEMAND
from planner.simulate import JobModel, SimResult
from pricing.traces import MultiPoolTrace


def plot_progress(
    results: Mapping[str, SimResult], trace: MultiPoolTrace, model: JobModel, path: str | Path, *, home_pool: str
) -> Path:
    """Write a PNG of progress vs time, with the home pool's spot availability shaded
    (and, for several pools, the ticks where any pool is up, lighter).  Written
    atomically: a reader never sees a half-written file."""
    path = Path(path)
    g = trace.tick_hours
    last = max(len(r.progress) for r in results.values())
    ticks = min(max(last, int(np.ceil(model.deadline_hours / g))) + 1, trace.ticks)
    hours = np.arange(ticks + 1) * g

    # a bare Figure renders with the Agg canvas: no pyplot state, no display needed
    fig = Figure(figsize=(10, 6.5), dpi=110)
    ax, lanes = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    home = trace.available[trace.pools.index(home_pool), :ticks]
    if len(trace.pools) > 1:
        _shade(ax, hours, trace.available[:, :ticks].any(axis=0), "#d9ecd9", "spot up in some pool")
    _shade(ax, hours, home, "#9fd39f", f"spot up in {home_pool}")
    for name, result in results.items():
        progress = np.concatenate([[0.0], result.progress])
        ax.step(np.arange(progress.size) * g, progress, where="post", label=_label(name, result), linewidth=1.6)
    ax.plot([0, model.deadline_hours], [0, model.job_hours], ":", color="grey", label="uniform progress line")
    ax.axvline(model.deadline_hours, color="firebrick", linestyle="--", linewidth=1, label="deadline")
    ax.axhline(model.job_hours, color="black", linewidth=0.6)
    ax.set_ylabel("work done (hours)")
    ax.set_title(
        f"C={model.job_hours:g} h, D={model.deadline_hours:g} h, d={model.restart_hours:g} h "
        f"on {len(trace.pools)} pool(s), ticks of {trace.gap_seconds:g} s"
    )
    ax.set_ylim(0, model.job_hours * 1.05)
    ax.legend(loc="upper left", fontsize=8)
    _lanes(lanes, results, g)
    lanes.axvline(model.deadline_hours, color="firebrick", linestyle="--", linewidth=1)
    lanes.set_xlabel("hours since start")
    lanes.set_xlim(0, hours[-1])
    fig.tight_layout()
    _save_atomically(fig, path)
    return path


def _label(name: str, result: SimResult) -> str:
    late = "" if result.deadline_met else ", LATE"
    return f"{name}: ${result.cost_usd:,.2f}{late}"


def _lanes(ax, results: Mapping[str, SimResult], g: float) -> None:
    """One lane per policy: what it ran on in each tick (spot, on-demand or nothing)."""
    for row, result in enumerate(results.values()):
        for on_demand, color in ((False, "#2e8b57"), (True, "#e07b39")):
            used = np.array([t is not None and (t == ON_DEMAND) == on_demand for t in result.targets])
            edges = np.flatnonzero(np.diff(np.concatenate([[0], used.astype(np.int8), [0]])))
            spans = [(start * g, (stop - start) * g) for start, stop in zip(edges[::2], edges[1::2], strict=True)]
            ax.broken_barh(spans, (row - 0.35, 0.7), color=color)
    ax.set_yticks(range(len(results)), list(results))
    ax.set_ylim(len(results) - 0.5, -0.5)
    ax.set_title("instance in use: green = spot, orange = on-demand, blank = none", fontsize=8)


def _shade(ax, hours: np.ndarray, up: np.ndarray, color: str, label: str) -> None:
    edges = np.flatnonzero(np.diff(np.concatenate([[0], up.astype(np.int8), [0]])))
    for n, (start, stop) in enumerate(zip(edges[::2], edges[1::2], strict=True)):
        ax.axvspan(hours[start], hours[stop], color=color, linewidth=0, label=label if n == 0 else None)


def _save_atomically(fig, path: Path) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    atomic_file.write_bytes(path, buffer.getvalue())