"""The contract between the controller (supervisor) and a training process.

Three channels, all plain files and environment variables so that a training script that
does not use :mod:`runtime.training.session` can honour them too (see ``docs/runtime.md``):

Controller -> training process, at launch (environment, read once):

=============================== ==========================================================
``DANLU_CHECKPOINT_DIR``        root of the ``step-N/`` checkpoints: a path, or an fsspec
                                URL (``s3://``, ``gs://``, ``az://``, ``memory://``)
``DANLU_RESUME``                ``latest`` (default), ``none`` (start fresh) or a step
``DANLU_RUN_DIR``               where ``status.json`` and ``control.json`` live; defaults
                                to the checkpoint dir when that is local
``DANLU_ATTEMPT``               the controller's attempt id, echoed in ``status.json``
``DANLU_MTBF_S``                the pool's mean time between interruptions, seconds
``DANLU_RESTART_S``             restart cost R (provision + load), seconds
``DANLU_CHECKPOINT_COST_S``     first estimate of the checkpoint cost C before one is measured
``DANLU_CHECKPOINT_EVERY_STEPS`` fixed interval in optimizer steps (overrides Young/Daly)
``DANLU_KEEP_LAST``             committed checkpoints to keep (default 3)
``DANLU_PG_TIMEOUT_S``          process-group timeout, seconds
=============================== ==========================================================

The controller's values win over the script's own arguments, which are defaults for runs
started by hand.

Controller -> training process, while it runs (``control.json`` in the run dir)::

    {"id": "c-17", "action": "stop", "reason": "aws spot notice"}

written atomically by :func:`request_checkpoint`. Every rank polls the file at each step
boundary; the ranks agree (all-reduce) and all save the same step. ``stop`` then exits with
:data:`EXIT_PREEMPTED`; ``checkpoint`` saves and trains on. A request is acted on once (its
id is remembered, and a ``stop`` id is recorded in ``status.json`` so a resumed run ignores
it). SIGTERM means the same as ``stop``.

Training process -> controller (``status.json`` in the run dir, written by rank 0)::

    {"state": "running" | "preempted" | "completed" | "failed", "step": 120, "attempt": "a-3", ...}

While it trains, rank 0 rewrites ``running`` with its step at the first step boundary
:data:`STATUS_HEARTBEAT_S` after the last write, so a launch killed without a word (a node
reclaimed, the host gone) still says how far it got, to within a heartbeat, and a report that
stopped coming says the workers stopped advancing.

``failed`` means a checkpoint could not be saved (``reason`` says why): the launch stopped
at the first failed save, and retrying on the same storage would fail the same way.

torchrun's exit code cannot tell a preemption from a failure (SIGTERM to the agent gives 1
however the workers ended), so :func:`classify` decides from this file: ``preempted`` means
a committed checkpoint at ``step`` exists and the job is resumable.
"""

from __future__ import annotations

import enum
import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal

from danlu import atomic_file
from runtime.errors import ContractError

EXIT_COMPLETED = 0
"""The training loop reached its last step and the final checkpoint is committed."""
EXIT_PREEMPTED = 75
"""EX_TEMPFAIL: stopped on SIGTERM or a ``stop`` request after committing a checkpoint."""

STATUS_FILE = "status.json"
CONTROL_FILE = "control.json"
STATUS_HEARTBEAT_S = 10.0
"""Real seconds between rank 0's ``running`` reports while it trains (at step boundaries)."""

ENV_CHECKPOINT_DIR = "DANLU_CHECKPOINT_DIR"
ENV_RESUME = "DANLU_RESUME"
ENV_RUN_DIR = "DANLU_RUN_DIR"
ENV_ATTEMPT = "DANLU_ATTEMPT"
ENV_MTBF_S = "DANLU_MTBF_S"
ENV_RESTART_S = "DANLU_RESTART_S"
ENV_CHECKPOINT_COST_S = "DANLU_CHECKPOINT_COST_S"
ENV_CHECKPOINT_EVERY_STEPS = "DANLU_CHECKPOINT_EVERY_STEPS"
ENV_KEEP_LAST = "DANLU_KEEP_LAST"
ENV_PG_TIMEOUT_S = "DANLU_PG_TIMEOUT_S"

