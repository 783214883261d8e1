"""What a run directory says, read into one :class:`RunView` for ``planner status`` and ``report``.

A run directory (see :mod:`runtime.control.controller`) is read, never written: ``state.json``
for the job, the counters and the launches; ``events.jsonl`` for the timeline;
``ledger.sqlite`` for every dollar; ``summary.json`` once the controller has exited;
the checkpoint store and ``work/status.json`` for the progress of a run still going::

    view = load_run("runs/gpt-7b-20261130-113920")
    view.status, view.progress, view.spent_usd, view.forecast.total_usd, view.eta
    for entry in view.timeline:                  # launches and decisions, oldest first
        print(entry.t, entry.kind, entry.text, entry.spent_usd)

The ledger is read through :class:`runtime.accounting.ledger.Ledger` on a private copy taken with
SQLite's backup API, so the figures are the ledger's own and the controller is never
blocked. The copy is taken read-only: ``immutable`` when no write-ahead log is beside the
database (no controller has it open, and SQLite must not leave ``-wal``/``-shm`` files in
the run directory), a plain read-only connection while a controller writes.

Times are the run's simulated POSIX seconds (the clock billing uses; see
:mod:`runtime.control.run_state`). ``as_of`` is the last sign of life in the files: the last
event or the last billed heartbeat; spend is what the ledger has billed up to then.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.job import JobSpec
from pricing.pool import Pool
from runtime.accounting import forecast
from runtime.accounting.ledger import FILENAME as LEDGER_FILE
from runtime.accounting.ledger import Interval, Ledger, LedgerSnapshot, PoolSpend
from runtime.control.events import FILENAME as EVENTS_FILE
from runtime.control.events import read_events
from runtime.control.run_state import STATE_FILE, SUMMARY_FILE, LaunchRecord, RunState, load_state
from runtime.control.run_summary import work_done_units
from runtime.errors import CheckpointError, ContractError, RuntimeFailure
from runtime.providers.cloud_api import TAG_HOME, TAG_RUN
from runtime.training import contract
from runtime.training.store import CheckpointStore

__all__ = [
    "NotARunError",
    "RunView",
    "RunViewError",
    "Segment",
    "TimelineEntry",
    "default_runs_dir",
    "find_runs",
    "is_run",
    "load_run",
]

RUNS_DIR_ENV = "DANLU_RUNS_DIR"
DEFAULT_RUNS_DIR = "runs"  # `planner run` puts runs under runs/<job>-<time> of the current directory


class RunViewError(RuntimeFailure):
    """A file of a run directory cannot be read; the message names it and the fix."""


class NotARunError(RunViewError):
    """The path is missing, not a directory, or holds no run (no ``state.json``)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One launch: ``nodes`` of one pool from provisioning to release (``end`` None: still up)."""

    launch_id: str
    pool_id: str
    label: str
    purchase: str
    nodes: int
    hourly_usd: float
    start: float
    end: float | None
    start_step: int
    end_step: int | None
    outcome: str | None
    reason: str
    cost_usd: float


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One line of the timeline: a launch (``segment`` set) or a decision, at simulated time ``t``.

    ``spent_usd`` is the run's cumulative spend at ``t``; ``cost_usd`` what a launch cost.
    """

    t: float
    kind: str
    text: str
    spent_usd: float
    cost_usd: float | None = None
    segment: Segment | None = None


