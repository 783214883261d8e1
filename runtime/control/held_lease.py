"""The held nodes a run's launch takes from its queue's allotment (:mod:`runtime.control.held`):
taken before the launch provisions them (waiting for another job's release while the deadline
allows), given back when its nodes are released, and given up early when the queue's window closes
or moving a job of the queue that waits for them would cost more than moving this one."""

from __future__ import annotations

import math
from collections.abc import Callable

from planner.job import JobSpec
from pricing.pool import Pool
from runtime.accounting.forecast import Forecast
from runtime.control.clock import Clock
from runtime.control.events import EventLog
from runtime.control.held import HeldAllotment


class HeldLease:
    """What one run holds of its queue's held nodes (nothing, outside a queue: ``allotment`` None).

    ``usd_per_hour(pool, nodes)`` is what an hour of the work of ``nodes`` nodes of ``pool`` would cost
    this job elsewhere (None: unknown): of two jobs that want the same nodes, the one for which moving
    costs less moves (:meth:`HeldAllotment.must_yield`)."""

    def __init__(self, allotment: HeldAllotment | None, job: JobSpec, *, clock: Clock, events: EventLog,
                 poll_s: float, deadline_at: float | None,
                 usd_per_hour: Callable[[Pool, int], float | None] = lambda pool, nodes: None):
        self.allotment = allotment
        self.job = job
        self.clock = clock
        self.events = events
        self.poll_s = poll_s
        self.deadline_at = deadline_at
        self.taken: tuple[Pool, int] | None = None
        self._usd_per_hour = usd_per_hour
        self._prices: dict[tuple[str, int], float | None] = {}

    def usd_per_hour(self, pool: Pool, nodes: int) -> float | None:
        """What an hour of this launch's work on ``nodes`` nodes of ``pool`` would cost elsewhere (asked at
        every poll while another job waits: remembered)."""
        key = (pool.id, nodes)
        if key not in self._prices:
            self._prices[key] = self._usd_per_hour(pool, nodes)
        return self._prices[key]

    def take(self, pool: Pool, count: int, *, launch_id: str, hours: float) -> bool:
        """Take ``count`` of the queue's held nodes of ``pool``, waiting for another job to release them
        while the deadline leaves the time to run the plan (``hours``) after the wait (first in line: the
        allotment knows it waits, so a holder with less work left can move off for it); False when it does
        not, and at once when the queue does not hold that many now (a plan made before its window closed,
        such as the schedule's plan of a job resumed late): no job's release would free them."""
        allotment = self.allotment
        assert allotment is not None
        name, since = self.job.name, None
        try:
            while not allotment.try_take(pool, count, name):
                if allotment.held_now(pool) < count:
                    return False
                now = self.clock.now()
                slack_h = math.inf if self.deadline_at is None else (self.deadline_at - now) / 3600 - hours
                allotment.wait(name, pool, count, slack_h=slack_h, hours=hours,
                               usd_per_hour=self.usd_per_hour(pool, count))
                if since is None:
                    self.events.emit("held_wait", launch=launch_id, pool=pool.label(count),
                                     free=allotment.free(pool))
                    since = now
                # Out of time, but a holder told to move off is on its way to a checkpoint: wait for it
                # while that costs less than a restart elsewhere would.  Two polls first, so that a
                # holder has seen this job waiting.
                moving = allotment.yield_pending(pool) and -slack_h < self.job.overheads.restart_minutes / 60
                if slack_h <= 0 and not moving and now - since >= 2 * self.poll_s * self.clock.scale:
                    return False
                self.clock.sleep(self.poll_s)
        finally:
            allotment.done_waiting(name)
        self.taken = (pool, count)
        return True

    def give_back(self) -> None:
        if self.taken is not None and self.allotment is not None:
            self.allotment.give_back(*self.taken, self.job.name)
            self.taken = None

    def why_end(self, pool: Pool, nodes: int, forecast: Callable[[], Forecast | None]) -> str | None:
        """Why the launch on the held nodes it took must end now, or None: the queue's window closed, or
        it should give them to a job of the queue that waits for them (runtime.control.held: the job
        with less work left moves off)."""
        if self.taken is None or self.allotment is None:
            return None
        if self.allotment.over(pool):
            return "the queue's reservation window closed"  # its clock, not this run's: asked at every poll
        if not self.allotment.others_wait(self.job.name, pool):
            return None
        fc = forecast()
        if fc is None:
            return None
        waiter = self.allotment.must_yield(self.job.name, pool, nodes, remaining_h=fc.remaining_hours,
                                           restart_h=self.job.overheads.restart_minutes / 60,
                                           usd_per_hour=self.usd_per_hour(pool, nodes))
        if waiter is None:
            return None
        return (f"job {waiter!r} of the queue waits for the held nodes and cannot wait the "
                f"{fc.remaining_hours:.2f} h this launch has left on them")
