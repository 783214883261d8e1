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
* A job that waits says so (:meth:`HeldAllotment.wait`), in order of arrival: the nodes it waits
  for are not free to the jobs behind it, nor to the re-plans of the others.  When it cannot wait
  for the holder to finish (its deadline leaves less than the holder's remaining hours), one of the
  two must pay for capacity elsewhere, and the cheaper move is made: :meth:`HeldAllotment.must_yield`
  tells the holder to stop at a checkpoint and re-plan elsewhere when its remaining hours (and a
  restart) would cost less on the cheapest on-demand capacity its job may use than the waiter's
  hours would on the waiter's.  The two jobs may need different GPUs (a 70B model the 80 GB ones, a
  small one any), so the same node-hours can cost either several times the other; without a price
  for either, node-hours decide.  The schedule counted on the nodes being the waiter's by now.
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


@dataclass(slots=True)
class Waiter:
    """A job waiting for ``nodes`` of a reservation: it must have them by ``latest_h`` (queue hours) to
    finish in time, and its plan runs ``hours`` on them; an hour of that work costs ``usd_per_hour``
    elsewhere (None: unknown)."""

    job: str
    key: Key
    nodes: int
    latest_h: float
    hours: float
    usd_per_hour: float | None = None


class HeldAllotment:
    """The held nodes of one queue, taken and given back by its controllers (thread-safe).

    ``hours`` says where the queue is in its own time (hours since its start): a reservation
    counts only inside its window, as the schedule counted it.
    """

    def __init__(self, windows: Iterable[Window], hours: Callable[[], float]):
        self._windows = tuple(windows)
        self._hours = hours
        self._taken: dict[Key, int] = {}
        self._waiting: list[Waiter] = []  # in order of arrival
        self._yielding: dict[Key, set[str]] = {}  # holders told to move off, until they give back
        self._lock = threading.Lock()

    def _held_now(self, key: Key) -> int:
        h = self._hours()
        return sum(w.count for w in self._windows if w.key == key and w.start_h <= h < w.end_h)

    def covers(self, pool: Pool) -> bool:
        return pool.purchase == HELD and any(w.key == key_of(pool) for w in self._windows)

    def _promised(self, key: Key, job: str | None, *, ahead_only: bool) -> int:
        """Nodes of ``key`` the waiting jobs other than ``job`` wait for (``ahead_only``: those that came first)."""
        total = 0
        for w in self._waiting:
            if w.job == job:
                if ahead_only:
                    break
                continue
            if w.key == key:
                total += w.nodes
        return total

    def try_take(self, pool: Pool, nodes: int, job: str | None = None) -> bool:
        """Take ``nodes`` of ``pool``'s reservation for ``job`` when that many are free after the jobs
        waiting ahead of it; False (nothing taken) if not."""
        key = key_of(pool)
        with self._lock:
            free = self._held_now(key) - self._taken.get(key, 0) - self._promised(key, job, ahead_only=True)
            if free < nodes:
                return False
            self._taken[key] = self._taken.get(key, 0) + nodes
            return True

    def give_back(self, pool: Pool, nodes: int, job: str | None = None) -> None:
        key = key_of(pool)
        with self._lock:
            if self._taken.get(key, 0) < nodes:
                raise RuntimeError(f"{key}: {nodes} held node(s) given back that were never taken")
            self._taken[key] -= nodes
            if job is not None:
                self._yielding.get(key, set()).discard(job)

    def wait(self, job: str, pool: Pool, nodes: int, *, slack_h: float, hours: float,
             usd_per_hour: float | None = None) -> None:
        """``job`` waits for ``nodes`` of ``pool``'s reservation, has ``slack_h`` hours before it must start
        on them to meet its deadline (inf: none), and then runs ``hours``, each of which would cost it
        ``usd_per_hour`` elsewhere; called again, it updates."""
        key = key_of(pool)
        with self._lock:
            latest = self._hours() + slack_h
            for w in self._waiting:
                if w.job == job and w.key == key:
                    w.nodes, w.latest_h, w.hours, w.usd_per_hour = nodes, latest, hours, usd_per_hour
                    return
            self._waiting.append(Waiter(job, key, nodes, latest, hours, usd_per_hour))

    def done_waiting(self, job: str) -> None:
        with self._lock:
            self._waiting = [w for w in self._waiting if w.job != job]

    def others_wait(self, job: str, pool: Pool) -> bool:
        """Whether a job other than ``job`` waits for nodes of ``pool``'s reservation."""
        key = key_of(pool)
        with self._lock:
            return any(w.key == key and w.job != job for w in self._waiting)

    def must_yield(self, job: str, pool: Pool, nodes: int, *, remaining_h: float, restart_h: float,
                   usd_per_hour: float | None = None) -> str | None:
        """Whether ``job``, holding ``nodes`` of ``pool``'s reservation with ``remaining_h`` hours of work
        left on them (``usd_per_hour`` each elsewhere), should stop and move off for a waiting job: the
        name of that job, or None.

        It should when a waiter that its ``nodes`` would let start cannot wait ``remaining_h`` and its
        hours would cost more elsewhere than ``job``'s remaining hours plus a restart (in node-hours when
        either price is unknown).  Once told, ``job`` counts as yielding (:meth:`yield_pending`) until it
        gives the nodes back."""
        key = key_of(pool)
        with self._lock:
            now = self._hours()
            free = self._held_now(key) - self._taken.get(key, 0)
            for w in self._waiting:
                if w.key != key or w.job == job:
                    continue
                if usd_per_hour is not None and w.usd_per_hour is not None:
                    mine, theirs = usd_per_hour, w.usd_per_hour
                else:
                    mine, theirs = float(nodes), float(w.nodes)
                if (free + nodes >= w.nodes and w.latest_h < now + remaining_h
                        and (remaining_h + restart_h) * mine < w.hours * theirs):
                    self._yielding.setdefault(key, set()).add(job)
                    return w.job
                free -= w.nodes  # the first in line gets the nodes first
            return None

    def yield_pending(self, pool: Pool) -> bool:
        """Whether a holder of ``pool``'s reservation was told to move off and has not given its nodes back."""
        with self._lock:
            return bool(self._yielding.get(key_of(pool)))

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
        """Nodes of ``pool``'s reservation no launch holds now (some may be promised to a waiting job)."""
        key = key_of(pool)
        with self._lock:
            return max(0, self._held_now(key) - self._taken.get(key, 0))

    def job_view(self, job: JobSpec, now: dt.datetime) -> JobSpec:
        """``job`` with each of the queue's held reservations cut to its nodes free now and not waited for
        by another job (none: left out) and to the end of the window it is in, ``now`` being the run's
        time: a plan made late in a window counts only the hours left in it."""
        with self._lock:
            h = self._hours()
            left = {w.key: max(0, self._held_now(w.key) - self._taken.get(w.key, 0)
                               - self._promised(w.key, job.name, ahead_only=False)) for w in self._windows}
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
                if window_end < r.usable_until:
                    update["until"] = window_end
            held.append(r.model_copy(update=update))
        if tuple(held) == job.purchase.held:
            return job
        return job.model_copy(update={"purchase": job.purchase.model_copy(update={"held": tuple(held)})})