@dataclass(frozen=True, slots=True)
class RunView:
    """Everything ``planner status`` and ``planner report`` show about one run."""

    run_dir: Path
    name: str
    status: str
    cause: str | None
    controller_exited: bool
    unit: str
    work_total: float
    work_done: float | None
    steps: int
    training_step: int | None
    preemptions: int
    replans: int
    failures: int
    lost_steps: int
    spent_usd: float
    budget_usd: float | None
    burn_usd_per_hour: float
    forecast: forecast.Forecast | None
    started_at: float
    as_of: float
    last_activity: float | None
    deadline_at: float | None
    time_scale: float
    pool: str | None
    by_pool: tuple[PoolSpend, ...]
    snapshot: LedgerSnapshot
    segments: tuple[Segment, ...]
    timeline: tuple[TimelineEntry, ...]
    thresholds: tuple[float, ...]
    alerts_sent: tuple[str, ...]
    problems: tuple[str, ...]
    alerts_queued: int = 0
    # The tags its cloud instances carry (danlu-run, danlu-home): how to find them in a cloud's console.
    # None for a run on this machine.
    cloud_tags: dict[str, str] | None = None

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def progress(self) -> float | None:
        """Committed work as a fraction of the job (0..1), None when unknown."""
        if self.work_done is None or not self.work_total:
            return None
        return min(self.work_done / self.work_total, 1.0)

    @property
    def eta(self) -> float | None:
        """When the work is expected to finish (simulated POSIX seconds); only while running."""
        return self.forecast.expected_end if self.running and self.forecast is not None else None

    @property
    def hours(self) -> float:
        """Simulated hours from the start to ``as_of``."""
        return (self.as_of - self.started_at) / 3600.0

    @property
    def curve(self) -> tuple[tuple[float, float], ...]:
        """Cumulative spend ``((t, usd), ...)``, one point per change of burn rate."""
        return self.snapshot.curve

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``planner status --json``."""
        fc = self.forecast
        return {
            "run_dir": str(self.run_dir), "job": self.name, "status": self.status, "cause": self.cause,
            "controller_exited": self.controller_exited, "unit": self.unit, "work_total": self.work_total,
            "work_done": self.work_done, "progress": self.progress, "steps": self.steps,
            "training_step": self.training_step, "preemptions": self.preemptions, "replans": self.replans,
            "failures": self.failures, "lost_steps": self.lost_steps, "spent_usd": self.spent_usd,
            "budget_usd": self.budget_usd, "burn_usd_per_hour": self.burn_usd_per_hour,
            "forecast_usd": fc.total_usd if fc else None, "remaining_usd": fc.remaining_usd if fc else None,
            "remaining_hours": fc.remaining_hours if fc else None, "eta": _iso(self.eta),
            "deadline": _iso(self.deadline_at), "slack_hours": fc.slack_hours if fc and self.running else None,
            "started": _iso(self.started_at), "as_of": _iso(self.as_of), "hours": self.hours,
            "time_scale": self.time_scale, "pool": self.pool, "cloud_tags": self.cloud_tags,
            "pools": [{"pool": p.pool, "purchase": p.purchase, "node_hours": p.node_hours, "cost_usd": p.usd}
                      for p in self.by_pool],
            "timeline": [{"t": _iso(e.t), "kind": e.kind, "text": e.text, "spent_usd": e.spent_usd,
                          "cost_usd": e.cost_usd} for e in self.timeline],
            "alerts_sent": list(self.alerts_sent), "alerts_queued": self.alerts_queued,
            "problems": list(self.problems),
        }


def default_runs_dir() -> Path:
    """Where ``planner run`` puts runs: ``$DANLU_RUNS_DIR``, else ``runs/`` of the current directory."""
    return Path(os.environ.get(RUNS_DIR_ENV) or DEFAULT_RUNS_DIR)


def is_run(path: Path) -> bool:
    """True when ``path`` is a run directory (it holds a ``state.json``)."""
    return (path / STATE_FILE).is_file()


def find_runs(root: str | os.PathLike[str]) -> list[Path]:
    """The run directories directly under ``root``, by name (``<job>-<start time>`` by default).

    Raises:
        NotARunError: ``root`` is missing or not a directory.
    """
    root = Path(root)
    if not root.is_dir():
        raise NotARunError(
            f"{root}: no such runs directory. To fix: pass a RUN_DIR, run from the directory that holds "
            f"runs/, or set {RUNS_DIR_ENV}."
        )
    return sorted(p for p in root.iterdir() if p.is_dir() and is_run(p))


def load_run(run_dir: str | os.PathLike[str]) -> RunView:
    """Read the run in ``run_dir`` (finished, or still in progress) without writing anything.

    Raises:
        NotARunError: ``run_dir`` is missing, not a directory, or holds no ``state.json``.
        RunViewError: a file of the run cannot be read (the message names it).
        RunStateError: ``state.json`` is not a run state this version reads.
    """
    path = Path(run_dir)
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise NotARunError(f"{path}: {what}. To fix: pass the run directory that `planner run` printed.")
    if not is_run(path):
        raise NotARunError(
            f"{path}: not a run directory (no {STATE_FILE}). To fix: pass the run directory that `planner run` "
            "printed, or omit RUN_DIR to list every run."
        )
    state = load_state(path)
    job = _job(state, path)
    summary = _summary(path)
    events = read_events(path / EVENTS_FILE)
    intervals, snapshot, by_launch, sent = _read_ledger(path / LEDGER_FILE)
    problems: list[str] = []

    billed = [iv.billed_end() for iv in intervals]
    as_of = max([state.origin, *billed, *(e["t"] for e in events if isinstance(e.get("t"), (int, float)))])
    snapshot = replace(snapshot, taken_at=as_of)
    # Real seconds of the last event or heartbeat: how long ago the controller was last heard of.
    heard = [e["wall"] for e in events if isinstance(e.get("wall"), (int, float))]
    heard += [state.origin + (b - state.origin) / state.time_scale for b in billed]

    if summary is not None and "work_done" in summary:
        work_done: float | None = float(summary["work_done"])
        steps = int(summary.get("steps", state.steps))
    else:
        work_done, steps = _committed(job, state, problems)
    if state.status != "running" and state.current is not None:
        problems.append(f"the run ended but launch {state.current.launch_id}'s nodes were not released and may still "
                        f"be billed: `planner cancel {path}` releases them")
    deadline_at = state.origin + job.constraints.deadline_hours * 3600 if job.constraints.deadline_hours else None
    pool = _pool(state)
    segments = tuple(_segment(record, by_launch) for record in state.launches)
    return RunView(
        run_dir=path, name=job.name, status=state.status, cause=state.cause,
        controller_exited=summary is not None, unit=job.workload.unit, work_total=job.workload.amount,
        work_done=work_done, steps=steps, training_step=_training_step(path, state),
        preemptions=state.preemptions, replans=state.replans, failures=state.failures, lost_steps=state.lost_steps,
        spent_usd=snapshot.total_usd, budget_usd=job.constraints.budget_usd,
        burn_usd_per_hour=snapshot.burn_usd_per_hour,
        forecast=_forecast(state, job, pool, snapshot.total_usd, work_done, as_of, deadline_at),
        started_at=state.origin, as_of=as_of, last_activity=max(heard) if heard else None, deadline_at=deadline_at,
        time_scale=state.time_scale,
        pool=pool[0].label(pool[1]) if pool is not None and state.status == "running" else None,
        by_pool=snapshot.by_pool, snapshot=snapshot, segments=segments,
        timeline=_timeline(events, segments, intervals),
        thresholds=tuple(job.alerts.thresholds), alerts_sent=tuple(sorted(sent)), problems=tuple(problems),
        alerts_queued=_queued_alerts(path / "outbox"),
        cloud_tags={TAG_RUN: state.tag(path), TAG_HOME: state.home} if state.home else None,
    )


def _queued_alerts(outbox: Path) -> int:
    """Alerts the outbox still waits to deliver, read without touching it (the mailer owns it)."""
    count = 0
    for state_file in outbox.glob("*.json"):
        try:
            count += json.loads(state_file.read_text(encoding="utf-8")).get("status") == "queued"
        except (OSError, ValueError, AttributeError):
            continue
    return count


# -- reading the files ------------------------------------------------------------------


def _job(state: RunState, path: Path) -> JobSpec:
    try:
        return JobSpec.model_validate(state.job)
    except ValidationError as exc:
        raise RunViewError(
            f"{path / STATE_FILE}: key 'job' is not a job this version reads ({exc.error_count()} problems, first: "
            f"{exc.errors()[0]['msg']}). To fix: read it with the danlu version that started the run."
        ) from exc


def _summary(path: Path) -> dict[str, Any] | None:
    file = path / SUMMARY_FILE
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RunViewError(f"{file}: unreadable ({exc}). To fix: move it away; the view is rebuilt from "
                           f"{STATE_FILE}, {EVENTS_FILE} and {LEDGER_FILE}.") from exc
    if not isinstance(data, dict):
        raise RunViewError(f"{file}: expected a JSON object. To fix: move it away.")
    return data


def _read_ledger(db: Path) -> tuple[list[Interval], LedgerSnapshot, dict[str, float], frozenset[str]]:
    """The ledger's figures, from a private copy (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="danlu-view-") as tmp:
        if db.exists():
            _copy_ledger(db, Path(tmp) / LEDGER_FILE)
        ledger = Ledger(tmp)
        try:
            return ledger.intervals(), ledger.snapshot(), ledger.by_launch(), ledger.sent_alerts()
        finally:
            ledger.disconnect()


