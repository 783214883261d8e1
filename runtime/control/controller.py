"""The controller behind ``planner run``: plan, provision, launch, follow, recover, account.

One run is a sequence of *launches*, each a torchrun job on one pool::

    quote (or --plan) -> pool A -> provision, launch (fresh rendezvous id) -> follow ...
      notice on node A1   -> ask the workers to checkpoint now (control.json "stop")
                          -> workers save step 812 and exit 75 -> release A's nodes
      -> A cools down, its interruption estimate is raised, throughput is measured
      -> policy (Can't Be Late Uniform Progress): spot still safe? -> re-plan -> pool B ...
    completed -> summary.json

Everything durable lives in the run directory: ``state.json`` (resume), ``events.jsonl``
(every decision with its reason, every node up/down), ``ledger.sqlite`` (every billed
node interval), ``outbox/`` (budget alerts), ``summary.json``, ``launches/`` (node logs),
``work/`` (the workers' ``status.json``/``control.json``) and, unless the job names
another place, ``ckpt/``.

A worker crash that is not a preemption is retried ``[run].max_restarts`` times on the
same pool, then fails the run with its cause; a launch that does not start training
within the rendezvous timeout (plus start-up grace) is a failure too, and so is a pool
without capacity (it cools down and the job is re-planned elsewhere). Nodes are always
released -- by pid, never by name -- before the controller moves on or exits, and
whatever goes wrong, ``state.json`` ends in an end state (never "running" after an error).

A launch on the team's cluster ends when its phase does (:mod:`runtime.control.phases`):
after the hours the plan gave it when the plan goes on to another pool, or the team's
``max_hours``; the workers checkpoint on the stop request a notice sends, the cluster is
left out of the re-plans from then on, and the next pool -- a cloud's -- resumes from that
checkpoint.

A launch whose measured pace would miss the deadline is left at a checkpoint for a re-plan that
meets it, when there is one (:mod:`runtime.control.pace`).

When only the deadline stands in the way of a re-plan, the run goes on with the cheapest
late plan, logs ``deadline_miss`` and alerts; with ``[run].on_deadline_miss = "stop"``
it ends "infeasible" instead (the preempted launch has already checkpointed).

The controller takes its provider and its clock (:meth:`Controller.open` builds both
from the run state when not given): it never sleeps or reads the time but through the
clock, and it never injects faults -- the provider carries out the chaos plan and the
controller sees only notices and node states.

This module holds the run's life (open, run, cancel, the end state, the release on the way out);
its steps live beside it, each a plain function given the controller:
:mod:`~runtime.control.launching` (provision and start a launch),
:mod:`~runtime.control.following` (the poll loop, the heartbeat, the release),
:mod:`~runtime.control.launch_end` (what a launch's end means and what comes next) and
:mod:`~runtime.control.planning` (the policy's decision and the re-plan) and
:mod:`~runtime.control.pace` (a launch too slow for the deadline), on top of
:mod:`~runtime.control.workers` (status and requests), :mod:`~runtime.control.spend` (billing,
forecast), :mod:`~runtime.control.held_lease` (a queue's held nodes) and
:mod:`~runtime.control.trackers`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.job import JobSpec
from planner.policy import make_policy
from pricing import learned
from pricing.catalog import Catalog
from pricing.sources import resolve_catalog
from runtime.accounting import alerts, forecast
from runtime.accounting.ledger import Ledger
from runtime.accounting.mailer import Mailer
from runtime.control import (
    checkpoint_owner,
    following,
    launch_end,
    launching,
    planning,
    trackers,
)
from runtime.control.chaos import ChaosFired, ChaosPlan, parse_chaos
from runtime.control.clock import Clock, WallClock
from runtime.control.events import FILENAME as EVENTS_FILE
from runtime.control.events import EventLog
from runtime.control.held import HeldAllotment
from runtime.control.held_lease import HeldLease
from runtime.control.replan import elsewhere_usd_per_hour
from runtime.control.run_state import Progress, RunState, RunStateError, StopsSeen, load_state, save_state
from runtime.control.run_summary import build_summary, write_summary
from runtime.control.spend import Spend
from runtime.control.workers import Workers
from runtime.providers import registry
from runtime.providers.base import NodeState, Provider, ProviderContext
from runtime.training.store import CheckpointStore

__all__ = [
    "Controller",
    "ProviderChoice",
    "Tuning",
]


@dataclass(frozen=True, slots=True)
class Tuning:
    """Knobs of one controller process (not part of the job; a resume may change them)."""

    poll_s: float = 0.1
    rdzv_timeout_s: float = 60.0
    shutdown_timeout_s: float = 10.0
    cooldown_minutes: float = 30.0
    startup_grace_s: float = 120.0
    cancel_timeout_s: float = 60.0  # on Ctrl-C / planner cancel: how long the workers get to checkpoint
    hold_nodes: tuple[int, ...] = ()


ProviderChoice = Provider | Callable[[ProviderContext], Provider] | None
"""What :meth:`Controller.open` takes as ``provider``: a factory given the run's
:class:`ProviderContext` (so it carries out the run's chaos plan on the run's clock), one
built already (with whatever faults it was built with), or None for the registered
provider the run state names."""


log = logging.getLogger("runtime.control.controller")


class Controller:
    """Runs one job to the end (see the module docstring); build it with :meth:`open`."""

    def __init__(self, run_dir: Path, state: RunState, job: JobSpec, catalog: Catalog, *, tuning: Tuning,
                 provider: Provider, clock: Clock, chaos: ChaosPlan | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 on_progress: Callable[[Progress], None] | None = None, held: HeldAllotment | None = None):
        self.run_dir = run_dir
        self.held = held  # shared with the other jobs of a queue (runtime.control.held)
        self.state = state
        self.job = job
        self.catalog = catalog
        self.tuning = tuning
        self.on_progress = on_progress
        self.clock = clock
        self.provider = provider
        self.work_dir = run_dir / "work"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.events = EventLog(run_dir, clock=clock.now, wall=clock.wall, listener=on_event)
        self.ledger = Ledger(run_dir, clock=clock.now)
        self.store = CheckpointStore(state.checkpoint_dir)
        self.policy = make_policy(state.policy)
        self.chaos = chaos
        if chaos is not None:
            chaos.on_fire = self._chaos_fired
        config = alerts.AlertsConfig.from_mapping(
            {k: v for k, v in job.alerts.model_dump().items() if v is not None}, source=state.job_path
        )
        self.alert_policy = alerts.AlertPolicy(config, run_name=job.name, budget_usd=job.constraints.budget_usd,
                                               run_dir=str(Path(run_dir).resolve()))
        self.outbox = Mailer(config, run_dir / "outbox")
        self.deadline_at = (
            state.origin + job.constraints.deadline_hours * 3600 if job.constraints.deadline_hours else None
        )
        self.expected_total_usd: float | None = None
        # What a stop really takes on this machine, for the budget cap (runtime.control.following).
        self.stop_timings = forecast.StopTimings(**state.stops.model_dump(),
                                                 bound_hours=tuning.shutdown_timeout_s * state.time_scale / 3600,
                                                 min_gap_hours=following.HEARTBEAT_S * state.time_scale / 3600)
        self.last_beat: float | None = None  # the last heartbeat's monotonic time, for the gap between two
        self.workers = Workers(self.work_dir, clock=clock, events=self.events)
        self.spend = Spend(job, state, self.store, self.ledger, self.events, clock=clock,
                           deadline_at=self.deadline_at, reserve_hours=self.stop_timings.reserve_hours)
        self.held_lease = HeldLease(held, job, clock=clock, events=self.events, poll_s=tuning.poll_s,
                                    deadline_at=self.deadline_at,
                                    usd_per_hour=lambda pool, nodes: elsewhere_usd_per_hour(job, catalog, pool, nodes))

    @classmethod
    def open(cls, run_dir: str | Path, *, tuning: Tuning = Tuning(),
             on_event: Callable[[dict[str, Any]], None] | None = None,
             on_progress: Callable[[Progress], None] | None = None,
             provider: ProviderChoice = None, clock: Clock | None = None,
             held: HeldAllotment | None = None, leftover: bool = False) -> Controller:
        """The controller of the run in ``run_dir`` (new, or to resume after a crash).

        ``clock`` defaults to the real clock at the run's origin and scale; ``provider`` to
        the registered provider the run state names (see :data:`ProviderChoice`); ``held``
        is the allotment of held nodes the run shares with the other jobs of its queue. ``leftover``
        opens a run that ended still holding a launch (its release failed), for :meth:`cancel` to release.

        Raises:
            RunStateError: no run there, it has already ended, or ``clock`` is not the run's.
            ChaosSpecError: the run's chaos spec no longer reads (a trace file gone).
            ProviderUnavailable: the run's provider is not registered here.
        """
        run_dir = Path(run_dir)
        state = load_state(run_dir)
        if leftover and state.current is not None:
            pass  # an ended run whose nodes were not released: opened to release them (`planner cancel`)
        elif state.status == "budget_cap":
            raise RunStateError(f"{run_dir}: the run stopped at its budget cap. To fix: continue it with a larger "
                                f"budget, `planner run --resume {run_dir} --budget-usd USD`.")
        elif state.status == "infeasible":
            raise RunStateError(f"{run_dir}: the run ended because no plan fit ({state.cause}). To fix: continue "
                                f"it with a larger budget, `planner run --resume {run_dir} --budget-usd USD`, or a "
                                f"later deadline, `planner run --resume {run_dir} --deadline-in HOURS`.")
        elif state.status != "running":
            raise RunStateError(f"{run_dir}: the run already ended ({state.status}); nothing to resume.")
        clock = clock or WallClock(state.origin, state.time_scale)
        clock.pauses = [list(p) for p in state.clock_pauses]
        clock.resume()  # a controller that died while its nodes started: time runs again now
        if (clock.origin, clock.scale) != (state.origin, state.time_scale):
            raise RunStateError(
                f"{run_dir}: the clock given (origin {clock.origin}, scale {clock.scale}) is not the run's "
                f"(origin {state.origin}, scale {state.time_scale}). To fix: build it from the run state."
            )
        job = state.job_spec()
        checkpoint_owner.claim(state.checkpoint_dir, run_dir=str(run_dir.resolve()), job=job.name)
        first = not state.launches and not (run_dir / EVENTS_FILE).exists()
        catalog = resolve_catalog(state.catalog, use_cache=state.use_cache)
        chaos = ChaosPlan(parse_chaos(state.chaos), clock, fired=state.chaos_fired)
        context = ProviderContext(run_dir / "provider", clock, chaos=chaos, hold_nodes=tuning.hold_nodes,
                                  run_id=state.tag(run_dir), home=state.home or "",
                                  options=dict(job.run.options), held=job.purchase.held)
        if provider is None:
            built = registry.create(state.provider, context)
        elif isinstance(provider, Provider):
            built = provider
        else:
            built = provider(context)
        try:
            controller = cls(run_dir, state, job, catalog, tuning=tuning, provider=built, clock=clock, chaos=chaos,
                             on_event=on_event, on_progress=on_progress, held=held)
        except BaseException:
            built.close()
            raise
        controller.events.emit("run_started" if first else "run_resumed", job=job.name, provider=state.provider,
                               time_scale=state.time_scale, policy=state.policy, chaos=state.chaos,
                               checkpoint_dir=state.checkpoint_dir)
        return controller

    # -- lifecycle ------------------------------------------------------------------------
    def save(self) -> None:
        self.state.clock_pauses = [(start, end) for start, end in self.clock.pauses]
        self.state.stops = StopsSeen(**self.stop_timings.seen())
        save_state(self.run_dir, self.state)

    def run(self) -> dict[str, Any]:
        """Drive the run to an end state; returns the summary (also in ``summary.json``).

        An error that escapes (a bug, a provider or ledger failure) ends the run "failed"
        with the error as its cause before it propagates: no error leaves it "running".
        """
        try:
            trackers.prepare(self.run_dir, self.job, cwd=self.state.cwd, events=self.events)
            if self.state.current is not None:
                launch_end.recover(self)
            if self.state.status == "running" and launch_end.training_finished(self):
                # Killed between the final checkpoint and the run's end: nothing is left to run.
                self.state.steps = self.store.latest_step() or self.state.steps
                self.finish("completed")
            while self.state.status == "running":
                if self.state.pool is None:
                    reason = "resume" if self.state.launches else "start"
                    planning.choose_pool(self, preempted=None, reason=reason)
                    continue
                launch_end.after(self, launching.launch_and_follow(self))
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM from `planner cancel` (detach.Cancelled)
            self._cancel(str(exc) or "interrupted (Ctrl-C)")
            raise
        except BaseException as exc:
            self._end_after_error("failed", f"controller error: {type(exc).__name__}: {exc}")
            raise
        finally:
            summary = self._close()
        return summary

    def cancel(self, cause: str) -> dict[str, Any]:
        """End a run whose controller is gone "cancelled", without running it: release the nodes it
        left (asking live workers to checkpoint first) and write the summary. Returns the summary."""
        try:
            record = self.state.current
            if record is not None:
                launch_end.recover(self)
                if self.state.status == "running":
                    record.outcome, record.reason = "cancelled", cause
            self._end_after_error("cancelled", cause)
        finally:
            summary = self._close()
        return summary

    def _cancel(self, cause: str) -> None:
        """Stop on Ctrl-C / SIGTERM: workers checkpoint, every node is released, the run ends
        "cancelled" at its committed step (``planner run --resume`` continues it)."""
        record = self.state.current
        try:
            if record is not None and self.state.status == "running":
                if self.workers.state(record.launch_id) == "running":
                    self.workers.request("stop", f"{cause}: checkpoint before the nodes are released")
                    deadline = self.clock.monotonic() + self.workers.stop_wait_s(record.launch_id,
                                                                                 self.tuning.cancel_timeout_s)
                    nodes = record.node_objects()
                    while self.clock.monotonic() < deadline and self.workers.state(record.launch_id) == "running":
                        if any(st.state in (NodeState.EXITED, NodeState.RECLAIMED) for st in self.provider.poll(nodes)):
                            break  # a node went down: no checkpoint is coming
                        self.clock.sleep(self.tuning.poll_s)
                following.release(self, record, record.node_objects(), reason="cancelled")
                record.end_step = self.store.latest_step() or 0
                record.outcome, record.reason = "cancelled", cause
                # The pace it trained at is the resumed run's to plan with: the next launch's reports replace `live`.
                launch_end.measure(self, record, self.workers.status(record.launch_id))
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: skip the checkpoint; _close still releases the nodes
        finally:  # also after an error (it propagates): the run must not stay "running"
            self._end_after_error("cancelled", cause)

    def _end_after_error(self, status: str, cause: str) -> None:
        if self.state.status != "running":
            return
        try:
            self.finish(status, cause)
        except Exception:
            # The alert could not go out (the same fault, say): the end state must still land.
            self.state.status, self.state.cause = status, cause
            try:
                self.save()
            except RunStateError as exc:  # its message names the file and the fix; _close still releases
                log.error("the end state (%s) could not be written: %s", status, exc)

    def _close(self) -> dict[str, Any]:
        error: Exception | None = None
        current = self.state.current
        if current is not None:
            try:
                following.release(self, current, current.node_objects(), reason=self.state.status)
            except Exception as exc:  # the summary must still be written; the error is re-raised after
                error = exc
                # Nodes billed with nobody watching: worth an email of its own.
                alerts.dispatch(self.alert_policy, self.ledger, self.outbox, None,
                                [alerts.NodesLeft(current.launch_id, f"{type(exc).__name__}: {exc}")],
                                now=self.clock.now())
        self.held_lease.give_back()  # whatever happened to the launch: the other jobs must not wait on it
        try:
            self.provider.close()
        except Exception as exc:
            error = error or exc
        summary = build_summary(self.state, self.job, self.ledger, self.store)
        write_summary(self.run_dir, summary)
        trackers.publish_report(self.run_dir, self.job, cwd=self.state.cwd, events=self.events)
        self.outbox.flush(timeout_s=10)
        self.outbox.close()
        self.ledger.disconnect()
        self.events.close()
        if error is not None:
            raise error
        return summary

    def finish(self, status: str, cause: str | None = None) -> None:
        """End the run with ``status`` (and ``cause``): its state, the run_end event, the pools' learned
        interruption rates and the end-of-run alert."""
        self.state.steps = max(self.state.steps, self.store.latest_step() or 0)  # the step really reached
        self.state.status = status
        self.state.cause = cause
        self.save()
        outcome = {"completed": alerts.RunOutcome.COMPLETED, "budget_cap": alerts.RunOutcome.BUDGET_CAP,
                   "cancelled": alerts.RunOutcome.CANCELLED,
                   "infeasible": alerts.RunOutcome.INFEASIBLE}.get(status, alerts.RunOutcome.FAILED)
        self.events.emit("run_end", status=status, cause=cause, steps=self.state.steps)
        self._record_interruptions()
        detail = f"step {self.state.steps}" + (f": {cause}" if cause else "")
        alerts.dispatch(self.alert_policy, self.ledger, self.outbox, self.spend.forecast(),
                        [alerts.RunEnded(outcome, detail)], now=self.clock.now())

    def _record_interruptions(self) -> None:
        """Add what this run saw on each spot pool to the learned rates the next quotes use.

        Only from real clouds: a simulated run's preemptions are the chaos spec's, not the pool's.
        """
        if not self.provider.remote:
            return
        seen: dict[tuple[str, str, str], list[float]] = {}
        for launch in self.state.launches:
            if launch.pool.purchase != "spot" or launch.released_at is None:
                continue
            counts = seen.setdefault((launch.pool.cloud, launch.pool.region, launch.pool.instance_type), [0, 0.0])
            counts[0] += launch.outcome == "preempted"
            counts[1] += launch.nodes * launch.hours(launch.released_at)
        for (cloud, region, instance_type), (preemptions, hours) in seen.items():
            try:
                learned.record(cloud, region, instance_type, preemptions=int(preemptions), node_hours=hours)
            except (OSError, learned.LearnedRatesError) as exc:  # a lesson lost, not a run
                log.warning("could not record the interruption rate of %s:%s:%s: %s", cloud, region,
                            instance_type, exc)

    def _chaos_fired(self, fired: ChaosFired) -> None:
        """The provider carried out a chaos preemption: log it and remember it across a resume."""
        assert self.chaos is not None
        self.state.chaos_fired = self.chaos.fired
        self.events.emit("chaos", node=fired.node, scheduled_s=round(fired.scheduled_s, 3),
                         elapsed_s=round(fired.elapsed_s, 3), reclaim_at=self.clock.sim(fired.reclaim_at))
        self.save()

