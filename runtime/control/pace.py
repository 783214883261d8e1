"""Leaving a launch that trains too slowly to meet the deadline.

The plan chose the launch's pool and node count by the job's throughput table. While the launch
trains, its workers' reports measure the real pace (``state.live``), and the run's forecasts blend
it with the table (:func:`planner.workload.blend_rate`: a few steps barely move it, a long stretch
replaces it). When at that pace the work left would end after the deadline, the controller solves
the re-plan a preemption would (the work, budget and time left less one restart, with what it
measured); if that plan meets the deadline on another pool or node count, the launch checkpoints and
the run moves there (its launch ends ``too_slow``). Otherwise it keeps going: no other plan does
better, and the ``deadline-at-risk`` alert says so. A preemption only re-plans after the fact; this
is what keeps a wrong table figure from costing the deadline.

The launch is judged once it has trained :data:`MIN_STEPS` steps, then at most once every
:data:`CHECK_HOURS` of the run's clock (each check that finds the deadline at risk solves the MILP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.control import planning
from runtime.control.replan import replan
from runtime.control.run_state import LaunchRecord
from runtime.control.run_summary import units_per_step

if TYPE_CHECKING:
    from runtime.control.controller import Controller

MIN_STEPS = 20
CHECK_HOURS = 0.1  # six minutes of the run's clock between two checks of one launch


@dataclass(frozen=True, slots=True)
class TooSlow:
    """Why the launch is left: the hours its pace needs and the plan that meets the deadline instead."""

    units_per_hour: float
    hours_needed: float
    hours_left: float
    move_to: str  # the re-plan's first phase, as a pool label

    @property
    def reason(self) -> str:
        return (f"at the pace measured the work left takes {self.hours_needed:.2f} h and {self.hours_left:.2f} h "
                f"are left to the deadline; {self.move_to} meets it")


class PaceWatch:
    """Judges one launch's pace while it trains (see the module docstring)."""

    def __init__(self, controller: Controller, record: LaunchRecord):
        self.controller = controller
        self.record = record
        self.next_check: float | None = None  # run-clock seconds

    def too_slow(self) -> TooSlow | None:
        """The move that meets the deadline when this launch's pace will not, else None."""
        c, record = self.controller, self.record
        live = c.state.live
        if c.deadline_at is None or record.training_at is None or record.training_step is None or live is None \
                or live.steps < MIN_STEPS:
            return None
        now = c.clock.now()
        if self.next_check is not None and now < self.next_check:
            return None
        self.next_check = now + CHECK_HOURS * 3600
        job = c.job
        done = (record.training_step + live.steps) * units_per_step(job, c.store)
        work_left = job.workload.amount - done
        rate = c.state.known_rate(job, record.pool, record.nodes)
        hours_left = (c.deadline_at - now) / 3600
        if work_left <= 0 or not rate or work_left / rate <= hours_left:
            return None
        result = replan(planning.replan_request(c, work_left, purchase=None,
                                                measured=c.state.measurement(record.pool, record.nodes)))
        if result.pool is None or result.nodes is None:
            return None
        if (result.pool.key, result.nodes) == (record.pool.key, record.nodes):
            return None
        return TooSlow(rate, work_left / rate, hours_left, result.pool.label(result.nodes))
