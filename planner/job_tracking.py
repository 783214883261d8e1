"""``[tracking]`` of job.toml: which experiment trackers a run's training session logs to.

::

    [tracking]
    every_steps = 10                         # danlu's figures (and the loss) every N optimizer steps

    [tracking.mlflow]
    tracking_uri = "sqlite:///mlflow.db"     # default: MLflow's own (MLFLOW_TRACKING_URI, else ./mlflow.db)
    experiment = "digits"                    # default: the job's name
    # artifact_location = "..."              # a new experiment's artifacts (default: beside a sqlite store)

    [tracking.wandb]
    project = "digits"
    mode = "offline"                         # or "online" (needs WANDB_API_KEY in the environment)
    dir = "wandb-runs"                       # where W&B writes its run directory (default: the cwd)

    [tracking.tensorboard]
    log_dir = "runs/tb"                      # event files go to <log_dir>/<run directory name>/

The runtime (:mod:`runtime.tracking`) carries the logging out; the planner only validates.
Relative paths are relative to the training processes' working directory (where
``planner run`` started).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["MlflowTracking", "TensorboardTracking", "Tracking", "WandbTracking"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, str_max_length=4096)


class MlflowTracking(_Section):
    tracking_uri: str | None = Field(default=None, min_length=1)
    experiment: str | None = Field(default=None, min_length=1, max_length=500)
    artifact_location: str | None = Field(default=None, min_length=1)

    @field_validator("tracking_uri")
    @classmethod
    def _no_credentials(cls, value: str | None) -> str | None:
        # The URI goes into the launch environment and the event log: never a password.
        if value is not None and "@" in value.split("://", 1)[-1].split("/", 1)[0]:
            raise ValueError("tracking_uri must not hold credentials (user:password@); set MLFLOW_TRACKING_USERNAME "
                             "and MLFLOW_TRACKING_PASSWORD in the environment instead")
        return value


class WandbTracking(_Section):
    project: str = Field(min_length=1, max_length=128, pattern=r"^[^/\\#?%:]+$")
    entity: str | None = Field(default=None, min_length=1, max_length=128)
    mode: Literal["online", "offline"] = "online"
    dir: str | None = Field(default=None, min_length=1)


class TensorboardTracking(_Section):
    log_dir: str = Field(min_length=1)


class Tracking(_Section):
    every_steps: int = Field(default=10, ge=1, le=1_000_000)
    mlflow: MlflowTracking | None = None
    wandb: WandbTracking | None = None
    tensorboard: TensorboardTracking | None = None

    @property
    def enabled(self) -> bool:
        """True when at least one tracker is configured."""
        return any(t is not None for t in (self.mlflow, self.wandb, self.tensorboard))
