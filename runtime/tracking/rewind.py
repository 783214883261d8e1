"""Before a launch that resumes, the controller rewinds the trackers that would keep both values of a step.

A preemption that gives the workers no time to checkpoint loses the steps they trained
since the last committed checkpoint k; the next launch resumes at k and trains k+1.. again,
logging them again. The re-trained values are the ones that describe the model the run
produces, so they are the ones a tracker should show; the lost launch's values are kept
apart, as evidence of what the preemption cost. Per tracker (docs/dashboard.md):

* TensorBoard: the resuming launch itself writes TensorBoard's restart marker at k+1 (its
  ``purge_step``), and TensorBoard drops the earlier events past k from every chart;
* MLflow: nothing can replace a logged value, so the controller does it here, before the
  launch starts (:meth:`runtime.tracking.mlflow_backend.MlflowBackend.rewind`): the controller,
  unlike a training process, is not preempted half-way through;
* W&B: a run's history only grows in step order, and W&B itself ignores a value logged at
  a step the run has passed, so nothing is done: the lost launch's values stay.

A tracker that fails here is reported (the controller logs a ``tracking_problem`` event);
the run goes on.
"""

from __future__ import annotations

import os
from pathlib import Path

from planner.job import JobSpec
from runtime.tracking.backend import build_backends
from runtime.tracking.launch import TrackingLaunch, run_key

__all__ = ["rewind_trackers"]


def rewind_trackers(run_dir: str | os.PathLike[str], job: JobSpec, *, step: int,
                    cwd: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """Rewind each tracker that can to ``step``: (what was done, the problems met)."""
    if not job.tracking.enabled:
        return [], []
    run_dir = Path(run_dir).resolve()
    launch = TrackingLaunch(key=run_key(run_dir), job=job.name, run_dir=str(run_dir), spec=job.tracking)
    done: list[str] = []
    problems: list[str] = []
    for backend in build_backends(launch, cwd=cwd):
        if not hasattr(backend, "rewind"):
            continue
        try:
            backend.open(resumed_step=None)
            try:
                what = backend.rewind(step)
            finally:
                backend.close()
        except Exception as exc:  # noqa: BLE001 -- a tracker's failure is reported, never the run's
            problems.append(f"{backend.name} could not be rewound to step {step} ({type(exc).__name__}: {exc}); "
                            "it keeps both values of the steps trained again")
            continue
        if what:
            done.append(what)
    return done, problems
