"""The held reservations a queue's controllers share: each node is in one launch at a time.

`planner run QUEUE.toml` runs its jobs side by side, each through its own controller, and
every one of them may run on the queue's ``[[reservation]]`` nodes (its ``[[purchase.held]]``).
The team has those nodes once.  The schedule gives them to one job per slot, but the runs do not
keep to it to the second: a job runs slower than its estimate, or a re-plan after a preemption
picks the free held pool.  So a controller takes the nodes of a held launch from this allotment
before it provisions them and gives them back when it releases them:

* a launch whose nodes another job holds waits for them while its deadline leaves the time (the
  schedule counted on them: the job before overran its slot), and otherwise is refused like a
  cloud without capacity -- the controller re-plans, and its re-plans see only the held nodes that
  are free (:meth:`HeldAllotment.job_view`).
* A reservation with a slot window (``from_slot``/``until_slot``) counts only inside it, on the
  queue's clock.  When a window closes under nodes a launch holds (:meth:`HeldAllotment.over`),
  the controller stops that launch at a checkpoint as it does when a held reservation ends, and
  re-plans on what is free then: past its window the team no longer has the node (a capacity
  block's instances are terminated; a reserved instance is billed on demand), so a $0 hour
  there would be a lie in the ledger.
* The allotment is per process and thread-safe; a run outside a queue has none and uses its held
  nodes as its job says.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from planner.job import JobSpec
from pricing.pool import HELD, Pool

Key = tuple[str, str, str]  # cloud, region, instance type


def key_of(pool: Pool) -> Key:
    return (pool.cloud, pool.region, pool.instance_type)


@dataclass(frozen=True, slots=True)
class Window:
    """``count`` nodes of a reservation, held in [start_h, end_h) hours of the queue's time."""

    key: Key
    count: int
    start_h: float = 0.0
    end_h: float = math.inf


class HeldAllotment:
    """The held nodes of one queue, taken and given back by its controllers (thread-safe).

    ``hours`` says where the queue is in its own time (hours since its start): a reservation
    counts only inside its window, as the schedule counted it.
    """

    def __init__(self, windows: Iterable[Window], hours: Callable[[], float]):
        self._windows = tuple(windows)
        self._hours = hours
        self._taken: dict[Key, int] = {}
        self._lock = threading.Lock()

    def _held_now(self, key: Key) -> int:
        h = self._hours()
        return sum(w.count for w in self._windows if w.key == key and w.start_h <= h < w.end_h)

    def covers(self, pool: Pool) -> bool:
        return pool.purchase == HELD and any(w.key == key_of(pool) for w in self._windows)

    def try_take(self, pool: Pool, nodes: int) -> bool:
        """Take ``nodes`` of ``pool``'s reservation when that many are free; False (nothing taken) if not."""
        key = key_of(pool)
        with self._lock:
            if self._held_now(key) - self._taken.get(key, 0) < nodes:
                return False
            self._taken[key] = self._taken.get(key, 0) + nodes
            return True

    def give_back(self, pool: Pool, nodes: int) -> None:
        key = key_of(pool)
        with self._lock:
            if self._taken.get(key, 0) < nodes:
                raise RuntimeError(f"{key}: {nodes} held node(s) given back that were never taken")
            self._taken[key] -= nodes

    def over(self, pool: Pool) -> bool:
        """Whether the launches hold more of ``pool``'s reservation than the queue has now (a window closed)."""
        key = key_of(pool)
        with self._lock:
            return self._taken.get(key, 0) > self._held_now(key)

    def held_now(self, pool: Pool) -> int:
        """How many nodes of ``pool``'s reservation the queue has now (0 outside its windows)."""
        with self._lock:
            return self._held_now(key_of(pool))

    def free(self, pool: Pool) -> int:
        key = key_of(pool)
        with self._lock:
            return max(0, self._held_now(key) - self._taken.get(key, 0))

    def job_view(self, job: JobSpec, now: dt.datetime) -> JobSpec:
        """``job`` with each of the queue's held reservations cut to its nodes free now (none: left out)
        and to the end of the window it is in, ``now`` being the run's time: a plan made late in a
        window counts only the hours left in it."""
        with self._lock:
            h = self._hours()
            left = {w.key: max(0, self._held_now(w.key) - self._taken.get(w.key, 0)) for w in self._windows}
        ends = {}
        for w in self._windows:
            if w.start_h <= h < w.end_h and math.isfinite(w.end_h):
                ends[w.key] = min(ends.get(w.key, math.inf), w.end_h)
        held = []
        for r in job.purchase.held:
            key = (r.cloud, r.region, r.instance_type)
            if key not in left:
                held.append(r)  # not the queue's: the job's own
                continue
            n = min(r.count, left[key])
            left[key] -= n
            if n <= 0:
                continue
            update: dict[str, object] = {"count": n}
            if key in ends:
                window_end = now + dt.timedelta(hours=ends[key] - h)
                if window_end < r.ends_at:
                    update["until"] = window_end
            held.append(r.model_copy(update=update))
        if tuple(held) == job.purchase.held:
            return job
        return job.model_copy(update={"purchase": job.purchase.model_copy(update={"held": tuple(held)})})
