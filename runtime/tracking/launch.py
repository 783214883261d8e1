"""``DANLU_TRACKING``: the controller tells each launch which trackers to log to, and as which run.

One danlu run is many launches (a preemption ends one, a re-plan starts the next, perhaps
on another cloud); the trackers must see one run. Every launch therefore carries the
run's *key* -- the run directory's name and a hash of its absolute path, so two runs
both called ``run`` stay apart -- and each backend finds its run by it (an MLflow tag,
the W&B run id, the TensorBoard sub-directory).

The variable holds JSON: ``{"key": ..., "job": ..., "run_dir": ..., "spec": <[tracking]>}``.
It never holds a secret: tracker credentials stay in the environment the user set
(``WANDB_API_KEY``, ``MLFLOW_TRACKING_PASSWORD``), which the launch inherits.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from planner.job import JobSpec
from planner.job_tracking import Tracking
from runtime.errors import ContractError
from runtime.tracking import ENV_TRACKING

__all__ = ["ENV_TRACKING", "TrackingLaunch", "launch_env", "run_key"]


def run_key(run_dir: str | os.PathLike[str]) -> str:
    """``<run directory name>-<8 hex of its absolute path>``, in the characters every tracker accepts."""
    path = Path(run_dir).resolve()
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", path.name).strip("_.")[:80] or "run"
    return f"{slug}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"


@dataclass(frozen=True, slots=True)
class TrackingLaunch:
    """What one launch needs to log to the run's trackers."""

    key: str
    job: str
    run_dir: str
    spec: Tracking

    def to_env(self) -> dict[str, str]:
        payload = {"key": self.key, "job": self.job, "run_dir": self.run_dir,
                   "spec": self.spec.model_dump(exclude_none=True)}
        return {ENV_TRACKING: json.dumps(payload, separators=(",", ":"))}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TrackingLaunch | None:
        """The launch's trackers, or None when the run tracks nothing.

        Raises:
            ContractError: the variable is not what :meth:`to_env` writes.
        """
        raw = (os.environ if environ is None else environ).get(ENV_TRACKING)
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return cls(key=str(data["key"]), job=str(data["job"]), run_dir=str(data["run_dir"]),
                       spec=Tracking.model_validate(data["spec"]))
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            raise ContractError(f"{ENV_TRACKING} is not valid ({exc}). To fix: unset it; `planner run` sets it "
                                "from the job's [tracking].") from exc


def launch_env(job: JobSpec, run_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The variables a launch of ``job`` in ``run_dir`` gets (none when the job tracks nothing)."""
    if not job.tracking.enabled:
        return {}
    path = Path(run_dir).resolve()
    return TrackingLaunch(key=run_key(path), job=job.name, run_dir=str(path), spec=job.tracking).to_env()
