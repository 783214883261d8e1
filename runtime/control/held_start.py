"""Moving a launch onto held capacity that starts while it trains.

A ``[[purchase.held]]`` reservation whose ``starts`` is later than the plan (a capacity block
bought for a future date) is in no plan made before it starts: the planner cannot count on nodes
the cloud does not give yet. When it starts while a launch trains elsewhere, the controller solves
the re-plan a preemption would (the work, budget and time left, with what the run measured, the
reservation now among the pools); when that plan's first phase is held capacity, the launch
checkpoints and the run moves there (its launch ends ``held_start``: planned, nothing lost, no
cool-down). Otherwise it keeps going: a move costs a restart, and with little work left, or a
reservation too slow for the deadline, the re-plan stays where it is. Each start is judged once.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.job import when
from pricing.pool import HELD
from runtime.control import planning
from runtime.control.replan import replan
from runtime.control.run_state import LaunchRecord
from runtime.control.run_summary import units_per_step

if TYPE_CHECKING:
    from runtime.control.controller import Controller


@dataclass(frozen=True, slots=True)
class HeldStart:
    """Why the launch is left: the reservation that started and the plan that moves onto it."""

    started_at: float  # run-clock seconds
    move_to: str  # the re-plan's first phase, as a pool label

    @property
    def reason(self) -> str:
        at = dt.datetime.fromtimestamp(self.started_at, dt.UTC)
        return f"held capacity started {when(at)} and the re-plan moves onto it: {self.move_to}"


class HeldStartWatch:
    """Judges, for one launch, each held reservation that starts while it runs (see the module docstring)."""

    def __init__(self, controller: Controller, record: LaunchRecord):
        self.controller = controller
        self.record = record
        self.pending = sorted({h.starts_at.timestamp() for h in controller.job.purchase.held
                               if h.starts_at is not None and h.starts_at.timestamp() > record.provisioned_at})

    def started(self) -> HeldStart | None:
        """The move onto held capacity that has just started, when the re-plan makes it, else None."""
        c, record = self.controller, self.record
        if not self.pending or record.training_at is None or record.training_step is None:
            return None
        now = c.clock.now()
        if now < self.pending[0]:
            return None
        started_at = self.pending[0]
        self.pending = [t for t in self.pending if t > now]
        live = c.state.live
        done = (record.training_step + (live.steps if live is not None else 0)) * units_per_step(c.job, c.store)
        work_left = c.job.workload.amount - done
        if work_left <= 0:
            return None
        result = replan(planning.replan_request(c, work_left, purchase=None,
                                                measured=c.state.measurement(record.pool, record.nodes)))
        if result.pool is None or result.nodes is None or result.pool.purchase != HELD:
            return None
        if (result.pool.key, result.nodes) == (record.pool.key, record.nodes):
            return None
        return HeldStart(started_at, result.pool.label(result.nodes))