def _copy_ledger(source: Path, target: Path) -> None:
    # A controller that opens the ledger between the check and the read is caught by the
    # retry: an immutable read of a file being initialised fails, a read-only one waits.
    live = source.with_name(source.name + "-wal").exists()
    modes = ("mode=ro",) if live else ("immutable=1", "mode=ro")
    for i, mode in enumerate(modes):
        try:
            src = sqlite3.connect(f"{source.resolve().as_uri()}?{mode}", uri=True, timeout=10.0)
            try:
                dst = sqlite3.connect(target)
                try:
                    src.backup(dst)
                finally:
                    dst.close()
            finally:
                src.close()
            return
        except sqlite3.Error as exc:
            if i == len(modes) - 1:
                raise RunViewError(f"{source}: cannot read the spend ledger ({exc}). To fix: check that the file "
                                   "is readable and was written by `planner run`.") from exc


def _committed(job: JobSpec, state: RunState, problems: list[str]) -> tuple[float | None, int]:
    """Work and step of the latest committed checkpoint (what a resume would start from)."""
    try:
        store = CheckpointStore(state.checkpoint_dir)
        return work_done_units(job, store), store.latest_step() or 0
    except (CheckpointError, OSError, ValueError, ImportError) as exc:
        problems.append(f"checkpoint store {state.checkpoint_dir} unreadable ({exc}); steps are from {STATE_FILE}")
        return None, state.steps


