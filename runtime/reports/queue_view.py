"""Where a queue run stands (`planner status QUEUE_RUN`): its process, its outcome, its jobs not yet started.

A queue's run directory holds one run directory per started job (shown as any run is) and the
queue's own files: ``queue_run.json`` (its jobs and clock, written before the first one starts),
``controller.json`` (its process) and, once that process has finished or stopped, ``queue.json``.
This reads them only, so it is safe beside a running queue.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.control import detach, queue_record
from runtime.control.run_state import STATE_FILE, load_state
from runtime.errors import RuntimeFailure


@dataclass(frozen=True, slots=True)
class WaitingJob:
    """A job of the queue with no run yet, and when its slot starts (UTC) on the queue's clock."""

    job: str
    start_slot: int
    starts_at: str


@dataclass(frozen=True, slots=True)
class EndedJob:
    """A job of the queue that ended short of completing and that a resume of the queue leaves as it is."""

    job: str
    status: str  # failed, budget_cap or infeasible
    run_dir: str

    @property
    def hint(self) -> str:
        """How the job goes on by itself."""
        resume = f"`planner run --resume {self.run_dir}"
        if self.status == "failed":
            return f"job {self.job} failed; once its cause is fixed, {resume}` continues it from its last checkpoint"
        if self.status == "budget_cap":
            return f"job {self.job} ended budget_cap; {resume} --budget-usd USD` continues it with a larger budget"
        return (f"job {self.job} ended infeasible; {resume} --budget-usd USD` or {resume} --deadline-in HOURS` "
                "continues it with a larger budget or a later deadline")


@dataclass(frozen=True, slots=True)
class QueueView:
    """``status``: ``running`` (its process is alive), ``completed``, ``incomplete`` (a job ended
    otherwise), ``cancelled`` (stopped, resumable) or ``stopped`` (its process is gone without
    finishing: killed, or the machine rebooted; resumable). Read from the jobs' runs as they stand
    now, so a job resumed on its own since the queue's process ended counts as it ended then."""

    run_dir: Path
    queue: str
    status: str
    pid: int | None
    host: str | None
    not_started: tuple[WaitingJob, ...]
    ended: tuple[EndedJob, ...]  # the jobs each to go on by its own resume

    @property
    def resumable(self) -> bool:
        return self.status in ("cancelled", "stopped")

    def to_dict(self) -> dict:
        return asdict(self) | {"run_dir": str(self.run_dir), "not_started": [asdict(j) for j in self.not_started],
                               "ended": [asdict(j) for j in self.ended]}


def find_queues(root: Path, *, linked: bool = False) -> list[Path]:
    """The queue run directories directly under ``root`` (a runs directory), by name; one linked in from
    elsewhere only when ``linked`` (``planner gc`` must not miss a queue; the dashboard serves nothing
    outside its root)."""
    if not root.is_dir():
        return []
    inside = root.resolve()
    return sorted(p for p in root.iterdir()
                  if p.is_dir() and (linked or p.resolve().parent == inside) and queue_record.is_queue_run(p))


def load_queue(run_root: Path) -> QueueView:
    """The queue run in ``run_root``.

    Raises:
        RuntimeFailure: its ``queue_run.json`` is missing or does not read back.
    """
    record = queue_record.read(run_root)
    live = detach.liveness(run_root)
    status, writer = _outcome(run_root)
    if live.record is not None and writer != live.record.pid:  # queue.json is older than the last process
        status = "running" if live.alive or live.other_host else "stopped"
    held = record.held
    waiting = tuple(
        WaitingJob(job.name, job.start_slot, _utc(held.origin + record.start_hours(job) * 3600.0 / held.time_scale))
        for job in record.jobs if not (run_root / job.name / STATE_FILE).exists())
    jobs = {job.name: _job_status(run_root / job.name) for job in record.jobs}
    if status != "running" and all(s == "completed" for s in jobs.values()):
        status = "completed"  # the queue's process left some unfinished; each was resumed on its own since
    ended = tuple(EndedJob(name, s, str(run_root / name)) for name, s in jobs.items()
                  if s in ("failed", "budget_cap", "infeasible"))
    return QueueView(run_root, held.queue, status, None if live.record is None else live.record.pid,
                     None if live.record is None else live.record.host, waiting, ended)


def _outcome(run_root: Path) -> tuple[str, int | None]:
    """What a queue's process left in queue.json: its status ("stopped" when there is none) and the pid
    of the process that wrote it."""
    try:
        out = json.loads((run_root / queue_record.QUEUE_FILE).read_text(encoding="utf-8"))
        status, pid = out.get("status"), out.get("pid")
    except (OSError, ValueError, AttributeError):
        return "stopped", None
    return (status if status in ("completed", "incomplete", "cancelled") else "stopped"), pid


def _job_status(run_dir: Path) -> str | None:
    """How a job's run stands (None: not started, or its state does not read back, as `planner status`
    says on the run's own line)."""
    try:
        return load_state(run_dir).status
    except RuntimeFailure:
        return None


def _utc(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
