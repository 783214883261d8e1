"""At the end of a run, the controller adds the run report to the run's tracker runs.

The same report ``planner report --html`` writes (:mod:`runtime.reports.run_report`, from the
same :class:`~runtime.reports.run_view.RunView`), plus ``summary.json``, the final figures at
the last step, and the run's end as the tracker run's status. A tracker that fails here is
reported (returned, and logged by the controller as a ``tracking_problem`` event); the run's
own end is never changed by it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from planner.job import JobSpec
from runtime.tracking.backend import build_backends
from runtime.tracking.hub import TrackerHub
from runtime.tracking.launch import TrackingLaunch, run_key

__all__ = ["REPORT_NAME", "SUMMARY_NAME", "publish_report"]

REPORT_NAME = "danlu-report.html"
SUMMARY_NAME = "danlu-summary.json"
_STATUS = {"completed": "FINISHED", "cancelled": "KILLED"}  # anything else ended the run FAILED


def publish_report(run_dir: str | os.PathLike[str], job: JobSpec, *, cwd: str | os.PathLike[str],
                   timeout_s: float = 60.0) -> list[str]:
    """Attach the report of the run in ``run_dir`` to its trackers; returns the problems met (empty: none)."""
    if not job.tracking.enabled:
        return []
    from runtime.reports.run_report import figures, render_html, render_png
    from runtime.reports.run_view import load_run

    run_dir = Path(run_dir).resolve()
    view = load_run(run_dir)
    launch = TrackingLaunch(key=run_key(run_dir), job=job.name, run_dir=str(run_dir), spec=job.tracking)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="danlu-report-") as tmp:
        report = Path(tmp) / REPORT_NAME
        report.write_text(render_html(view, render_png(view)), encoding="utf-8")
        hub = TrackerHub(build_backends(launch, cwd=cwd), resumed_step=None, report=problems.append)
        step = view.steps
        final = {"danlu/spend_usd": view.spent_usd, "danlu/preemptions": float(view.preemptions),
                 "danlu/replans": float(view.replans), "danlu/lost_steps": float(view.lost_steps)}
        hub.log_metrics(step, final)
        hub.set_tags(step, {"danlu.status": view.status, "danlu.cause": view.cause or ""})
        hub.call("text", step, "danlu/report", "\n".join(f"* **{k}**: {v}" for k, v in figures(view, now=view.as_of)))
        hub.log_file(report, REPORT_NAME)
        summary = run_dir / "summary.json"
        if summary.exists():
            copy = Path(tmp) / SUMMARY_NAME  # MLflow names an artifact after its file
            copy.write_bytes(summary.read_bytes())
            hub.log_file(copy, SUMMARY_NAME)
        hub.call("finish", _STATUS.get(view.status, "FAILED"))
        hub.close(timeout_s)
    return problems
