"""Before the first launch, the controller readies the trackers that keep shared state.

MLflow's sqlite store creates and migrates its tables on first use, which takes seconds;
a training process preempted in the middle of that leaves a half-migrated database that
no later launch can open (``table _alembic_tmp_experiments already exists``). So the
controller -- which nothing preempts -- opens the store, the experiment and the run once
before any node starts; the launches then only find the run. A tracker that fails here is
reported (the controller logs a ``tracking_problem`` event) and the run goes on.
"""

from __future__ import annotations

import os
from pathlib import Path

from planner.job import JobSpec
from runtime.tracking.backend import build_backends
from runtime.tracking.launch import TrackingLaunch, run_key

__all__ = ["prepare_trackers"]


def prepare_trackers(run_dir: str | os.PathLike[str], job: JobSpec, *, cwd: str | os.PathLike[str]) -> list[str]:
    """Open (and close) each tracker that has shared state to set up; returns the problems met."""
    if not job.tracking.enabled:
        return []
    run_dir = Path(run_dir).resolve()
    launch = TrackingLaunch(key=run_key(run_dir), job=job.name, run_dir=str(run_dir), spec=job.tracking)
    problems = []
    for backend in build_backends(launch, cwd=cwd):
        if not getattr(backend, "needs_setup", False):
            continue
        try:
            backend.open(resumed_step=None)
            backend.close()
        except Exception as exc:  # noqa: BLE001 -- a tracker's failure is reported, never the run's
            problems.append(f"{backend.name} could not be set up ({type(exc).__name__}: {exc}); the launches "
                            "will try again")
    return problems
