"""What `planner run QUEUE.toml` writes before its first job starts, so that a killed queue can be finished.

The schedule is a MILP solved on the day's catalog: solving the queue file again at a resume
could move jobs that have already run, or run one twice.  So the queue writes, beside its jobs'
run directories, the jobs exactly as it runs them (:data:`QUEUE_RUN_FILE`, 0600): each job's spec
with the queue's deadline and held reservations, its provider, its plan file and its start on the
queue's clock, with the queue's reservation windows, clock and options.  `planner run --resume
QUEUE_RUN` reads it back and finishes the queue: a job that ended keeps its outcome, a job whose
controller was killed (or that was cancelled) resumes from its checkpoint, and a job that had not
started yet starts at its slot on the queue's clock, or at once when that slot has passed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from danlu import atomic_file
from runtime.control.detach import PRIVATE_FILE
from runtime.control.queue_held import QueueHeld
from runtime.errors import RuntimeFailure

QUEUE_RUN_FILE = "queue_run.json"
QUEUE_FILE = "queue.json"  # the outcome, written when the queue's process finishes or stops


class JobToRun(BaseModel):
    """One job of the queue, as its controller is given it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)
    job_path: str
    job: dict[str, Any]  # the JobSpec, as a run state keeps it (validated when the run starts)
    provider: str = Field(min_length=1)
    plan_path: str
    start_slot: int = Field(ge=0)


class QueueRunRecord(BaseModel):
    """The queue as it runs: enough to finish it without scheduling it again."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    format: Literal[1] = 1
    held: QueueHeld  # the queue's name, clock (origin, time scale) and reservation windows
    slot_hours: float = Field(gt=0, allow_inf_nan=False)
    catalog: str | None
    policy: str
    use_cache: bool
    jobs: tuple[JobToRun, ...]

    def start_hours(self, job: JobToRun) -> float:
        """When ``job`` starts, in hours of the queue's clock."""
        return job.start_slot * self.slot_hours


def write(run_root: Path, record: QueueRunRecord) -> None:
    atomic_file.write_text(run_root / QUEUE_RUN_FILE, record.model_dump_json(indent=2) + "\n", mode=PRIVATE_FILE)


def is_queue_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` is the run directory of a queue (rather than of one job)."""
    return (run_dir / QUEUE_RUN_FILE).is_file()


def read(run_root: Path) -> QueueRunRecord:
    """The record of the queue run in ``run_root``.

    Raises:
        RuntimeFailure: there is none, or it does not read back; nothing was changed.
    """
    path = run_root / QUEUE_RUN_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RuntimeFailure(f"{path}: no queue run here. To fix: pass the directory `planner run QUEUE.toml` "
                             "printed as its queue run directory.") from None
    try:
        return QueueRunRecord.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        raise RuntimeFailure(f"{path}: {where}: {first['msg']}. It is written by `planner run QUEUE.toml` before "
                             "its first job starts; restore it from a copy of the queue's run directory, or "
                             "resume its jobs one by one (`planner run --resume RUN_DIR/JOB`).") from None
