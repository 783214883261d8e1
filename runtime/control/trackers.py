"""The job's trackers as a run drives them (:mod:`runtime.tracking`): their shared stores readied
before any node starts, a lost launch's values forgotten before the next launch resumes, the run
report published at the end. A tracker's problem is an event, never the run's failure."""

from __future__ import annotations

from pathlib import Path

from planner.job import JobSpec
from runtime.control.events import EventLog
from runtime.tracking import final as tracking_final
from runtime.tracking import rewind as tracking_rewind
from runtime.tracking import setup as tracking_setup


def prepare(run_dir: Path, job: JobSpec, *, cwd: str, events: EventLog) -> None:
    """Ready the trackers' shared stores before any node starts (runtime.tracking.setup)."""
    for problem in tracking_setup.prepare_trackers(run_dir, job, cwd=cwd):
        events.emit("tracking_problem", message=problem)


def rewind(run_dir: Path, job: JobSpec, *, cwd: str, events: EventLog, step: int) -> None:
    """Before a launch resumes at ``step``: the trackers that would keep two values of a step trained
    again forget the lost launch's (runtime.tracking.rewind)."""
    if not job.tracking.enabled:
        return
    done, problems = tracking_rewind.rewind_trackers(run_dir, job, step=step, cwd=cwd)
    for what in done:
        events.emit("tracking_rewind", step=step, message=what)
    for problem in problems:
        events.emit("tracking_problem", message=problem)


def publish_report(run_dir: Path, job: JobSpec, *, cwd: str, events: EventLog) -> None:
    """The run report into the job's trackers; a tracker's failure is an event, never the run's."""
    try:
        problems = tracking_final.publish_report(run_dir, job, cwd=cwd)
    except Exception as exc:  # noqa: BLE001 -- the report could not even be built: say so, the run has ended anyway
        problems = [f"the run report could not be published ({type(exc).__name__}: {exc})"]
    for problem in problems:
        events.emit("tracking_problem", message=problem)