Resume = Literal["latest", "none"] | int
RunState = Literal["running", "preempted", "completed", "failed"]
Action = Literal["stop", "checkpoint"]


class Outcome(str, enum.Enum):
    """How one launch of a training job ended, as the supervisor sees it."""

    COMPLETED = "completed"
    PREEMPTED = "preempted"
    FAILED = "failed"


@dataclass(frozen=True)
class LaunchContract:
    """Everything the controller tells a training process through its environment."""

    checkpoint_dir: str | None = None
    resume: Resume = "latest"
    run_dir: str | None = None
    attempt: str | None = None
    mtbf_s: float | None = None
    restart_s: float | None = None
    checkpoint_cost_s: float | None = None
    checkpoint_every_steps: int | None = None
    keep_last: int | None = None
    pg_timeout_s: float | None = None

    def to_env(self) -> dict[str, str]:
        """The variables to add to the launch environment (unset fields are left out)."""
        pairs = {
            ENV_CHECKPOINT_DIR: self.checkpoint_dir,
            ENV_RESUME: None if self.resume == "latest" else str(self.resume),
            ENV_RUN_DIR: self.run_dir,
            ENV_ATTEMPT: self.attempt,
            ENV_MTBF_S: self.mtbf_s,
            ENV_RESTART_S: self.restart_s,
            ENV_CHECKPOINT_COST_S: self.checkpoint_cost_s,
            ENV_CHECKPOINT_EVERY_STEPS: self.checkpoint_every_steps,
            ENV_KEEP_LAST: self.keep_last,
            ENV_PG_TIMEOUT_S: self.pg_timeout_s,
        }
        return {name: str(value) for name, value in pairs.items() if value is not None}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LaunchContract:
        """Read the contract from ``environ`` (default ``os.environ``).

        Raises:
            ContractError: a variable is malformed; the message names it and the fix.
        """
        env = os.environ if environ is None else environ
        return cls(
            checkpoint_dir=env.get(ENV_CHECKPOINT_DIR) or None,
            resume=_parse_resume(env.get(ENV_RESUME, "latest")),
            run_dir=env.get(ENV_RUN_DIR) or None,
            attempt=env.get(ENV_ATTEMPT) or None,
            mtbf_s=_positive(env, ENV_MTBF_S, float),
            restart_s=_non_negative(env, ENV_RESTART_S),
            checkpoint_cost_s=_non_negative(env, ENV_CHECKPOINT_COST_S),
            checkpoint_every_steps=_positive(env, ENV_CHECKPOINT_EVERY_STEPS, int),
            keep_last=_positive(env, ENV_KEEP_LAST, int),
            pg_timeout_s=_positive(env, ENV_PG_TIMEOUT_S, float),
        )


def _parse_resume(raw: str) -> Resume:
    value = raw.strip().lower()
    if value in ("", "latest"):
        return "latest"
    if value == "none":
        return "none"
    try:
        step = int(value)
    except ValueError:
        step = -1
    if step < 0:
        raise ContractError(
            f"{ENV_RESUME}={raw!r} is not valid. To fix: set it to 'latest', 'none' or a "
            "non-negative step number."
        )
    return step