def _training_step(path: Path, state: RunState) -> int | None:
    """The step the workers of the active launch report (may be ahead of the last checkpoint)."""
    current = state.current
    if current is None:
        return None
    try:
        status = contract.read_status(path / "work")
    except ContractError:
        return None
    return status.step if status is not None and status.attempt == current.launch_id else None


def _pool(state: RunState) -> tuple[Pool, int] | None:
    if state.pool is not None and state.nodes is not None:
        return state.pool, state.nodes
    return (state.launches[-1].pool, state.launches[-1].nodes) if state.launches else None


def _forecast(state: RunState, job: JobSpec, current: tuple[Pool, int] | None, spent: float, work_done: float | None,
              as_of: float, deadline_at: float | None) -> forecast.Forecast | None:
    """As the controller forecasts: spend so far plus the work left on the current pool at its rate."""
    budget = job.constraints.budget_usd
    if state.status == "completed":
        return forecast.forecast(spent, 0.0, 0.0, at=as_of, budget_usd=budget, deadline_at=deadline_at)
    if current is None or work_done is None:
        return None
    pool, nodes = current
    rate = state.known_rate(job, pool, nodes)
    if rate is None:
        return None
    left = max(job.workload.amount - work_done, 0.0)
    return forecast.forecast(spent, left / rate, pool.hourly_usd * nodes, at=as_of, budget_usd=budget,
                             deadline_at=deadline_at)


