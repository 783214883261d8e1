"""`planner run QUEUE.toml`: run a queue as `planner capacity --queue` scheduled it.

Each job is an ordinary run (its own run directory under the queue's, its own controller,
ledger and checkpoints), started at its first slot's time on the run's clock (simulated
seconds with --time-scale) and following the schedule's plan for it: the pool and node
count of its first slot, the later slots as the plan's further phases.  From there the
controller is the one of `planner run JOB`: on a preemption it re-plans with the work,
budget and deadline left, and the queue's held reservations are among the pools it may
choose (``[[purchase.held]]`` of the job it is given).  A job's deadline is the queue's:
``submit_hours + deadline_hours`` counted from the queue's start, so a job started at its
slot gets what is left of it.

Jobs scheduled side by side run side by side (one thread per job, each waiting for its
start).  The team has the held nodes once, so the controllers share them
(:class:`runtime.control.held.HeldAllotment`): a launch takes its held nodes before it
provisions them and gives them back when it releases them.  A job whose scheduled held nodes
are still busy (the job before it ran longer than its estimate) waits for them while its
deadline allows; when it cannot wait, the one of the two with less work left moves off (the
holder at a checkpoint, or the waiter) and re-plans on what is free, as a re-plan after a
preemption does.
The queue's process holds a lock on its directory, and each job's run directory keeps the queue's
windows (:mod:`runtime.control.queue_held`), so a job resumed on its own later counts the held
nodes as the queue did, and never while another process counts them.  Before its first job
starts, the queue writes the jobs as it runs them (:mod:`runtime.control.queue_record`), so
:func:`resume_queue` can finish a queue whose process was killed without scheduling it again.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from danlu import atomic_file
from planner.capacity.queue import JobSchedule, QueueSchedule
from planner.capacity.queue_report import plan_for
from planner.job import HeldReservation, JobSpec
from runtime.control import detach, queue_record
from runtime.control.clock import StopSignal, StoppableClock
from runtime.control.controller import Controller, Tuning
from runtime.control.held import Window
from runtime.control.phases import run_date
from runtime.control.queue_held import QueueHeld, lock_queue
from runtime.control.queue_held import write as write_queue_held
from runtime.control.queue_record import QUEUE_FILE, JobToRun, QueueRunRecord
from runtime.control.run_start import new_state, preflight
from runtime.control.reopen import reopen_stopped
from runtime.control.run_state import STATE_FILE, SUMMARY_FILE, load_state
from runtime.errors import RuntimeFailure


@dataclass(frozen=True, slots=True)
class QueueRunOptions:
    catalog: str | None
    provider: str | None  # None: each job's [run].provider
    time_scale: float
    policy: str
    use_cache: bool
    tuning: Tuning


def job_for_run(js: JobSchedule, schedule: QueueSchedule, *, today: dt.date) -> JobSpec:
    """The job spec its controller follows: the queue's deadline from its start, the held reservations."""
    spec, job = schedule.spec, js.job
    start_h = js.segments[0].start_slot * spec.slot_hours
    until = today + dt.timedelta(days=math.ceil(spec.horizon_slots * spec.slot_hours / 24) + 1)
    held = tuple(HeldReservation(cloud=r.cloud, region=r.region, instance_type=r.instance_type, count=r.count,
                                 until=until, reservation_id=r.reservation_id) for r in spec.reservations)
    allow = tuple(p for p in job.spec.purchase.allow if p in spec.allow) or job.spec.purchase.allow
    purchase = job.spec.purchase.model_copy(update={"held": held, "allow": allow})
    update: dict[str, Any] = {}
    if job.deadline_at_hours is not None:
        update["deadline_hours"] = job.deadline_at_hours - start_h
    constraints = job.spec.constraints.model_copy(update={
        **update, "clouds": job.spec.constraints.clouds or spec.constraints.clouds,
        "regions": job.spec.constraints.regions or spec.constraints.regions})
    return job.spec.model_copy(update={"purchase": purchase, "constraints": constraints})