def _positive(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> float | int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = kind(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ContractError(
            f"{name}={raw!r} is not valid. To fix: set it to a positive {kind.__name__} or unset it."
        )
    return value


def _non_negative(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise ContractError(
            f"{name}={raw!r} is not valid. To fix: set it to a number of seconds >= 0 or unset it."
        )
    return value


@dataclass(frozen=True)
class RunStatus:
    """What ``status.json`` says about the latest launch in a run directory."""

    state: RunState
    step: int
    attempt: str | None = None
    checkpoint: str | None = None
    reason: str | None = None
    world_size: int | None = None
    request_id: str | None = None
    problems: tuple[str, ...] = ()
    updated_at: float = field(default_factory=time.time)
    heartbeat_s: float | None = None  # while "running": the writer reports again within this (real s)
    # The longest background write of a checkpoint so far in the launch (real s): a stop that comes while
    # one is in flight first waits for it, which the budget cap must leave time for.
    save_write_s: float | None = None
    # The step the script trains to (the session's max_steps), for the controller to hold against the job's
    # [workload] steps; None: a writer that does not say.
    max_steps: int | None = None


_STATUS_FIELDS = frozenset(f.name for f in fields(RunStatus))


def write_status(run_dir: str | os.PathLike[str], status: RunStatus) -> None:
    """Atomically replace ``run_dir/status.json``."""
    payload = asdict(status)
    payload["problems"] = list(status.problems)
    atomic_file.write_text(Path(run_dir) / STATUS_FILE, json.dumps(payload, indent=2) + "\n")


def read_status(run_dir: str | os.PathLike[str]) -> RunStatus | None:
    """The status in ``run_dir``, or None when no launch has written one yet.

    Raises:
        ContractError: the file exists but is not a status written by this runtime.
    """
    path = Path(run_dir) / STATUS_FILE
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
        data["problems"] = tuple(data.get("problems", ()))
        # A node running a later danlu may report more: what this one does not know it leaves out.
        status = RunStatus(**{k: v for k, v in data.items() if k in _STATUS_FIELDS})
    except (ValueError, TypeError, AttributeError) as exc:
        raise ContractError(
            f"{path}: not a valid status file ({exc}). To fix: delete it; the next launch "
            "writes a fresh one."
        ) from exc
    if status.state not in ("running", "preempted", "completed", "failed"):
        raise ContractError(
            f"{path}: key 'state' is {status.state!r}; expected running, preempted, completed or failed."
        )
    return status


def classify(returncode: int, run_dir: str | os.PathLike[str], attempt: str | None = None) -> Outcome:
    """Decide how a launch ended from its exit code and its ``status.json``.

    ``attempt`` guards against a stale file: a status written by another attempt (for
    example a launch that crashed before the session started) counts as no status.
    """
    status = read_status(run_dir)
    if status is not None and attempt is not None and status.attempt != attempt:
        status = None
    if status is None:
        return Outcome.FAILED
    if status.state == "preempted":
        return Outcome.PREEMPTED
    if status.state == "completed" and returncode == EXIT_COMPLETED:
        return Outcome.COMPLETED
    return Outcome.FAILED


@dataclass(frozen=True)
class ControlRequest:
    """One checkpoint-now request from the controller."""

    id: str
    action: Action
    reason: str = ""


def request_checkpoint(
    control_file: str | os.PathLike[str], action: Action = "stop", reason: str = ""
) -> ControlRequest:
    """Ask a running training process to checkpoint now (and, for ``stop``, to exit).

    Writes ``control_file`` atomically and returns the request (its id is echoed in
    ``status.json`` once acted on).
    """
    if action not in ("stop", "checkpoint"):
        raise ContractError(f"control action {action!r} is not valid. To fix: use 'stop' or 'checkpoint'.")
    request = ControlRequest(id=uuid.uuid4().hex[:12], action=action, reason=reason)
    atomic_file.write_text(control_file, json.dumps(asdict(request)) + "\n")
    return request


def read_request(control_file: str | os.PathLike[str]) -> ControlRequest | None:
    """The pending request in ``control_file``, or None when there is none.

    Raises:
        ContractError: the file is not a request written by :func:`request_checkpoint`.
    """
    path = Path(control_file)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
        request = ControlRequest(id=str(data["id"]), action=data["action"], reason=str(data.get("reason", "")))
    except (ValueError, KeyError, TypeError) as exc:
        raise ContractError(
            f"{path}: not a valid control request ({exc}). To fix: write it with "
            "runtime.training.contract.request_checkpoint()."
        ) from exc
    if request.action not in ("stop", "checkpoint"):
        raise ContractError(f"{path}: key 'action' is {request.action!r}; expected 'stop' or 'checkpoint'.")
    return request
