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

When only the deadline stands in the way of a re-plan, the run goes on with the cheapest
late plan, logs ``deadline_miss`` and alerts; with ``[run].on_deadline_miss = "stop"``
it ends "infeasible" instead (the preempted launch has already checkpointed).

The controller takes its provider and its clock (:meth:`Controller.open` builds both
from the run state when not given): it never sleeps or reads the time but through the
clock, and it never injects faults -- the provider carries out the chaos plan and the
controller sees only notices and node states.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.job import JobSpec, when
from planner.policy import ON_DEMAND, PolicyMemory, make_policy
from planner.report import plan_json
from pricing import learned, risk
from pricing.catalog import Catalog
from pricing.pool import CLUSTER, HELD, Pool
from pricing.sources import resolve_catalog
from runtime.accounting import alerts, forecast
from runtime.accounting.ledger import IntervalKey, Ledger
from runtime.accounting.mailer import Mailer
from runtime.control import checkpoint_owner, phases
from runtime.control.chaos import ChaosFired, ChaosPlan, parse_chaos
from runtime.control.clock import Clock, WallClock
from runtime.control.events import FILENAME as EVENTS_FILE
from runtime.control.events import EventLog
from runtime.control.held import HeldAllotment
from runtime.control.replan import (
    Measured,
    ReplanRequest,
    ReplanResult,
    decide,
    first_plan,
    pool_interruption_rate,
    replan_or_late,
)
from runtime.control.run_state import (
    LaunchRecord,
    Progress,
    RunState,
    RunStateError,
    build_summary,
    load_state,
    save_state,
    units_per_step,
    work_done_units,
    write_summary,
)
from runtime.errors import CheckpointError
from runtime.providers import registry
from runtime.providers.base import (
    LaunchSpec,
    Node,
    NodeState,
    Provider,
    ProviderContext,
    ProviderError,
)
from runtime.providers.notices import INTERRUPTION, Notice
from runtime.tracking import final as tracking_final
from runtime.tracking import rewind as tracking_rewind
from runtime.tracking import setup as tracking_setup
from runtime.tracking.launch import launch_env as tracking_env
from runtime.tracking.meter import Meter, write_meter
from runtime.training import contract
from runtime.training.store import CheckpointStore

__all__ = [
    "Controller",
    "ProviderChoice",
    "Tuning",
]

HEARTBEAT_S = 1.0
TICK_HOURS = 1 / 60


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


@dataclass(slots=True)
class _LaunchEnd:
    outcome: contract.Outcome
    reason: str
    budget_stop: bool = False
    no_capacity: bool = False
    checkpoint_kept: bool = True
    permanent: bool = False  # a failure a retry would repeat (the checkpoint storage refuses writes)
    phase_end: bool = False  # stopped at a checkpoint because the pool's phase ended (runtime.control.phases)


