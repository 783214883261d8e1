"""The training session's side of tracking (rank 0 only): what is logged, at which step.

Every ``[tracking].every_steps`` optimizer steps, and at every ``s.log({...})`` of the
user's, the trackers get -- at that same step -- the loss or the user's metrics together
with danlu's figures from ``meter.json`` (spend so far, spend rate, forecast, preemptions,
re-plans, lost steps); the pool and purchase option go in as tags whenever they change.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from runtime.tracking.backend import build_backends
from runtime.tracking.hub import TrackerHub
from runtime.tracking.launch import TrackingLaunch
from runtime.tracking.meter import MeterReader

__all__ = ["SessionTracking", "open_for_session"]


class SessionTracking:
    def __init__(self, launch: TrackingLaunch, hub: TrackerHub, work_dir: str | os.PathLike[str]):
        self.launch = launch
        self.hub = hub
        self.every = launch.spec.every_steps
        self._meter = MeterReader(work_dir)
        self._tags: dict[str, str] | None = None
        self._figures_at: int | None = None  # the step danlu's figures were last logged at (once per step)

    def on_step(self, step: int, loss: float | None) -> None:
        """After each optimizer step (cheap unless this step is logged)."""
        if step % self.every:
            return
        self._emit(step, {"loss": loss} if loss is not None else {})

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._emit(step, dict(metrics))

    def _emit(self, step: int, metrics: dict[str, float]) -> None:
        meter = self._meter.read()
        if meter is not None and step != self._figures_at:
            self._figures_at = step
            metrics = {**meter.metrics(), **metrics}
            tags = meter.tags()
            if tags != self._tags:
                self._tags = tags
                self.hub.set_tags(step, tags)
        if metrics:
            self.hub.log_metrics(step, metrics)

    def close(self, timeout_s: float) -> None:
        self.hub.close(timeout_s)


def open_for_session(work_dir: str | os.PathLike[str], *, resumed_step: int | None,
                     environ: Mapping[str, str] | None = None) -> SessionTracking | None:
    """The session's trackers, started in the background; None when the run tracks nothing.

    Raises:
        ContractError: ``DANLU_TRACKING`` is malformed.
    """
    launch = TrackingLaunch.from_env(environ)
    if launch is None:
        return None
    # A launch that starts from scratch after a lost one (no checkpoint had committed) trains
    # steps 1.. again: for the trackers it resumed at step 0.
    start = resumed_step if resumed_step is not None else 0
    hub = TrackerHub(build_backends(launch, cwd=Path.cwd()), resumed_step=start)
    return SessionTracking(launch, hub, work_dir)
