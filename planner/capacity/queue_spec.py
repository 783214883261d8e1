"""The queue file (``QUEUE.toml``) of `planner capacity --queue`: jobs, the reservations held, the slots.

```toml
name = "team-a-queue"
slot_hours = 1.0                 # one time slot; each job runs on one pool per slot
horizon_slots = 48               # optional when every job has constraints.deadline_hours

[constraints]                    # as in job.toml; a job's own [constraints] narrow these
clouds = ["aws", "gcp"]
regions = ["us-*"]

[purchase]
allow = ["spot", "on_demand"]    # the elastic capacity the queue may add

[[reservation]]                  # capacity the team holds: $0 an hour, `count` nodes per slot
cloud = "aws"
region = "us-east-1"
instance_type = "p4d.24xlarge"
count = 2
from_slot = 0                    # optional window, [from_slot, until_slot)
until_slot = 48

[[job]]
file = "jobs/finetune.toml"      # a job.toml (relative to this file) ...
submit_hours = 0                 # when the job enters the queue (its deadline counts from here)

[[job]]                          # ... or the job.toml keys inline
name = "eval"
[job.workload]
model = "resnet50"
samples = 5e7
[job.constraints]
deadline_hours = 12
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.capacity.demand import NAME_PATTERN, describe, read_toml
from planner.capacity.errors import CapacitySpecError
from planner.errors import JobSpecError
from planner.job import JobSpec, load_job, parse_job

MAX_JOBS = 64
MAX_SLOTS = 2_000
QUEUE_KEYS = ("file", "submit_hours")
"""Keys of a ``[[job]]`` table that belong to the queue, not to the job."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, str_max_length=4096)


class QueueConstraints(_Section):
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()


class QueuePurchase(_Section):
    allow: tuple[Literal["spot", "on_demand"], ...] = ("spot", "on_demand")


class HeldCapacity(_Section):
    """``count`` nodes of an instance type the team holds, usable in slots [from_slot, until_slot)."""

    cloud: str = Field(min_length=1, max_length=64)
    region: str = Field(min_length=1, max_length=64)
    instance_type: str = Field(min_length=1, max_length=128)
    count: int = Field(ge=1, le=4096)
    from_slot: int = Field(default=0, ge=0, le=MAX_SLOTS)
    until_slot: int | None = Field(default=None, ge=1, le=MAX_SLOTS)
    # The cloud's name for it, which the runs' launches target (as [[purchase.held]] reservation_id).
    reservation_id: str | None = Field(default=None, min_length=1, max_length=1024, pattern=r"^\S+$")

    @model_validator(mode="after")
    def _window(self) -> HeldCapacity:
        if self.until_slot is not None and self.until_slot <= self.from_slot:
            raise ValueError("until_slot must be after from_slot")
        return self


class QueueFile(_Section):
    name: str = Field(pattern=NAME_PATTERN)
    slot_hours: float = Field(default=1.0, gt=0, le=24 * 31)
    horizon_slots: int | None = Field(default=None, ge=1, le=MAX_SLOTS)
    constraints: QueueConstraints = QueueConstraints()
    purchase: QueuePurchase = QueuePurchase()
    reservation: tuple[HeldCapacity, ...] = Field(default=(), max_length=256)
    job: tuple[dict[str, Any], ...] = Field(min_length=1, max_length=MAX_JOBS)


class QueuedJob(BaseModel):
    """One job of the queue: its job spec, when it arrives, and where it was written."""

    model_config = ConfigDict(frozen=True)

    spec: JobSpec
    submit_hours: float
    source: str  # the job file, or "QUEUE.toml job[i]" for an inline table
    path: str  # the file `planner run` records for the job

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def deadline_at_hours(self) -> float | None:
        d = self.spec.constraints.deadline_hours
        return None if d is None else self.submit_hours + d


class QueueSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    slot_hours: float
    horizon_slots: int
    constraints: QueueConstraints
    allow: tuple[str, ...]
    reservations: tuple[HeldCapacity, ...]
    jobs: tuple[QueuedJob, ...]
    path: str


def is_queue_file(path: str | Path) -> bool:
    """Whether ``path`` is a queue file (it has ``[[job]]`` tables; a job.toml never has a ``job`` key)."""
    try:
        return isinstance(read_toml(Path(path), "queue file").get("job"), list)
    except CapacitySpecError:
        return False


def load_queue(path: str | Path) -> QueueSpec:
    """Read and validate a queue file and every job in it; errors name the file, the key and the fix."""
    path = Path(path)
    raw = read_toml(path, "queue file")
    try:
        spec = QueueFile.model_validate(raw)
    except ValidationError as exc:
        raise CapacitySpecError(str(path), [describe(err, QueueFile) for err in exc.errors()], "queue file") from None
    jobs: list[QueuedJob] = []
    problems: list[str] = []
    for i, table in enumerate(spec.job):
        try:
            jobs.append(_job(path, i, table))
        except JobSpecError as exc:
            problems.append(str(exc).replace("\n", "\n    "))
        except CapacitySpecError as exc:
            problems.extend(exc.problems)
    names = [j.name for j in jobs]
    problems += [f"job: two jobs are named {n!r}; give each job a distinct name" for n in sorted(set(names))
                 if names.count(n) > 1]
    horizon = spec.horizon_slots
    if horizon is None:
        ends = [j.deadline_at_hours for j in jobs]
        if jobs and all(e is not None for e in ends):
            horizon = max(1, int(max(ends) // spec.slot_hours + 1e-9))  # type: ignore[type-var]
        elif not problems:
            lacking = next(j.name for j in jobs if j.deadline_at_hours is None)
            problems.append(f"horizon_slots: required because job {lacking!r} has no constraints.deadline_hours; "
                            "set horizon_slots = N (slots to plan)")
    if problems:
        raise CapacitySpecError(str(path), problems, "queue file")
    return QueueSpec(name=spec.name, slot_hours=spec.slot_hours, horizon_slots=horizon or 1,
                     constraints=spec.constraints, allow=spec.purchase.allow, reservations=spec.reservation,
                     jobs=tuple(jobs), path=str(path))


def _job(path: Path, i: int, table: dict[str, Any]) -> QueuedJob:
    submit = table.get("submit_hours", 0.0)
    if isinstance(submit, bool) or not isinstance(submit, (int, float)) or not 0 <= submit <= 87_600:
        raise CapacitySpecError(str(path), [(f"job[{i}].submit_hours: hours from the queue's start, between 0 and "
                                            f"87600 (got {submit!r})")])
    if "file" in table:
        extra = sorted(set(table) - set(QUEUE_KEYS))
        if extra:
            raise CapacitySpecError(str(path), [(f"job[{i}]: give either file = \"job.toml\" or the job's keys inline, "
                                                f"not both (found {', '.join(extra)})")])
        file = table["file"]
        if not isinstance(file, str) or not file:
            raise CapacitySpecError(str(path), [f"job[{i}].file: the path of a job.toml, relative to the queue file"])
        job_path = path.parent / file
        return QueuedJob(spec=load_job(job_path), submit_hours=float(submit), source=str(job_path),
                         path=str(job_path))
    body = {k: v for k, v in table.items() if k not in QUEUE_KEYS}
    source = f"{path} job[{i}]"
    return QueuedJob(spec=parse_job(body, source=source), submit_hours=float(submit), source=source, path=str(path))