def run_queue(schedule: QueueSchedule, run_root: Path, options: QueueRunOptions,
              on_event: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run every job of ``schedule``; returns (and writes to ``run_root/queue.json``) each job's outcome."""
    _preflight(schedule, options)
    run_root.mkdir(parents=True, exist_ok=True)
    # Held for the whole queue: a resume of one of its jobs (planner run --resume) must wait for it.
    with lock_queue(run_root, schedule.spec.name, record=True):
        origin, origin_mono = time.time(), time.monotonic()  # slot k starts (k * slot_hours / time_scale) after these
        record = _record(schedule, run_root, options, origin)
        # Monotonic while this process runs the queue: a wall-clock step must not open or close a window.
        return _run_jobs(record, run_root, options.tuning, on_event,
                         wall=lambda: origin + time.monotonic() - origin_mono)


def prepare_queue(schedule: QueueSchedule, run_root: Path, options: QueueRunOptions) -> QueueRunRecord:
    """Write the queue's run directory (plans, queue_run.json) without running it: `planner run QUEUE.toml
    --detach` then starts :func:`resume_queue` in the background, on the clock that starts now."""
    _preflight(schedule, options)
    run_root.mkdir(parents=True, exist_ok=True)
    with lock_queue(run_root, schedule.spec.name):
        return _record(schedule, run_root, options, time.time())


def resume_queue(run_root: Path, tuning: Tuning,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Finish the queue run in ``run_root`` whose process was killed or cancelled (see
    :mod:`runtime.control.queue_record`); returns and writes its outcome as :func:`run_queue` does."""
    record = queue_record.read(run_root)
    with lock_queue(run_root, record.held.queue, record=True):
        return _run_jobs(record, run_root, tuning, on_event, wall=time.time)


def _preflight(schedule: QueueSchedule, options: QueueRunOptions) -> None:
    """Refuse the queue for any job its provider cannot run, before the first starts: a later job
    would otherwise fail when its slot comes, hours into the queue."""
    for js in schedule.jobs:
        preflight(js.job.spec, Path(js.job.path), options.provider or js.job.spec.run.provider, source=js.job.source)


def _record(schedule: QueueSchedule, run_root: Path, options: QueueRunOptions, origin: float) -> QueueRunRecord:
    """The queue as it will run (its plan files and queue_run.json written), before any job starts.

    Raises:
        RuntimeFailure: ``run_root`` holds a queue run already (its record is left as it was).
    """
    if queue_record.is_queue_run(run_root):
        raise RuntimeFailure(f"{run_root}: holds a queue run already. To fix: finish that one with `planner run "
                             f"--resume {run_root}`, or give this queue another --run-dir.")
    order = sorted((j for j in schedule.jobs if j.segments), key=lambda j: (j.segments[0].start_slot, j.job.name))
    today = run_date(origin)  # the run clock's UTC date, as held_reservation and re-plans read the held `until`
    jobs = []
    for js in order:
        name = js.job.name
        plan_path = atomic_file.write_text(run_root / f"{name}.plan.json", json.dumps(plan_for(js), indent=2),
                                           mode=0o600)
        job = job_for_run(js, schedule, today=today)
        jobs.append(JobToRun(name=name, job_path=str(Path(js.job.path).resolve()), job=job.model_dump(mode="json"),
                             provider=options.provider or job.run.provider, plan_path=str(plan_path.resolve()),
                             start_slot=js.segments[0].start_slot))
    h = schedule.spec.slot_hours
    windows = [Window((r.cloud, r.region, r.instance_type), r.count, r.from_slot * h,
                      math.inf if r.until_slot is None else r.until_slot * h) for r in schedule.spec.reservations]
    record = QueueRunRecord(held=QueueHeld.of(schedule.spec.name, origin, options.time_scale, windows),
                            slot_hours=h, policy=options.policy,
                            catalog=str(Path(options.catalog).resolve()) if options.catalog else None,
                            use_cache=options.use_cache, jobs=tuple(jobs))
    queue_record.write(run_root, record)
    return record


def _run_jobs(record: QueueRunRecord, run_root: Path, tuning: Tuning,
              on_event: Callable[[str, dict[str, Any]], None] | None, wall: Callable[[], float]) -> dict[str, Any]:
    held_record = record.held
    held = held_record.allotment(wall)
    stop = StopSignal()
    results: dict[str, dict[str, Any]] = {}
    errors: list[Exception] = []

    def one(job: JobToRun) -> None:
        run_dir = run_root / job.name
        outcome = {"run_dir": str(run_dir), "start_slot": job.start_slot}
        try:
            if (run_dir / STATE_FILE).exists():  # started before the queue's process was killed
                state = load_state(run_dir)
                if state.status not in ("running", "cancelled"):
                    results[job.name] = outcome | _outcome(run_dir, state.status, state.cause)
                    return
                reopen_stopped(run_dir)
            else:
                start_s = record.start_hours(job) * 3600.0 / held_record.time_scale
                if stop.wait(held_record.origin + start_s - wall()):
                    results[job.name] = outcome | {"status": "cancelled", "cause": "stopped before its slot"}
                    return
                state = new_state(job_path=Path(job.job_path), job=JobSpec.model_validate(job.job), run_dir=run_dir,
                                  catalog=record.catalog, provider=job.provider, time_scale=held_record.time_scale,
                                  policy=record.policy, chaos=[], plan_path=Path(job.plan_path),
                                  use_cache=record.use_cache)
            write_queue_held(run_dir, held_record)  # a resume of this job keeps the queue's windows
            listener = None if on_event is None else (lambda event: on_event(job.name, event))
            clock = StoppableClock(state.origin, state.time_scale, stop=stop)
            with detach.ControllerLock(run_dir).acquire():
                summary = Controller.open(run_dir, tuning=tuning, on_event=listener, held=held, clock=clock).run()
            results[job.name] = outcome | _outcome(run_dir, summary["status"], summary.get("cause"))
        except KeyboardInterrupt as exc:  # the queue was stopped: the controller checkpointed and released
            results[job.name] = outcome | _outcome(run_dir, "cancelled", str(exc))
        except Exception as exc:  # noqa: BLE001 -- one job failing must not stop the others; reported at the end
            errors.append(exc)
            results[job.name] = outcome | {"status": "failed", "cause": str(exc)}

    done = {job.name: threading.Event() for job in record.jobs}

    def run_one(job: JobToRun) -> None:
        try:
            one(job)
        finally:
            done[job.name].set()

    for job in record.jobs:
        threading.Thread(target=run_one, args=(job,), name=f"queue-{job.name}", daemon=True).start()
    interrupted: KeyboardInterrupt | None = None
    for event in done.values():
        # Not Thread.join(): on Python 3.11 a signal that interrupts it marks a live thread stopped (bpo-45274).
        while not event.is_set():
            try:
                event.wait(0.5)
            except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM, in this (the main) thread only
                if interrupted is None:  # every controller stops at its next sleep, as one run does on Ctrl-C
                    interrupted = exc
                    stop.set(exc if exc.args else KeyboardInterrupt("interrupted (Ctrl-C)"))
                # a second one waits too: leaving now would leave the nodes up and billed
    # pid: `planner status` tells this outcome from one an earlier process left before a resume
    out = {"queue": held_record.queue, "origin": held_record.origin, "pid": os.getpid(),
           "jobs": [results[job.name] | {"job": job.name} for job in record.jobs],
           "status": "completed" if all(r["status"] == "completed" for r in results.values()) else "incomplete"}
    if interrupted is not None:
        stopped_by = "SIGTERM" if isinstance(interrupted, detach.Cancelled) else "SIGINT"
        out |= {"status": "cancelled", "stopped_by": stopped_by}
    atomic_file.write_text(run_root / QUEUE_FILE, json.dumps(out, indent=2), mode=0o600)
    if errors and interrupted is None and not any(r["status"] == "completed" for r in results.values()):
        raise errors[0]
    return out


def _outcome(run_dir: Path, status: str, cause: str | None) -> dict[str, Any]:
    """A job's line of queue.json: its summary's figures where it wrote one."""
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        summary = {}
    out = {"status": status, "cost_usd": summary.get("cost_usd", 0.0), "hours": summary.get("hours", 0.0),
           "steps": summary.get("steps", 0)}
    return out | ({"cause": cause} if cause else {})
