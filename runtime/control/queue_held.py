"""A queue job's share of the held nodes, kept with its run so that `planner run --resume` keeps it.

`planner run QUEUE.toml` gives its jobs the queue's reservations through one in-process
:class:`runtime.control.held.HeldAllotment`: each reservation only inside its slot window, and
each node to one launch at a time.  A job resumed on its own (``planner run --resume
QUEUE_RUN/JOB`` after the queue's process was killed) would otherwise see its job file's held
reservations alone -- no window, nobody else's launches -- and book $0 node-hours on nodes the
team no longer had, or that another job held.  So the queue writes, beside each job's run state,
its reservation windows on the queue's own clock (:data:`QUEUE_HELD_FILE`), and holds a lock on
the queue's directory while it runs.  A resume of one of its jobs:

* is refused (exit 2) while the queue's process, or another resumed job of the same queue, holds
  that lock: the held nodes are counted by one process at a time, so two processes can never
  both take the same node;
* otherwise takes the lock and runs with an allotment of the same windows, on the same clock
  (the queue's start and time scale), so a window that has closed stays closed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, ValidationError

from danlu import atomic_file
from runtime.control.detach import PRIVATE_FILE, ControllerAlive, ControllerLock
from runtime.control.held import HeldAllotment, Window
from runtime.errors import RuntimeFailure

QUEUE_HELD_FILE = "queue_held.json"


class QueueBusy(RuntimeFailure):
    """The queue's held nodes are counted by another process now."""


class _Window(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    cloud: str
    region: str
    instance_type: str
    count: int
    start_h: float
    end_h: float | None  # None: to the queue's end


class QueueHeld(BaseModel):
    """What a job of a queue needs to count the queue's held nodes as the queue does."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    queue: str
    origin: float  # POSIX seconds at the queue's start: hour 0 of its windows
    time_scale: float
    windows: tuple[_Window, ...]

    @classmethod
    def of(cls, queue: str, origin: float, time_scale: float, windows: Iterable[Window]) -> Self:
        return cls(queue=queue, origin=origin, time_scale=time_scale, windows=tuple(
            _Window(cloud=w.key[0], region=w.key[1], instance_type=w.key[2], count=w.count, start_h=w.start_h,
                    end_h=None if math.isinf(w.end_h) else w.end_h) for w in windows))

    def allotment(self, wall: Callable[[], float] = time.time) -> HeldAllotment:
        """The queue's windows on the queue's clock (``wall``: real POSIX seconds)."""
        windows = [Window((w.cloud, w.region, w.instance_type), w.count, w.start_h,
                          math.inf if w.end_h is None else w.end_h) for w in self.windows]
        return HeldAllotment(windows, hours=lambda: (wall() - self.origin) * self.time_scale / 3600)


def write(run_dir: Path, record: QueueHeld) -> None:
    atomic_file.write_text(run_dir / QUEUE_HELD_FILE, record.model_dump_json(indent=2) + "\n", mode=PRIVATE_FILE)


def read(run_dir: Path) -> QueueHeld | None:
    """The record of the queue ``run_dir`` is a job of, or None for a run of its own."""
    path = run_dir / QUEUE_HELD_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return QueueHeld.model_validate_json(text)
    except ValidationError as exc:
        raise RuntimeFailure(f"{path}: not a queue's held-node record ({exc.errors()[0]['msg']}). It is written by "
                             "`planner run QUEUE.toml`; restore it from the queue's run, or the resumed job "
                             "cannot know which held nodes its queue has.") from None


def lock_queue(queue_dir: Path, queue: str, *, record: bool = False) -> ControllerLock:
    """Take the queue directory's lock: one process counts a queue's held nodes at a time.

    ``record``: the queue's own process names itself in the directory (``controller.json``), so
    that `planner cancel QUEUE_RUN` can stop it; a resume of one of its jobs does not."""
    try:
        return ControllerLock(queue_dir).acquire(record=record)
    except ControllerAlive:
        raise QueueBusy(f"{queue_dir}: queue {queue!r} is running, or another of its jobs is being resumed; its held "
                        "nodes are counted by one process at a time. To fix: wait until that process ends (then "
                        "resume this job), or resume its jobs one after another.") from None