def _segment(record: LaunchRecord, by_launch: dict[str, float]) -> Segment:
    pool = record.pool
    return Segment(
        launch_id=record.launch_id, pool_id=pool.id, label=record.label(), purchase=pool.purchase,
        nodes=record.nodes, hourly_usd=pool.hourly_usd, start=record.provisioned_at, end=record.released_at,
        start_step=record.start_step, end_step=record.end_step, outcome=record.outcome, reason=record.reason,
        cost_usd=by_launch.get(record.launch_id, 0.0),
    )


# -- the timeline -----------------------------------------------------------------------

# Events worth a line of their own; node_up/node_down, launch and launch_end are folded
# into the launch segments, and the rest (heartbeats of the protocol) stay in events.jsonl.
_SHOWN = {
    "run_started": "started: {job} on the {provider} provider, policy {policy}",
    "run_resumed": "controller resumed",
    "plan": "plan: {pool} (expected ${expected_cost_usd:,.2f}, {expected_hours:,.2f} h)",
    "replan": "re-plan: {pool} ({reason})",
    "notice": "{cloud} {kind} notice on {node}",
    "preemption": "preempted at step {step}: {pool} cools down; interruptions/h {prior_rate} -> {interruption_rate}",
    "phase_end": "phase end at step {step}: {pool} is left after {hours} h",
    "too_slow": "too slow for the deadline: {pool} is left ({reason})",
    "held_start": "held capacity started: {pool} is left ({reason})",
    "held_changed": "held reservations changed on resume: {change}",
    "failure": "failure {failures} of {max_restarts} allowed: {cause}",
    "gpus_unmatched": "launch {launch}: {message}",
    "steps_unmatched": "launch {launch}: {message}",
    "budget_cap": "budget cap: {reason}",
    "recovered": "recovered after a controller restart (released {stale_nodes})",
    "run_end": "ended: {status}",
    "tracking_problem": "tracking: {message}",
    "tracking_rewind": "tracking: {message}",
}


def _timeline(events: list[dict[str, Any]], segments: tuple[Segment, ...],
              intervals: list[Interval]) -> tuple[TimelineEntry, ...]:
    entries = [
        TimelineEntry(seg.start, "launch", _launch_text(seg), _spent_at(intervals, seg.start), seg.cost_usd, seg)
        for seg in segments
    ]
    for event in events:
        template = _SHOWN.get(event.get("event", ""))
        t = event.get("t")
        if template is None or not isinstance(t, (int, float)):
            continue
        if event["event"] == "replan" and event.get("pool") is None:
            text = f"re-plan found no plan: {event.get('reason')}"
        elif event["event"] == "run_end" and event.get("cause"):
            text = f"ended: {event['status']} ({event['cause']})"
        else:
            try:
                text = template.format(**event)
            except (KeyError, ValueError, IndexError):
                text = f"{event['event']}: " + ", ".join(f"{k}={v}" for k, v in event.items()
                                                         if k not in ("seq", "event", "t", "wall"))
        entries.append(TimelineEntry(float(t), event["event"], text, _spent_at(intervals, float(t))))
    entries.sort(key=lambda e: (e.t, e.kind == "launch"))  # the decision before the launch it made
    return tuple(entries)


def _launch_text(seg: Segment) -> str:
    steps = f"steps {seg.start_step}-{seg.end_step}" if seg.end_step is not None else f"from step {seg.start_step}"
    end = f"{seg.outcome}" + (f" ({seg.reason})" if seg.reason and seg.reason != seg.outcome else "")
    return f"launch {seg.launch_id}: {seg.label}, {steps}, " + (end if seg.outcome else "running")


def _spent_at(intervals: list[Interval], t: float) -> float:
    """Cumulative spend at ``t``: every interval billed up to ``t`` (or its end, when earlier)."""
    return sum(iv.hourly_usd * iv.nodes * max(0.0, min(iv.billed_end(), t) - iv.start) / 3600.0
               for iv in intervals)


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
