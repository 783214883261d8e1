"""What a run spends while its launches run: each node's billed interval in the ledger (opened at
``node_up``, carried to now at every heartbeat, closed at ``node_down``), and what the spending comes
to -- the forecast the alerts and the budget cap read, the display's progress, the trackers' meter."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from planner.job import JobSpec
from runtime.accounting import forecast
from runtime.accounting.forecast import Forecast
from runtime.accounting.ledger import IntervalKey, Ledger
from runtime.control.clock import Clock
from runtime.control.events import EventLog
from runtime.control.run_state import LaunchRecord, Progress, RunState
from runtime.control.run_summary import work_done_units
from runtime.providers.base import Node
from runtime.tracking.meter import Meter, write_meter
from runtime.training.store import CheckpointStore

log = logging.getLogger("runtime.control.controller")  # the controller's warnings, wherever its code lives


class Spend:
    """The billing and the spending figures of one run, kept for its controller."""

    def __init__(self, job: JobSpec, state: RunState, store: CheckpointStore, ledger: Ledger, events: EventLog, *,
                 clock: Clock, deadline_at: float | None, reserve_hours: Callable[[], float] = lambda: 0.0):
        self.job = job
        self.state = state
        self.store = store
        self.ledger = ledger
        self.events = events
        self.clock = clock
        self.deadline_at = deadline_at
        self.reserve_hours = reserve_hours  # what the budget cap keeps back now, in hours of burn

    def start_billing(self, record: LaunchRecord, nodes: Iterable[Node]) -> None:
        """Bill a launch's new nodes from when each was provisioned, and a reserved term it buys."""
        pool = record.pool
        if pool.term_usd > 0:  # a new reserved term: the whole term, once, for the nodes not bought yet
            self.ledger.buy_term(pool.id, pool.purchase, term_usd=pool.term_usd, nodes=record.nodes,
                                 launch_id=record.launch_id, at=record.provisioned_at)
        for node in nodes:
            start = self.clock.sim(node.provisioned_at)
            self.ledger.open_interval(IntervalKey(record.launch_id, node.id), pool=pool.id, purchase=pool.purchase,
                                      hourly_usd=pool.hourly_usd, start=start, reason="launch")
            self.events.emit("node_up", t=start, node=node.id, pool=pool.id, purchase=pool.purchase,
                             hourly_usd=pool.hourly_usd, launch=record.launch_id)

    def bill_until(self, record: LaunchRecord, nodes: Iterable[Node], now: float) -> None:
        for node in nodes:
            self.ledger.extend(IntervalKey(record.launch_id, node.id), until=now)

    def stop_billing(self, record: LaunchRecord, node: Node, end: float, reason: str) -> None:
        key = IntervalKey(record.launch_id, node.id)
        before = self.ledger.get(key)
        if before is None or not before.is_open:
            return  # closed by a controller that died before saving its state: counted once
        interval = self.ledger.close(key, end=end, reason=reason)
        self.events.emit("node_down", t=interval.end, node=node.id, launch=record.launch_id, reason=reason,
                         started=interval.start, hourly_usd=interval.hourly_usd)

    def forecast(self) -> Forecast | None:
        """Where the spending ends on the current pool at the measured pace; None between pools."""
        now = self.clock.now()
        pool, nodes = self.state.pool, self.state.nodes
        if pool is None or nodes is None:
            return None
        left = max(self.job.workload.amount - work_done_units(self.job, self.store), 0.0)
        hours = left / self.state.rate(self.job, pool, nodes)
        # A term the plan will buy counts from the start, not from the first launch on it.
        unbought = max(0, nodes - self.ledger.term_nodes(pool.id, pool.purchase)) * pool.term_usd
        budget = self.job.constraints.budget_usd
        return forecast.forecast(self.ledger.total_usd(now), hours, pool.hourly_usd * nodes, at=now,
                                 overhead_usd=unbought, budget_usd=budget, deadline_at=self.deadline_at,
                                 reserve_usd=pool.hourly_usd * nodes * self.reserve_hours() if budget else 0.0)

    def progress(self, record: LaunchRecord, fc: Forecast | None) -> Progress:
        return Progress(
            work_done=work_done_units(self.job, self.store), work_total=self.job.workload.amount,
            unit=self.job.workload.unit, units_per_hour=self.state.rate(self.job, record.pool, record.nodes),
            spent_usd=self.ledger.total_usd(self.clock.now()),
            forecast_usd=fc.total_usd if fc else None, budget_usd=self.job.constraints.budget_usd,
            eta=fc.expected_end if fc else None, deadline_at=self.deadline_at, now=self.clock.now(),
            pool=record.label(), launch=record.launch_id,
            state="training" if record.training_at is not None else "starting",
        )

    def write_meter(self, work_dir: Path, record: LaunchRecord, fc: Forecast | None, now: float) -> None:
        """The spend figures for the session's trackers (runtime.tracking.meter); never fails the run."""
        snap = self.ledger.snapshot(now=now)
        pool = record.pool
        try:
            write_meter(work_dir, Meter(
                t=now, spent_usd=snap.total_usd, burn_usd_per_hour=snap.burn_usd_per_hour,
                forecast_usd=fc.total_usd if fc else None, budget_usd=self.job.constraints.budget_usd,
                preemptions=self.state.preemptions, replans=self.state.replans, lost_steps=self.state.lost_steps,
                launch=record.launch_id, pool=record.label(), purchase=pool.purchase, cloud=pool.cloud,
                region=pool.region, instance_type=pool.instance_type))
        except OSError as exc:
            log.warning("could not write the trackers' meter: %s", exc)
