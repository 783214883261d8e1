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
nodes as the queue did, and never while another process counts them.
"""

from __future__ import annotations

import datetime as dt
import json
import math
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
from runtime.control import detach
from runtime.control.controller import Controller, Tuning
from runtime.control.held import HeldAllotment, Window
from runtime.control.phases import run_date
from runtime.control.queue_held import QueueHeld, lock_queue
from runtime.control.queue_held import write as write_queue_held
from runtime.control.run_state import new_state

QUEUE_FILE = "queue.json"


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
                                 until=until) for r in spec.reservations)
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
    run_root.mkdir(parents=True, exist_ok=True)
    # Held for the whole queue: a resume of one of its jobs (planner run --resume) must wait for it.
    with lock_queue(run_root, schedule.spec.name):
        return _run_jobs(schedule, run_root, options, on_event)


def _run_jobs(schedule: QueueSchedule, run_root: Path, options: QueueRunOptions,
              on_event: Callable[[str, dict[str, Any]], None] | None) -> dict[str, Any]:
    order = sorted((j for j in schedule.jobs if j.segments), key=lambda j: (j.segments[0].start_slot, j.job.name))
    origin, origin_mono = time.time(), time.monotonic()  # slot k starts (k * slot_hours / time_scale) after these
    today = run_date(origin)  # the run clock's UTC date, as held_end and re-plans read the held `until`
    prepared = []
    for js in order:
        name = js.job.name
        plan_path = atomic_file.write_text(run_root / f"{name}.plan.json", json.dumps(plan_for(js), indent=2),
                                           mode=0o600)
        job = job_for_run(js, schedule, today=today)
        provider = options.provider or job.run.provider
        prepared.append((js, job, provider, plan_path, run_root / name))
    h = schedule.spec.slot_hours
    windows = [Window((r.cloud, r.region, r.instance_type), r.count, r.from_slot * h,
                      math.inf if r.until_slot is None else r.until_slot * h) for r in schedule.spec.reservations]
    held = HeldAllotment(windows, hours=lambda: (time.monotonic() - origin_mono) * options.time_scale / 3600)
    held_record = QueueHeld.of(schedule.spec.name, origin, options.time_scale, windows)
    results: dict[str, dict[str, Any]] = {}
    errors: list[Exception] = []

    def one(js: JobSchedule, job: JobSpec, provider: str, plan_path: Path, run_dir: Path) -> None:
        start_s = js.segments[0].start_slot * schedule.spec.slot_hours * 3600.0
        wait = start_s / options.time_scale - (time.monotonic() - origin_mono)
        if wait > 0:
            time.sleep(wait)
        try:
            new_state(job_path=Path(js.job.path), job=job, run_dir=run_dir, catalog=options.catalog,
                      provider=provider, time_scale=options.time_scale, policy=options.policy, chaos=[],
                      plan_path=plan_path, use_cache=options.use_cache)
            write_queue_held(run_dir, held_record)  # a resume of this job keeps the queue's windows
            listener = None if on_event is None else (lambda record: on_event(js.job.name, record))
            with detach.ControllerLock(run_dir).acquire():
                summary = Controller.open(run_dir, tuning=options.tuning, on_event=listener, held=held).run()
            results[js.job.name] = {"run_dir": str(run_dir), "status": summary["status"],
                                    "cost_usd": summary["cost_usd"], "hours": summary["hours"],
                                    "steps": summary["steps"], "start_slot": js.segments[0].start_slot}
        except Exception as exc:  # noqa: BLE001 -- one job failing must not stop the others; reported at the end
            errors.append(exc)
            results[js.job.name] = {"run_dir": str(run_dir), "status": "failed", "cause": str(exc)}

    threads = [threading.Thread(target=one, args=item, name=f"queue-{item[0].job.name}", daemon=True)
               for item in prepared]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = {"queue": schedule.spec.name, "origin": origin, "jobs": [results[js.job.name] | {"job": js.job.name} for js in order],
           "status": "completed" if all(r["status"] == "completed" for r in results.values()) else "incomplete"}
    atomic_file.write_text(run_root / QUEUE_FILE, json.dumps(out, indent=2), mode=0o600)
    if errors and not any(r["status"] == "completed" for r in results.values()):
        raise errors[0]
    return out