class Controller:
    """Runs one job to the end (see the module docstring); build it with :meth:`open`."""

    def __init__(self, run_dir: Path, state: RunState, job: JobSpec, catalog: Catalog, *, tuning: Tuning,
                 provider: Provider, clock: Clock, chaos: ChaosPlan | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 on_progress: Callable[[Progress], None] | None = None, held: HeldAllotment | None = None):
        self.run_dir = run_dir
        self.held = held  # shared with the other jobs of a queue (runtime.control.held)
        self._held_taken: tuple[Pool, int] | None = None
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
        self.alert_policy = alerts.AlertPolicy(config, run_name=job.name, budget_usd=job.constraints.budget_usd)
        self.outbox = Mailer(config, run_dir / "outbox")
        self.deadline_at = (
            state.origin + job.constraints.deadline_hours * 3600 if job.constraints.deadline_hours else None
        )
        self.expected_total_usd: float | None = None
        # What a stop really takes on this machine, for the budget cap (see _heartbeat and _release).
        self.stop_timings = forecast.StopTimings()
        self._last_beat: float | None = None
        self._stop_asked: tuple[str, float] | None = None  # (request id, simulated time asked)

    @classmethod
    def open(cls, run_dir: str | Path, *, tuning: Tuning = Tuning(),
             on_event: Callable[[dict[str, Any]], None] | None = None,
             on_progress: Callable[[Progress], None] | None = None,
             provider: ProviderChoice = None, clock: Clock | None = None,
             held: HeldAllotment | None = None) -> Controller:
        """The controller of the run in ``run_dir`` (new, or to resume after a crash).

        ``clock`` defaults to the real clock at the run's origin and scale; ``provider`` to
        the registered provider the run state names (see :data:`ProviderChoice`); ``held``
        is the allotment of held nodes the run shares with the other jobs of its queue.

        Raises:
            RunStateError: no run there, it has already ended, or ``clock`` is not the run's.
            ChaosSpecError: the run's chaos spec no longer reads (a trace file gone).
            ProviderUnavailable: the run's provider is not registered here.
        """
        run_dir = Path(run_dir)
        state = load_state(run_dir)
        if state.status != "running":
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
                                  run_id=run_dir.resolve().name, options=dict(job.run.options))
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
        save_state(self.run_dir, self.state)

    def run(self) -> dict[str, Any]:
        """Drive the run to an end state; returns the summary (also in ``summary.json``).

        An error that escapes (a bug, a provider or ledger failure) ends the run "failed"
        with the error as its cause before it propagates: no error leaves it "running".
        """
        try:
            self._prepare_tracking()
            if self.state.current is not None:
                self._recover()
            if self.state.status == "running" and self._training_finished():
                # Killed between the final checkpoint and the run's end: nothing is left to run.
                self.state.steps = self.store.latest_step() or self.state.steps
                self._finish("completed")
            while self.state.status == "running":
                if self.state.pool is None:
                    self._choose_pool(preempted=None, reason="start")
                    continue
                self._after(self._launch_and_follow())
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM from `planner cancel` (detach.Cancelled)
            self._cancel(str(exc) or "interrupted (Ctrl-C)")
            raise
        except BaseException as exc:
            self._end_after_error("failed", f"controller error: {type(exc).__name__}: {exc}")
            raise
        finally:
            summary = self._close()
        return summary

    def _training_finished(self) -> bool:
        """True when the training has already ended: its last launch said so, or its
        newest committed checkpoint is the final one or holds all the job's work."""
        last = self.state.launches[-1] if self.state.launches else None
        status = self._status(last.launch_id) if last is not None else None
        if status is not None and status.state == "completed":
            return True
        latest = self.store.latest_step()
        if latest is None:
            return False
        try:
            # An interval save that landed on the last step is the final one too: no "final" save follows it.
            return (self.store.read_manifest(latest).reason == "final"
                    or work_done_units(self.job, self.store) >= self.job.workload.amount)
        except CheckpointError:
            return False

    def cancel(self, cause: str) -> dict[str, Any]:
        """End a run whose controller is gone "cancelled", without running it: release the nodes it
        left (asking live workers to checkpoint first) and write the summary. Returns the summary."""
        try:
            record = self.state.current
            if record is not None:
                self._recover()
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
                if self._worker_state(record.launch_id) == "running":
                    self._request("stop", f"{cause}: checkpoint before the nodes are released")
                    deadline = self.clock.monotonic() + self.tuning.cancel_timeout_s
                    nodes = record.node_objects()
                    while self.clock.monotonic() < deadline and self._worker_state(record.launch_id) == "running":
                        if any(st.state in (NodeState.EXITED, NodeState.RECLAIMED) for st in self.provider.poll(nodes)):
                            break  # a node went down: no checkpoint is coming
                        self.clock.sleep(self.tuning.poll_s)
                self._release(record, record.node_objects(), reason="cancelled")
                record.end_step = self.store.latest_step() or 0
                record.outcome, record.reason = "cancelled", cause
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: skip the checkpoint; _close still releases the nodes
        finally:  # also after an error (it propagates): the run must not stay "running"
            self._end_after_error("cancelled", cause)

    def _end_after_error(self, status: str, cause: str) -> None:
        if self.state.status != "running":
            return
        try:
            self._finish(status, cause)
        except Exception:
            # The alert could not go out (the same fault, say): the end state must still land.
            self.state.status, self.state.cause = status, cause
            try:
                self.save()
            except RunStateError:
                log.exception("the end state (%s) could not be written", status)  # _close still releases

    def _close(self) -> dict[str, Any]:
        error: Exception | None = None
        current = self.state.current
        try:
            if current is not None:
                self._release(current, current.node_objects(), reason=self.state.status)
        except Exception as exc:  # the summary must still be written; the error is re-raised after
            error = exc
        self._give_back_held()  # whatever happened to the launch: the other jobs must not wait on it
        try:
            self.provider.close()
        except Exception as exc:
            error = error or exc
        summary = build_summary(self.state, self.job, self.ledger, self.store)
        write_summary(self.run_dir, summary)
        self._publish_tracking()
        self.outbox.flush(timeout_s=10)
        self.outbox.close()
        self.ledger.disconnect()
        self.events.close()
        if error is not None:
            raise error
        return summary

    def _prepare_tracking(self) -> None:
        """Ready the trackers' shared stores before any node starts (runtime.tracking.setup)."""
        for problem in tracking_setup.prepare_trackers(self.run_dir, self.job, cwd=self.state.cwd):
            self.events.emit("tracking_problem", message=problem)

    def _rewind_tracking(self, step: int) -> None:
        """Before a launch resumes at ``step``: the trackers that would keep two values of a step trained
        again forget the lost launch's (runtime.tracking.rewind)."""
        if not self.job.tracking.enabled:
            return
        done, problems = tracking_rewind.rewind_trackers(self.run_dir, self.job, step=step, cwd=self.state.cwd)
        for what in done:
            self.events.emit("tracking_rewind", step=step, message=what)
        for problem in problems:
            self.events.emit("tracking_problem", message=problem)

    def _publish_tracking(self) -> None:
        """The run report into the job's trackers; a tracker's failure is an event, never the run's."""
        try:
            problems = tracking_final.publish_report(self.run_dir, self.job, cwd=self.state.cwd)
        except Exception as exc:  # noqa: BLE001 -- the report could not even be built: say so, the run has ended anyway
            problems = [f"the run report could not be published ({type(exc).__name__}: {exc})"]
        for problem in problems:
            self.events.emit("tracking_problem", message=problem)

    def _finish(self, status: str, cause: str | None = None) -> None:
        self.state.steps = max(self.state.steps, self.store.latest_step() or 0)  # the step really reached
        self.state.status = status
        self.state.cause = cause
        self.save()
        outcome = {"completed": alerts.RunOutcome.COMPLETED, "budget_cap": alerts.RunOutcome.BUDGET_CAP,
                   "cancelled": alerts.RunOutcome.CANCELLED}.get(status, alerts.RunOutcome.FAILED)
        self.events.emit("run_end", status=status, cause=cause, steps=self.state.steps)
        self._record_interruptions()
        detail = f"step {self.state.steps}" + (f": {cause}" if cause else "")
        alerts.dispatch(self.alert_policy, self.ledger, self.outbox, self._forecast(),
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

    # -- choosing where to run -------------------------------------------------------------
    def _choose_pool(self, *, preempted: str | None, reason: str) -> None:
        """Pick the next pool: the policy says spot or on-demand, the planner says which."""
        done = work_done_units(self.job, self.store)
        total = self.job.workload.amount
        last = self.state.launches[-1] if self.state.launches else None
        purchase: tuple[str, ...] | None = None
        while last is not None:
            decision = decide(
                self.policy, job=self._plannable_job(), catalog=self.catalog,
                elapsed_hours=self.clock.elapsed_hours(), work_done=done, work_total=total, rate_per_hour=self.state.rate(self.job, last.pool, last.nodes),
                cooling=self.state.cooling_at(self.clock.now()), preempted=preempted,
                memory=PolicyMemory.from_dict(self.state.policy_memory), tick_hours=TICK_HOURS,
            )
            self.state.policy_memory = decision.memory.to_dict()
            self.events.emit("decision", policy=self.state.policy, target=decision.target, reason=decision.reason,
                             trigger=reason)
            if decision.target is not None:
                if decision.target == ON_DEMAND and "on_demand" in self.job.purchase.allow:
                    purchase = ("on_demand",)
                break
            self.clock.sleep(self.clock.real_seconds(TICK_HOURS * 3600))  # wait one tick for spot to come back
        now = self.clock.now()
        result = self._replan(done, total, purchase)
        if result.plan is None and purchase is not None:
            # Every pool bought that way refused a launch, or none fits: spot or a reservation still may.
            result = self._replan(done, total, None)
        if result.plan is None or result.pool is None or result.nodes is None:
            self.events.emit("replan" if self.state.launches else "plan", reason=result.reason, pool=None,
                             pool_changed=False)
            self._finish("infeasible", result.reason)
            return
        pool, nodes, plan_view = result.pool, result.nodes, result.plan
        if result.late and self._deadline_missed(result):
            return
        self.state.set_pool(pool, nodes)
        self.state.plan = plan_json(plan_view)
        old_total = self.expected_total_usd
        self.expected_total_usd = self.ledger.total_usd(now) + plan_view.expected_cost_usd
        if self.state.launches:
            self.state.replans += 1
            self.events.emit("replan", reason=reason + (f"; {result.note}" if result.note else ""),
                             previous=last.label() if last else None, pool=pool.label(nodes),
                             pool_changed=last is None or last.pool.key != pool.key,
                             expected_cost_usd=round(plan_view.expected_cost_usd, 4),
                             expected_hours=round(plan_view.expected_hours, 4), work_left=total - done)
        else:
            self.events.emit("plan", pool=pool.label(nodes), expected_cost_usd=round(plan_view.expected_cost_usd, 4),
                             expected_hours=round(plan_view.expected_hours, 4), note=result.note)
        self.save()
        replanned = []
        if old_total is not None:
            replanned.append(alerts.Replanned(str(self.state.replans), old_total, self.expected_total_usd, reason))
        alerts.dispatch(self.alert_policy, self.ledger, self.outbox, self._forecast(), replanned, now=now)

    def _replan(self, done: float, total: float, purchase: tuple[str, ...] | None) -> ReplanResult:
        now = self.clock.now()
        cooling, refused = self.state.cooling_at(now), self.state.refused_at(now)
        if not self.state.launches and not self.state.failures:  # nothing refused or learned yet: the quote
            return first_plan(self.job, self.catalog, now=phases.run_time(now))
        budget = self.job.constraints.budget_usd
        m = self.state.measured
        return replan_or_late(ReplanRequest(
            job=self._plannable_job(), catalog=self.catalog, work_left=total - done,
            budget_left_usd=budget - self.ledger.total_usd(now) if budget is not None else None,
            hours_left=(self.deadline_at - now) / 3600 if self.deadline_at is not None else None,
            restart_hours=self.job.overheads.restart_minutes / 60,
            measured=Measured(m.gpu, m.gpus, m.units_per_hour, m.steps) if m else None,
            cooling=cooling, refused=refused, rates=dict(self.state.rates), purchase=purchase,
            now=phases.run_time(now),
        ))

    def _plannable_job(self) -> JobSpec:
        """The job a re-plan solves: without the cluster pools left out now (runtime.control.phases),
        and in a queue with only the held nodes the other jobs leave free (runtime.control.held)."""
        job = self.job if self.held is None else self.held.job_view(self.job, phases.run_time(self.clock.now()))
        return phases.replan_job(job, left_out=self.state.left_out_at(self.clock.now()),
                                 used_hours=self.state.pool_hours)

    def _phase_end_at(self, record: LaunchRecord) -> tuple[float, str] | None:
        """When the launch's phase ends (simulated time) and why, or None: it runs until the job is done."""
        hours = phases.phase_hours(self.state.plan, record.pool, self.job,
                                   self.state.pool_hours.get(record.pool.id, 0.0))
        if hours is not None:
            return record.provisioned_at + hours * 3600, "the hours the plan gives the team's cluster"
        held = phases.held_end(self.job, record.pool)
        if held is not None:
            return held, f"the held reservation ends {when(phases.run_time(held))}"
        return None

    def _phase_over(self, record: LaunchRecord, phase_end_at: tuple[float, str] | None) -> str | None:
        """Why the launch's phase is over now, or None."""
        if phase_end_at is not None and self.clock.now() >= phase_end_at[0]:
            return phase_end_at[1]
        if self._held_taken is not None and self.held is not None:
            if self.held.over(record.pool):
                return "the queue's reservation window closed"  # its clock, not this run's: asked at every poll
            return self._yield_held(record)
        return None

    def _yield_held(self, record: LaunchRecord) -> str | None:
        """Why this launch should give its held nodes to a job of the queue that waits for them, or None
        (runtime.control.held: the job with less work left moves off)."""
        assert self.held is not None
        if not self.held.others_wait(self.job.name, record.pool):
            return None
        fc = self._forecast()
        if fc is None:
            return None
        waiter = self.held.must_yield(self.job.name, record.pool, record.nodes, remaining_h=fc.remaining_hours,
                                      restart_h=self.job.overheads.restart_minutes / 60)
        if waiter is None:
            return None
        return (f"job {waiter!r} of the queue waits for the held nodes and cannot wait the "
                f"{fc.remaining_hours:.2f} h this launch has left on them")

    def _deadline_missed(self, result: ReplanResult) -> bool:
        """Log and alert a plan that can only finish late; True when the job says to stop instead."""
        stop = self.job.run.on_deadline_miss == "stop"
        assert result.plan is not None and result.pool is not None
        self.events.emit("deadline_miss", reason=result.note, action="stop" if stop else "continue",
                         pool=result.pool.label(result.nodes),
                         expected_cost_usd=round(result.plan.expected_cost_usd, 4),
                         expected_hours=round(result.plan.expected_hours, 4))
        if stop:
            self._finish("infeasible", f"{result.note}; [run].on_deadline_miss = \"stop\"")
            return True
        now = self.clock.now()
        if self.deadline_at is not None:
            late = alerts.LatePlan(now + result.plan.expected_hours * 3600, self.deadline_at, result.note)
            alerts.dispatch(self.alert_policy, self.ledger, self.outbox, self._forecast(), [late], now=now)
        return False

    # -- launching ------------------------------------------------------------------------
    def _launch_and_follow(self) -> _LaunchEnd:
        pool, count = self.state.pool, self.state.nodes
        assert pool is not None and count is not None
        launch_id = f"l-{len(self.state.launches) + 1}"
        start_step = self.store.latest_step() or 0
        if self.held is not None and self.held.covers(pool) and not self._take_held(pool, count, launch_id):
            why = (f"the queue's other jobs hold its nodes ({self.held.free(pool)} free)"
                   if self.held.held_now(pool) >= count else
                   f"the queue holds {self.held.held_now(pool)} of its nodes now (outside the reservation's window)")
            return _LaunchEnd(contract.Outcome.FAILED, f"{pool.label(count)}: {why}", no_capacity=True)
        if self.provider.host_startup and self.clock.scale > 1:
            self.clock.pause()  # until the workers train: this host's start-up is not the cloud's
        try:
            return self._provision_and_follow(pool, count, launch_id, start_step)
        finally:
            self.clock.resume()

    def _take_held(self, pool: Pool, count: int, launch_id: str) -> bool:
        """Take ``count`` of the queue's held nodes of ``pool``, waiting for another job to release them
        while the deadline leaves the time to run the plan after the wait (first in line: the allotment
        knows it waits, so a holder with less work left can move off for it); False when it does not, and
        at once when the queue does not hold that many now (a plan made before its window closed, such as
        the schedule's plan of a job resumed late): no job's release would free them."""
        assert self.held is not None
        name, since = self.job.name, None
        hours = float((self.state.plan or {}).get("expected_hours") or 0.0)
        try:
            while not self.held.try_take(pool, count, name):
                if self.held.held_now(pool) < count:
                    return False
                now = self.clock.now()
                slack_h = math.inf if self.deadline_at is None else (self.deadline_at - now) / 3600 - hours
                self.held.wait(name, pool, count, slack_h=slack_h, hours=hours)
                if since is None:
                    self.events.emit("held_wait", launch=launch_id, pool=pool.label(count),
                                     free=self.held.free(pool))
                    since = now
                # Out of time, but a holder told to move off is on its way to a checkpoint: wait for it
                # while that costs less than a restart elsewhere would.  Two polls first, so that a
                # holder has seen this job waiting.
                moving = self.held.yield_pending(pool) and -slack_h < self.job.overheads.restart_minutes / 60
                if slack_h <= 0 and not moving and now - since >= 2 * self.tuning.poll_s * self.clock.scale:
                    return False
                self.clock.sleep(self.tuning.poll_s)
        finally:
            self.held.done_waiting(name)
        self._held_taken = (pool, count)
        return True

    def _give_back_held(self) -> None:
        if self._held_taken is not None and self.held is not None:
            self.held.give_back(*self._held_taken, self.job.name)
            self._held_taken = None

    def _provision_and_follow(self, pool: Pool, count: int, launch_id: str, start_step: int) -> _LaunchEnd:
        try:
            nodes = self.provider.provision(pool, nodes=count, launch_id=launch_id)
        except ProviderError as exc:
            self._give_back_held()
            self.events.emit("provision_failed", launch=launch_id, pool=pool.label(count), reason=str(exc))
            return _LaunchEnd(contract.Outcome.FAILED, f"{pool.label(count)}: {exc}", no_capacity=True)
        record = LaunchRecord(
            launch_id=launch_id, pool=pool, nodes=count, world_size=count * self.job.run.nproc_per_node,
            start_step=start_step, provisioned_at=self.clock.sim(nodes[0].provisioned_at),
            hosts=[n.to_dict() for n in nodes],
        )
        self.state.launches.append(record)
        self.state.active = True
        self.save()
        if pool.term_usd > 0:  # a new reserved term: the whole term, once, for the nodes not bought yet
            self.ledger.buy_term(pool.id, pool.purchase, term_usd=pool.term_usd, nodes=count,
                                 launch_id=launch_id, at=record.provisioned_at)
        for node in nodes:
            start = self.clock.sim(node.provisioned_at)
            self.ledger.open_interval(IntervalKey(launch_id, node.id), pool=pool.id, purchase=pool.purchase,
                                      hourly_usd=pool.hourly_usd, start=start, reason="launch")
            self.events.emit("node_up", t=start, node=node.id, pool=pool.id, purchase=pool.purchase,
                             hourly_usd=pool.hourly_usd, launch=launch_id)
        if len(self.state.launches) > 1:
            self._rewind_tracking(start_step)  # while the nodes boot, before anything of this launch logs
        self.provider.wait_ready(nodes, timeout_s=self.tuning.rdzv_timeout_s)
        # A request the last launch never acted on must not stop this one.
        (self.work_dir / contract.CONTROL_FILE).unlink(missing_ok=True)
        rdzv_id = uuid.uuid4().hex
        nodes = self.provider.run(nodes, self._launch_spec(launch_id, rdzv_id, pool))
        record.hosts = [n.to_dict() for n in nodes]
        self.save()
        self.events.emit("launch", launch=launch_id, pool=record.label(), world_size=record.world_size,
                         rdzv_id=rdzv_id, start_step=start_step)
        return self._follow(record, nodes)

    def _launch_spec(self, launch_id: str, rdzv_id: str, pool: Pool) -> LaunchSpec:
        scale = self.state.time_scale
        mtbf = None
        if pool.purchase == "spot":
            rate = self.state.rates.get(pool.id) or pool_interruption_rate(self.catalog, pool) or risk.OVER_20_RATE
            mtbf = 3600.0 / rate / scale
        terms = contract.LaunchContract(
            checkpoint_dir=self.state.checkpoint_dir, run_dir=str(self.work_dir), attempt=launch_id, mtbf_s=mtbf,
            restart_s=self.job.overheads.restart_minutes * 60 / scale, pg_timeout_s=60.0,
        )
        return LaunchSpec(
            launch_id=launch_id, entrypoint=tuple(self.job.run.entrypoint), nproc_per_node=self.job.run.nproc_per_node,
            rdzv_id=rdzv_id, env={**terms.to_env(), **tracking_env(self.job, self.run_dir)}, cwd=self.state.cwd,
            log_dir=self.run_dir / "launches" / launch_id,
            rdzv_timeout_s=self.tuning.rdzv_timeout_s, shutdown_timeout_s=self.tuning.shutdown_timeout_s,
        )

    # -- following a launch ---------------------------------------------------------------
    def _follow(self, record: LaunchRecord, nodes: list[Node]) -> _LaunchEnd:
        started = self.clock.monotonic()
        last_beat = float("-inf")
        stop_sent: str | None = None
        reported: set[tuple[str, str]] = set()
        notice: tuple[Node, Notice] | None = None
        ending_since: float | None = None
        budget_stop = False
        phase_end_at = self._phase_end_at(record)
        phase_end = False
        while True:
            statuses = self.provider.poll(nodes)
            if record.training_at is None:
                status = self._status(record.launch_id)
                if status is not None and status.state == "running":
                    self.clock.resume()
                    record.training_at = self.clock.sim(status.updated_at)
                    record.training_step = status.step
                    self.events.emit("training", launch=record.launch_id, step=status.step,
                                     world_size=status.world_size)
                    self.save()
                    self.provider.training_started(nodes)
            for node in nodes:
                seen = self.provider.interruption_notice(node)
                if seen is None or (node.id, seen.kind) in reported:
                    continue
                reported.add((node.id, seen.kind))
                self.events.emit("notice", node=node.id, cloud=seen.cloud, kind=seen.kind, action=seen.action,
                                 detail=seen.detail)
                if seen.kind == INTERRUPTION and stop_sent is None:
                    notice = (node, seen)
                    stop_sent = self._request("stop", f"{seen.cloud} interruption notice for {node.id}")
                elif seen.kind != INTERRUPTION and stop_sent is None:
                    self._request("checkpoint", f"{seen.cloud} {seen.kind} for {node.id}")
            now = self.clock.monotonic()
            if now - last_beat >= HEARTBEAT_S:
                last_beat = now
                cap = self._heartbeat(record, nodes)
                if cap is not None and cap.stop_now and stop_sent is None:
                    budget_stop = True
                    stop_sent = self._request("stop", "budget cap: checkpoint and stop before overspending")
                elif cap is not None and budget_stop and cap.release_now:
                    self.events.emit("budget_release", reason="the checkpoint did not commit in time: release "
                                     "without it to stay under the budget", spent_usd=round(cap.spent_usd, 4))
                    break
            if stop_sent is None and record.training_at is not None and (why := self._phase_over(record, phase_end_at)):
                phase_end = True
                stop_sent = self._request("stop", f"{record.pool.id}: its phase of the plan ends ({why}): "
                                                  "checkpoint and move on")
            if stop_sent is not None and self._worker_state(record.launch_id) == "preempted":
                break  # the checkpoint is committed: release now rather than pay for the workers' teardown
            ended = any(st.state in (NodeState.EXITED, NodeState.RECLAIMED) for st in statuses)
            running = any(st.state is NodeState.RUNNING for st in statuses)
            if ended and ending_since is None:
                ending_since = now
            if ended and (not running or now - ending_since > self.tuning.shutdown_timeout_s):
                break  # a node that ended takes the job down with it: the others get a grace period
            limit = self.tuning.rdzv_timeout_s + self.tuning.startup_grace_s
            if record.training_at is None and now - started > limit:
                self._release(record, nodes, reason="startup timeout")
                return self._classify(record, statuses, reclaimed=False, budget_stop=False, notice=None,
                                      failure=f"the launch did not start training within {limit:.0f}s "
                                              "(a stuck rendezvous or a hung start-up)")
            self.clock.sleep(self.tuning.poll_s)
        reclaimed = any(s.state is NodeState.RECLAIMED for s in statuses)
        if notice is not None and not reclaimed:
            node, seen = notice
            self.provider.acknowledge(node, seen)  # Azure: evict now, the checkpoint is safe
        self._release(record, nodes, reason="preempted" if notice or reclaimed else
                      "phase end" if phase_end else "launch ended")
        return self._classify(record, statuses, reclaimed=reclaimed, budget_stop=budget_stop, notice=notice,
                              phase_end=phase_end)

    def _status(self, launch_id: str) -> contract.RunStatus | None:
        try:
            status = contract.read_status(self.work_dir)
        except contract.ContractError:
            return None
        return status if status is not None and status.attempt == launch_id else None

    def _worker_state(self, launch_id: str) -> str | None:
        status = self._status(launch_id)
        return status.state if status is not None else None

    def _request(self, action: contract.Action, reason: str) -> str:
        request = contract.request_checkpoint(self.work_dir / contract.CONTROL_FILE, action, reason=reason)
        if action == "stop":
            self._stop_asked = (request.id, self.clock.now())
        self.events.emit("checkpoint_request", action=action, reason=reason, request=request.id)
        return request.id

    def _chaos_fired(self, fired: ChaosFired) -> None:
        """The provider carried out a chaos preemption: log it and remember it across a resume."""
        assert self.chaos is not None
        self.state.chaos_fired = self.chaos.fired
        self.events.emit("chaos", node=fired.node, scheduled_s=round(fired.scheduled_s, 3),
                         elapsed_s=round(fired.elapsed_s, 3), reclaim_at=self.clock.sim(fired.reclaim_at))
        self.save()

    def _heartbeat(self, record: LaunchRecord, nodes: list[Node]) -> forecast.CapDecision | None:
        """Bill the nodes up to now, send due alerts, refresh the display; the cap's decision (None: no budget)."""
        beat = self.clock.monotonic()
        if self._last_beat is not None:
            self.stop_timings.saw_gap((beat - self._last_beat) * self.state.time_scale / 3600)
        self._last_beat = beat
        now = self.clock.now()
        for node in nodes:
            self.ledger.extend(IntervalKey(record.launch_id, node.id), until=now)
        fc = self._forecast()
        alerts.dispatch(self.alert_policy, self.ledger, self.outbox, fc, now=now)
        if self.job.tracking.enabled:
            self._write_meter(record, fc, now)
        if self.on_progress is not None:
            self.on_progress(self._progress(record, fc))
        budget = self.job.constraints.budget_usd
        if budget is None:
            return None
        snap = self.ledger.snapshot(now=now)
        timings, scale = self.stop_timings, self.state.time_scale
        cap = forecast.cap_decision(
            spent_usd=snap.total_usd, burn_usd_per_hour=snap.burn_usd_per_hour, budget_usd=budget,
            # Past the shutdown timeout the provider kills the workers, and so does the cap (release_now).
            bound_hours=self.tuning.shutdown_timeout_s * scale / 3600,
            heartbeat_gap_hours=max(timings.heartbeat_gap_hours, HEARTBEAT_S * scale / 3600),
            stop_hours=timings.stop_hours, release_hours=timings.release_hours,
        )
        if cap.stop_now:
            self.events.emit("budget_cap", reason=cap.reason, spent_usd=round(snap.total_usd, 4),
                             reserve_usd=round(cap.reserve_usd, 4), measured=cap.measured)
        return cap

    def _write_meter(self, record: LaunchRecord, fc: forecast.Forecast | None, now: float) -> None:
        """The spend figures for the session's trackers (runtime.tracking.meter); never fails the run."""
        snap = self.ledger.snapshot(now=now)
        pool = record.pool
        try:
            write_meter(self.work_dir, Meter(
                t=now, spent_usd=snap.total_usd, burn_usd_per_hour=snap.burn_usd_per_hour,
                forecast_usd=fc.total_usd if fc else None, budget_usd=self.job.constraints.budget_usd,
                preemptions=self.state.preemptions, replans=self.state.replans, lost_steps=self.state.lost_steps,
                launch=record.launch_id, pool=record.label(), purchase=pool.purchase, cloud=pool.cloud,
                region=pool.region, instance_type=pool.instance_type))
        except OSError as exc:
            log.warning("could not write the trackers' meter: %s", exc)

    def _forecast(self) -> forecast.Forecast | None:
        now = self.clock.now()
        pool, nodes = self.state.pool, self.state.nodes
        if pool is None or nodes is None:
            return None
        left = max(self.job.workload.amount - work_done_units(self.job, self.store), 0.0)
        hours = left / self.state.rate(self.job, pool, nodes)
        # A term the plan will buy counts from the start, not from the first launch on it.
        unbought = max(0, nodes - self.ledger.term_nodes(pool.id, pool.purchase)) * pool.term_usd
        return forecast.forecast(self.ledger.total_usd(now), hours, pool.hourly_usd * nodes, at=now,
                                 overhead_usd=unbought, budget_usd=self.job.constraints.budget_usd,
                                 deadline_at=self.deadline_at)

    def _progress(self, record: LaunchRecord, fc: forecast.Forecast | None) -> Progress:
        return Progress(
            work_done=work_done_units(self.job, self.store), work_total=self.job.workload.amount,
            unit=self.job.workload.unit, units_per_hour=self.state.rate(self.job, record.pool, record.nodes),
            spent_usd=self.ledger.total_usd(self.clock.now()),
            forecast_usd=fc.total_usd if fc else None, budget_usd=self.job.constraints.budget_usd,
            eta=fc.expected_end if fc else None, deadline_at=self.deadline_at, now=self.clock.now(),
            pool=record.label(), launch=record.launch_id,
            state="training" if record.training_at is not None else "starting",
        )

    def _release(self, record: LaunchRecord, nodes: list[Node], *, reason: str) -> None:
        """Terminate the launch's nodes and stop billing them (idempotent)."""
        if record.released_at is not None:
            return
        self._measure_stop(record)
        began = self.clock.now()
        self.provider.terminate(nodes, grace_s=self.tuning.shutdown_timeout_s)
        self._give_back_held()
        end = self.clock.now()
        for node in nodes:
            self._stop_billing(record, node, end, reason)
        self.stop_timings.saw_release((end - began) / 3600)
        self._last_beat = None  # the next launch's first heartbeat gap starts at its own first beat
        record.released_at = end
        self.state.active = False
        if record.pool.purchase in ("spot", CLUSTER):
            # A spot pool's exposure (its interruption rate's) and a cluster's hours against its max_hours.
            # Not other purchases: an on-demand or held pool's id is a zoneless (Azure) spot pool's too.
            pool_id = record.pool.id
            self.state.pool_hours[pool_id] = self.state.pool_hours.get(pool_id, 0.0) + record.hours(end)
        self.save()

    def _measure_stop(self, record: LaunchRecord) -> None:
        """How long this launch's honoured stop request took, from the request to the release (billed time)."""
        # On the run's clock, not the file's mtime: an injected (simulated or manual) clock and the
        # file system's clock need not agree.
        asked, self._stop_asked = self._stop_asked, None
        status = self._status(record.launch_id)
        if asked is None or status is None or status.state != "preempted" or status.request_id != asked[0]:
            return
        self.stop_timings.saw_stop(max(0.0, self.clock.now() - asked[1]) / 3600)

    def _stop_billing(self, record: LaunchRecord, node: Node, end: float, reason: str) -> None:
        key = IntervalKey(record.launch_id, node.id)
        before = self.ledger.get(key)
        if before is None or not before.is_open:
            return  # closed by a controller that died before saving its state: counted once
        interval = self.ledger.close(key, end=end, reason=reason)
        self.events.emit("node_down", t=interval.end, node=node.id, launch=record.launch_id, reason=reason,
                         started=interval.start, hourly_usd=interval.hourly_usd)

    # -- after a launch -------------------------------------------------------------------
    def _classify(self, record: LaunchRecord, statuses, *, reclaimed: bool, budget_stop: bool,
                  notice: tuple[Node, Notice] | None, failure: str | None = None,
                  phase_end: bool = False) -> _LaunchEnd:
        status = self._status(record.launch_id)
        committed = self.store.latest_step() or 0
        permanent = False
        record.end_step = committed
        self.state.steps = committed
        if failure is not None:
            outcome, reason = contract.Outcome.FAILED, failure
        elif status is not None and status.state == "completed" and all(s.returncode == 0 for s in statuses):
            outcome, reason = contract.Outcome.COMPLETED, "training completed"
        elif status is not None and status.state == "preempted":
            outcome, reason = contract.Outcome.PREEMPTED, status.reason or "stopped"
        elif status is not None and status.state == "failed":
            outcome, reason = contract.Outcome.FAILED, status.reason or "a checkpoint save failed"
            permanent = True
        elif reclaimed or notice is not None:
            outcome, reason = contract.Outcome.PREEMPTED, "node reclaimed before the workers could checkpoint"
        else:
            codes = ", ".join(f"{s.node_id}: {s.returncode}" for s in statuses)
            outcome, reason = contract.Outcome.FAILED, f"workers exited ({codes}){record.log_cause()}"
        self._measure(record, status)
        ended = status is not None and status.state != "running"
        reached = status.step if ended and status is not None else self._estimate_step(record, status)
        lost = max(0, reached - committed)
        # A stop the phase's end asked for, honoured with a checkpoint: planned, not a preemption.
        phase_end = phase_end and outcome is contract.Outcome.PREEMPTED and status is not None \
            and status.state == "preempted" and notice is None and not reclaimed
        record.outcome = "phase_end" if phase_end else outcome.value
        record.reason = reason
        self.events.emit("launch_end", launch=record.launch_id, outcome=record.outcome, reason=reason,
                         committed_step=committed, reached_step=reached, lost_steps=lost,
                         nodes={st.node_id: st.state.value for st in statuses})
        if outcome is contract.Outcome.PREEMPTED and not budget_stop and not phase_end:
            self.state.lost_steps += lost
        self.save()
        kept = status is not None and status.state == "preempted"  # the stop's checkpoint committed
        return _LaunchEnd(outcome, reason, budget_stop=budget_stop, checkpoint_kept=kept, permanent=permanent,
                          phase_end=phase_end)

    def _estimate_step(self, record: LaunchRecord, status: contract.RunStatus | None) -> int:
        """Where a killed launch had got to: the step rank 0 last reported (``status``, still
        "running"), plus the measured speed over the time since.  Rank 0 reports again within its
        ``heartbeat_s`` while it trains, so once it has reported after its start the time since
        counts for a heartbeat and a step at most: a report that stopped coming means the workers
        had stopped advancing (a hung collective, a stalled store), not that they trained on."""
        if record.training_at is None or record.training_step is None or record.released_at is None:
            return record.start_step
        per_step = units_per_step(self.job, self.store)
        rate = self.state.rate(self.job, record.pool, record.nodes)  # units an hour
        since, step = record.training_at, record.training_step
        if status is not None and status.state == "running" and status.heartbeat_s \
                and self.clock.sim(status.updated_at) > since:
            since, step = self.clock.sim(status.updated_at), max(step, status.step)
            hours = min((record.released_at - since) / 3600,
                        status.heartbeat_s * self.clock.scale / 3600 + per_step / max(rate, 1e-12))
        else:  # killed before its first heartbeat (or workers that do not send one)
            hours = (record.released_at - since) / 3600
        reached = step + int(max(hours, 0.0) * rate / per_step)
        if self.job.workload.unit == "gpu_hours":  # no step count to bound it by
            return reached
        # A launch cannot get past the job's last step, however slow its release was.
        return min(reached, math.ceil(self.job.workload.amount / per_step))

    def _measure(self, record: LaunchRecord, status: contract.RunStatus | None) -> None:
        if record.training_at is None or record.training_step is None or status is None or status.state == "running":
            return
        steps = status.step - record.training_step
        hours = (self.clock.sim(status.updated_at) - record.training_at) / 3600
        if steps <= 0 or hours <= 0:
            return
        units = steps * units_per_step(self.job, self.store)
        rate = self.state.learn_throughput(record.pool, record.nodes, units, hours, steps)
        self.events.emit("throughput", gpu=record.pool.gpu, units_per_hour=round(rate, 4),
                         unit=self.job.workload.unit)

    def _after(self, end: _LaunchEnd) -> None:
        if end.outcome is contract.Outcome.COMPLETED:
            self.state.steps = self.store.latest_step() or self.state.steps
            self._finish("completed")
        elif end.budget_stop and end.checkpoint_kept:
            self._finish("budget_cap", "stopped after a checkpoint before the budget was exceeded")
        elif end.budget_stop:
            self._finish("budget_cap", "stopped before the budget was exceeded; the stop's checkpoint did not "
                                       f"commit in time, so the work since step {self.state.steps} is lost")
        elif end.outcome is contract.Outcome.PREEMPTED and self._training_finished():
            # Reclaimed after the final checkpoint committed (before its "completed" reached us):
            # the job is done, and a re-plan would find nothing to run, tick after tick.
            self.state.steps = self.store.latest_step() or self.state.steps
            self._finish("completed")
        elif end.phase_end:
            self._phase_ended(self.state.launches[-1])
        elif end.outcome is contract.Outcome.PREEMPTED:
            self._preempted(self.state.launches[-1])
        else:
            self.state.failures += 1
            limit = self.job.run.max_restarts
            launch = self.state.launches[-1].launch_id if self.state.launches and not end.no_capacity else None
            self.events.emit("failure", launch=launch, cause=end.reason, failures=self.state.failures,
                             max_restarts=limit)
            if end.permanent:
                self._finish("failed", end.reason)
            elif self.state.failures > limit:
                self._finish("failed", f"{end.reason} (failed {self.state.failures} times; [run].max_restarts "
                                       f"= {limit})")
            elif not end.no_capacity and self._same_startup_failure():
                self._finish("failed", f"{end.reason} (the same start-up failure twice: a retry would repeat it)")
            elif end.no_capacity:
                self._no_capacity()
            else:
                self.save()  # retry on the same pool

    def _same_startup_failure(self) -> bool:
        """True when the last two launches died before training of the same error (an import
        error, a missing file): not transient, so not worth another launch."""
        if len(self.state.launches) < 2:
            return False
        before, last = self.state.launches[-2].startup_error(), self.state.launches[-1].startup_error()
        return last is not None and last == before

    def _no_capacity(self) -> None:
        """The pool had no capacity: leave it out for the cool-down and plan elsewhere."""
        pool, nodes = self.state.pool, self.state.nodes
        assert pool is not None and nodes is not None
        until = self.clock.now() + self.tuning.cooldown_minutes * 60
        if pool.purchase == "spot":
            self.state.cooling[pool.id] = until  # the policy leaves it out too
        elif pool.purchase == CLUSTER:
            self.state.left_out[pool.id] = until
        elif pool.purchase != HELD:  # held nodes: the queue's allotment says when some are free
            self.state.refuse(pool, until)
        self.state.set_pool(None, None)
        self.save()
        self._choose_pool(preempted=None, reason=f"{pool.label(nodes)} has no capacity")

    def _phase_ended(self, record: LaunchRecord) -> None:
        """A cluster's phase or a held reservation ended at a checkpoint: leave the pool for good (a
        queue's reservation: until its allotment has nodes again) and plan the rest."""
        pool = record.pool
        if self.held is None or not self.held.covers(pool):
            self.state.left_out[pool.id] = None  # a queue's window may open again: its job_view says when
        hours = sum(launch.hours(launch.released_at) for launch in self.state.launches
                    if launch.pool.key == pool.key and launch.released_at is not None)
        self.events.emit("phase_end", launch=record.launch_id, pool=pool.id, step=record.end_step,
                         hours=round(hours, 4))
        self.state.set_pool(None, None)
        self.save()
        self._choose_pool(preempted=None, reason=f"{pool.id}: its phase ended at step {record.end_step}")

    def _preempted(self, record: LaunchRecord) -> None:
        now = self.clock.now()
        pool = record.pool
        prior = pool_interruption_rate(self.catalog, pool) or risk.OVER_20_RATE
        count = self.state.penalize(pool, prior_rate=prior, now=now, cooldown_s=self.tuning.cooldown_minutes * 60)
        pid = pool.id
        self.events.emit("preemption", launch=record.launch_id, pool=pid, count=count,
                         cooldown_until=self.state.cooling[pid], interruption_rate=round(self.state.rates[pid], 4),
                         prior_rate=round(prior, 4), step=record.end_step)
        self.state.set_pool(None, None)
        self.save()
        self._choose_pool(preempted=pid, reason=f"{pid} preempted at step {record.end_step}")

    def _recover(self) -> None:
        """After a controller crash: release the nodes it left, then carry on from the checkpoint."""
        record = self.state.current
        assert record is not None
        nodes = record.node_objects()
        status = self._status(record.launch_id)
        if status is not None and status.state == "running":
            # The workers may have outlived the controller: ask for a checkpoint first.
            self._request("stop", "controller restarted: checkpoint before the nodes are released")
            deadline = self.clock.monotonic() + self.tuning.shutdown_timeout_s
            while self.clock.monotonic() < deadline and self._worker_state(record.launch_id) == "running":
                self.clock.sleep(self.tuning.poll_s)
        stale = self.provider.release_stale(nodes)
        end = self.clock.now()
        for node in nodes:
            self._stop_billing(record, node, end, "controller restart")
        record.released_at = end
        self.state.active = False
        status = self._status(record.launch_id)
        self.events.emit("recovered", launch=record.launch_id, stale_nodes=stale,
                         worker_state=status.state if status else None)
        record.end_step = self.store.latest_step() or 0
        self.state.steps = record.end_step
        record.outcome, record.reason = "interrupted", "controller restart"
        self.save()
