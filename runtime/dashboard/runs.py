"""The dashboard's view of the runs directory: the same :class:`RunView` ``planner status`` reads.

Nothing here writes: runs are read with :func:`runtime.reports.run_view.load_run` (the
ledger through a private read-only copy, so a running controller is never blocked and
takes no lock of ours). :class:`RunsDir` remembers a cheap signature of each run's files
(sizes and mtimes) so the live streams re-read a run only when one of its files changed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from runtime.control.queue_record import is_queue_run
from runtime.errors import RuntimeFailure
from runtime.reports.queue_view import find_queues
from runtime.reports.run_report import figures
from runtime.reports.run_view import RunView, find_runs, is_run, load_run

__all__ = ["RunNotFound", "RunsDir", "run_detail", "run_row"]

# The files whose change means the view may have changed (the ledger's WAL grows with every heartbeat).
_WATCHED = ("state.json", "events.jsonl", "ledger.sqlite", "ledger.sqlite-wal", "summary.json",
            "work/status.json")
MAX_EVENTS = 2_000  # the event log shown on a run page: the newest this many lines


class RunNotFound(RuntimeFailure):
    """No run of that name directly under the runs directory."""


def _signature(run_dir: Path) -> tuple[Any, ...]:
    out = []
    for name in _WATCHED:
        try:
            st = (run_dir / name).stat()
            out.append((st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


class RunsDir:
    """The runs under ``root``, read on demand, each re-read only after its files changed."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self._cache: dict[str, tuple[tuple[Any, ...], RunView | str]] = {}

    def names(self) -> list[str]:
        """The runs directly under the root, then the jobs of each queue there as ``QUEUE_DIR/JOB``."""
        return [p.name for p in find_runs(self.root)] + [
            f"{q.name}/{p.name}" for q in find_queues(self.root) for p in find_runs(q)]

    def path(self, name: str) -> Path:
        """The run directory ``name`` names: a direct child of the root, or a direct child of a queue's
        run directory that is one (``QUEUE_DIR/JOB``), never anything else.

        Raises:
            RunNotFound: no such run (also for a name that tries to leave the root).
        """
        parts = name.split("/")
        missing = RunNotFound(f"no run {name!r} under {self.root}")
        if len(parts) > 2 or any(p in ("", ".", "..") or "\\" in p or "\x00" in p for p in parts):
            raise missing
        parent = self.root
        if len(parts) == 2:
            parent = self.root / parts[0]
            if parent.resolve().parent != self.root.resolve() or not is_queue_run(parent):
                raise missing
        candidate = parent / parts[-1]
        if candidate.resolve().parent != parent.resolve() or not is_run(candidate):
            raise missing
        return candidate

    def signature(self, names: list[str] | None = None) -> tuple[Any, ...]:
        """Sizes and mtimes of the runs' files: equal signatures, equal views."""
        try:
            names = self.names() if names is None else names
        except RuntimeFailure as exc:  # the runs directory is gone: that is a change too
            return ("error", str(exc))
        return tuple((n, _signature(self.root / n)) for n in names)

    def view(self, name: str) -> RunView:
        """The run's view (cached until its files change).

        Raises:
            RunNotFound: no such run.
            RuntimeFailure: its files cannot be read (the message says which).
        """
        path = self.path(name)
        sig = _signature(path)
        cached = self._cache.get(name)
        if cached is None or cached[0] != sig:
            try:
                cached = (sig, load_run(path))
            except RuntimeFailure as exc:
                cached = (sig, str(exc))
            self._cache[name] = cached
        if isinstance(cached[1], str):
            raise RuntimeFailure(cached[1])
        return cached[1]

    def rows(self) -> dict[str, Any]:
        """Every run, one row each, newest name last; unreadable runs listed with their reason."""
        rows, broken = [], []
        for name in self.names():
            try:
                rows.append(run_row(self.view(name), name=name))
            except RuntimeFailure as exc:
                broken.append({"name": name, "error": str(exc)})
        return {"root": str(self.root), "runs": rows, "broken": broken}


def run_row(view: RunView, *, name: str) -> dict[str, Any]:
    """One run for the runs list (``name``: as :meth:`RunsDir.names` gives it): ``planner status --json``'s
    object plus the numbers the page draws."""
    row = view.to_dict()
    fc = view.forecast
    row.update(
        name=name,
        eta_t=view.eta,
        deadline_t=view.deadline_at,
        as_of_t=view.as_of,
        started_t=view.started_at,
        forecast_budget_fraction=fc.budget_fraction if fc else None,
        slack_hours=_slack(view),
    )
    del row["timeline"]  # the list does not need it; the run page has it
    return row


def run_detail(view: RunView, *, name: str, now: float | None = None) -> dict[str, Any]:
    """Everything a run page shows: the row, the figures ``planner status`` prints, the curve,
    launches, timeline, thresholds, the raw event log and the final summary."""
    detail = run_row(view, name=name)
    detail.update(
        figures=[[k, v] for k, v in figures(view, now=time.time() if now is None else now)],
        curve=[list(p) for p in view.curve],
        segments=[asdict(s) for s in view.segments],
        timeline=[{"t": e.t, "kind": e.kind, "text": e.text, "spent_usd": e.spent_usd, "cost_usd": e.cost_usd}
                  for e in view.timeline],
        thresholds=list(view.thresholds),
        events=_events(view.run_dir),
        summary=_summary(view.run_dir),
    )
    return detail


def _slack(view: RunView) -> float | None:
    if view.deadline_at is None:
        return None
    if view.running:
        return (view.deadline_at - view.eta) / 3600 if view.eta is not None else None
    return (view.deadline_at - view.as_of) / 3600 if view.status == "completed" else None


def _events(run_dir: Path) -> list[dict[str, Any]]:
    from runtime.control.events import FILENAME, read_events

    return read_events(run_dir / FILENAME)[-MAX_EVENTS:]


def _summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
