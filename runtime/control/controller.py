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
within the rendezvous timeout (plus start-up grace) is a failure too. Nodes are always
released -- by pid, never by name -- before the controller moves on or exits.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.job import JobSpec
from planner.policy import ON_DEMAND, PolicyMemory, make_policy
from planner.report import plan_json
from pricing import risk
from pricing.catalog import Catalog
from pricing.sources import resolve_catalog
from runtime.accounting import alerts
from runtime.training import contract
from runtime.accounting import forecast
from runtime.control.chaos import ChaosClock, parse_chaos
from runtime.control.events import FILENAME as EVENTS_FILE
from runtime.control.events import EventLog
from runtime.accounting.ledger import IntervalKey, Ledger
from runtime.accounting.mailer import Mailer
from runtime.providers.notices import INTERRUPTION, Notice
from runtime.providers.base import LaunchSpec, Node, NodeState, PoolSpec, Provider
from runtime.providers.local import LocalProvider
from runtime.control.replan import (
    Measured,
    ReplanRequest,
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
from runtime.training.store import CheckpointStore

__all__ = [
    "Controller",
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
    hold_nodes: tuple[int, ...] = ()


@dataclass(slots=True)
class _LaunchEnd:
    outcome: contract.Outcome
    reason: str
    budget_stop: bool = False


class Controller:
    """Runs one job to the end (see the module docstring); build it with :meth:`open`."""

    def __init__(self, run_dir: Path, state: RunState, job: JobSpec, catalog: Catalog, *, tuning: Tuning,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 on_progress: Callable[[Progress], None] | None = None):
        self.run_dir = run_dir
        self.state = state
        self.job = job
        self.catalog = catalog
        self.tuning = tuning
        self.on_progress = on_progress
        self.clock = state.clock
        self.work_dir = run_dir / "work"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.events = EventLog(run_dir, clock=self.clock.now, listener=on_event)
        self.ledger = Ledger(run_dir)
        self.store = CheckpointStore(state.checkpoint_dir)
        self.policy = make_policy(state.policy)
        chaos = parse_chaos(state.chaos)
        self.chaos = ChaosClock(chaos.schedule(time_scale=state.time_scale, horizon_s=7 * 86400), state.chaos_fired)
        self.chaos_node = chaos.node
        self.provider: Provider = LocalProvider(
            run_dir / "provider", time_scale=state.time_scale, notice_protocol=chaos.notice,
            hold_nodes=tuning.hold_nodes,
        )
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

    @classmethod
    def open(cls, run_dir: str | Path, *, tuning: Tuning = Tuning(),
             on_event: Callable[[dict[str, Any]], None] | None = None,
             on_progress: Callable[[Progress], None] | None = None) -> Controller:
        """The controller of the run in ``run_dir`` (new, or to resume after a crash).

        Raises:
            RunStateError: no run there, or it has already ended.
        """
        run_dir = Path(run_dir)
        state = load_state(run_dir)
        if state.status != "running":
            raise RunStateError(f"{run_dir}: the run already ended ({state.status}); nothing to resume.")
        job = JobSpec.model_validate(state.job)
        first = not state.launches and not (run_dir / EVENTS_FILE).exists()
        catalog = resolve_catalog(state.catalog, use_cache=state.use_cache)
        controller = cls(run_dir, state, job, catalog, tuning=tuning, on_event=on_event, on_progress=on_progress)
        controller.events.emit("run_started" if first else "run_resumed", job=job.name, provider=state.provider,
                               time_scale=state.time_scale, policy=state.policy, chaos=state.chaos,
                               checkpoint_dir=state.checkpoint_dir)
        return controller

    # -- lifecycle ------------------------------------------------------------------------
    def save(self) -> None:
        save_state(self.run_dir, self.state)

    def run(self) -> dict[str, Any]:
        """Drive the run to an end state; returns the summary (also in ``summary.json``)."""
        try:
            if self.state.current is not None:
                self._recover()
            while self.state.status == "running":
                if self.state.pool is None:
                    self._choose_pool(preempted=None, reason="start")
                    continue
                self._after(self._launch_and_follow())
        except KeyboardInterrupt:
            self._finish("cancelled", "interrupted (Ctrl-C)")
            raise
        finally:
            summary = self._close()
        return summary

    def _close(self) -> dict[str, Any]:
        try:
            current = self.state.current
            if current is not None:
                self._release(current, current.node_objects(), reason=self.state.status)
        finally:
            self.provider.close()
        summary = build_summary(self.state, self.job, self.ledger, self.store)
        write_summary(self.run_dir, summary)
        self.outbox.flush(timeout_s=10)
        self.outbox.close()
        self.ledger.disconnect()
        self.events.close()
        return summary

    def _finish(self, status: str, cause: str | None = None) -> None:
        self.state.status = status
        self.state.cause = cause
        self.save()
        outcome = {"completed": alerts.RunOutcome.COMPLETED, "budget_cap": alerts.RunOutcome.BUDGET_CAP,
                   "cancelled": alerts.RunOutcome.CANCELLED}.get(status, alerts.RunOutcome.FAILED)
        self.events.emit("run_end", status=status, cause=cause, steps=self.state.steps)
        detail = f"step {self.state.steps}" + (f": {cause}" if cause else "")
        alerts.dispatch(self.alert_policy, self.ledger, self.outbox, self._forecast(),
                        [alerts.RunEnded(outcome, detail)], now=self.clock.now())

    # -- choosing where to run -------------------------------------------------------------
    def _choose_pool(self, *, preempted: str | None, reason: str) -> None:
        """Pick the next pool: the policy says spot or on-demand, the planner says which."""
        done = work_done_units(self.job, self.store)
        total = self.job.workload.amount
        previous = self.state.launches[-1].pool_spec if self.state.launches else None
        purchase: tuple[str, ...] | None = None
        while previous is not None:
            decision = decide(
                self.policy, job=self.job, catalog=self.catalog, elapsed_hours=self.clock.elapsed_hours(),
                work_done=done, work_total=total, rate_per_hour=self.state.rate(self.job, previous),
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
            time.sleep(self.clock.real_seconds(TICK_HOURS * 3600))  # wait one tick for spot to come back
        now = self.clock.now()
        cooling = self.state.cooling_at(now)
        result = self._replan(done, total, cooling, purchase)
        if result is None:
            return
        plan_view, pool, note = result
        self.state.pool = pool.to_dict()
        self.state.plan = plan_json(plan_view)
        old_total = self.expected_total_usd
        self.expected_total_usd = self.ledger.total_usd(now) + plan_view.expected_cost_usd
        if self.state.launches:
            self.state.replans += 1
            self.events.emit("replan", reason=reason + (f"; {note}" if note else ""),
                             previous=previous.label() if previous else None, pool=pool.label(),
                             pool_changed=previous is None or previous.pool_id != pool.pool_id
                             or previous.purchase != pool.purchase,
                             expected_cost_usd=round(plan_view.expected_cost_usd, 4),
                             expected_hours=round(plan_view.expected_hours, 4), work_left=total - done)
        else:
            self.events.emit("plan", pool=pool.label(), expected_cost_usd=round(plan_view.expected_cost_usd, 4),
                             expected_hours=round(plan_view.expected_hours, 4), note=note)
        self.save()
        replanned = []
        if old_total is not None:
            replanned.append(alerts.Replanned(str(self.state.replans), old_total, self.expected_total_usd, reason))
        alerts.dispatch(self.alert_policy, self.ledger, self.outbox, self._forecast(), replanned, now=now)

    def _replan(self, done: float, total: float, cooling: frozenset[str], purchase: tuple[str, ...] | None):
        note = ""
        if not self.state.launches:
            result = first_plan(self.job, self.catalog)
        else:
            now = self.clock.now()
            budget = self.job.constraints.budget_usd
            m = self.state.measured
            result, note = replan_or_late(ReplanRequest(
                job=self.job, catalog=self.catalog, work_left=total - done,
                budget_left_usd=budget - self.ledger.total_usd(now) if budget is not None else None,
                hours_left=(self.deadline_at - now) / 3600 if self.deadline_at is not None else None,
                restart_hours=self.job.overheads.restart_minutes / 60,
                measured=Measured(m["gpu"], m["gpus"], m["units"] / m["hours"]) if m else None,
                cooling=cooling, rates=dict(self.state.rates), purchase=purchase,
            ))
        if result.plan is None:
            self.events.emit("replan" if self.state.launches else "plan", reason=result.reason, pool=None,
                             pool_changed=False)
            self._finish("infeasible", result.reason)
            return None
        return result.plan, result.pool, note

    # -- launching ------------------------------------------------------------------------
    def _launch_and_follow(self) -> _LaunchEnd:
        pool = PoolSpec.from_dict(self.state.pool)
        launch_id = f"l-{len(self.state.launches) + 1}"
        start_step = self.store.latest_step() or 0
        nodes = self.provider.provision(pool, launch_id=launch_id)
        record = LaunchRecord(
            launch_id=launch_id, pool=pool.to_dict(), world_size=pool.nodes * self.job.run.nproc_per_node,
            start_step=start_step, provisioned_at=self.clock.sim(nodes[0].provisioned_at),
            nodes=[n.to_dict() for n in nodes],
        )
        self.state.launches.append(record)
        self.state.active = True
        self.save()
        term_usd = self.state.pool.get("term_usd") or 0.0  # per node, once; a held or hourly pool has none
        if term_usd > 0:
            self.ledger.buy_term(pool.pool_id, pool.purchase, term_usd=term_usd, nodes=pool.nodes,
                                 launch_id=launch_id, at=record.provisioned_at)
        for node in nodes:
            start = self.clock.sim(node.provisioned_at)
            self.ledger.open_interval(IntervalKey(launch_id, node.id), pool=pool.pool_id, purchase=pool.purchase,
                                      hourly_usd=pool.hourly_usd, start=start, reason="launch")
            self.events.emit("node_up", t=start, node=node.id, pool=pool.pool_id, purchase=pool.purchase,
                             hourly_usd=pool.hourly_usd, launch=launch_id)
        self.provider.wait_ready(nodes, timeout_s=self.tuning.rdzv_timeout_s)
        # A request the last launch never acted on must not stop this one.
        (self.work_dir / contract.CONTROL_FILE).unlink(missing_ok=True)
        rdzv_id = uuid.uuid4().hex
        nodes = self.provider.run(nodes, self._launch_spec(launch_id, rdzv_id, pool))
        record.nodes = [n.to_dict() for n in nodes]
        self.save()
        self.events.emit("launch", launch=launch_id, pool=pool.label(), world_size=record.world_size,
                         rdzv_id=rdzv_id, start_step=start_step)
        return self._follow(record, nodes)

    def _launch_spec(self, launch_id: str, rdzv_id: str, pool: PoolSpec) -> LaunchSpec:
        scale = self.state.time_scale
        mtbf = None
        if pool.purchase == "spot":
            rate = self.state.rates.get(pool.pool_id) or pool_interruption_rate(self.catalog, pool) or risk.OVER_20_RATE
            mtbf = 3600.0 / rate / scale
        terms = contract.LaunchContract(
            checkpoint_dir=self.state.checkpoint_dir, run_dir=str(self.work_dir), attempt=launch_id, mtbf_s=mtbf,
            restart_s=self.job.overheads.restart_minutes * 60 / scale, pg_timeout_s=60.0,
        )
        return LaunchSpec(
            launch_id=launch_id, entrypoint=tuple(self.job.run.entrypoint), nproc_per_node=self.job.run.nproc_per_node,
            rdzv_id=rdzv_id, env=terms.to_env(), cwd=self.state.cwd, log_dir=self.run_dir / "launches" / launch_id,
            rdzv_timeout_s=self.tuning.rdzv_timeout_s, shutdown_timeout_s=self.tuning.shutdown_timeout_s,
        )

    # -- following a launch ---------------------------------------------------------------
    def _follow(self, record: LaunchRecord, nodes: list[Node]) -> _LaunchEnd:
        pool = record.pool_spec
        started = time.monotonic()
        last_beat = 0.0
        stop_sent: str | None = None
        reported: set[tuple[str, str]] = set()
        notice: tuple[Node, Notice] | None = None
        ending_since: float | None = None
        budget_stop = reclaiming = False
        while True:
            statuses = self.provider.poll(nodes)
            if record.training_at is None:
                status = self._status(record.launch_id)
                if status is not None and status.state == "running":
                    record.training_at = self.clock.sim(status.updated_at)
                    record.training_step = status.step
                    self.events.emit("training", launch=record.launch_id, step=status.step,
                                     world_size=status.world_size)
                    self.save()
            if record.training_at is not None and pool.purchase == "spot" and not reclaiming:
                reclaiming = self._inject_chaos(nodes)
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
            now = time.monotonic()
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
            time.sleep(self.tuning.poll_s)
        reclaimed = any(s.state is NodeState.RECLAIMED for s in statuses)
        if notice is not None and not reclaimed:
            node, seen = notice
            self.provider.acknowledge(node, seen)  # Azure: evict now, the checkpoint is safe
        self._release(record, nodes, reason="preempted" if notice or reclaimed else "launch ended")
        return self._classify(record, statuses, reclaimed=reclaimed, budget_stop=budget_stop, notice=notice)

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
        self.events.emit("checkpoint_request", action=action, reason=reason, request=request.id)
        return request.id

    def _inject_chaos(self, nodes: list[Node]) -> bool:
        """Reclaim a node if a chaos preemption is due; True when one was."""
        elapsed = time.time() - self.state.origin
        due = self.chaos.next_due(elapsed)
        if due is None:
            return False
        index = self.chaos_node if self.chaos_node is not None else len(nodes) - 1
        victim = nodes[min(index, len(nodes) - 1)]
        reclaim_at = self.provider.preempt(victim)
        self.state.chaos_fired = self.chaos.fired
        self.events.emit("chaos", node=victim.id, scheduled_s=round(due, 3), elapsed_s=round(elapsed, 3),
                         reclaim_at=self.clock.sim(reclaim_at))
        self.save()
        return True

    def _heartbeat(self, record: LaunchRecord, nodes: list[Node]) -> forecast.CapDecision | None:
        """Bill the nodes up to now, send due alerts, refresh the display; the cap's decision (None: no budget)."""
        beat = time.monotonic()
        if self._last_beat is not None:
            self.stop_timings.saw_gap((beat - self._last_beat) * self.state.time_scale / 3600)
        self._last_beat = beat
        now = self.clock.now()
        for node in nodes:
            self.ledger.extend(IntervalKey(record.launch_id, node.id), until=now)
        fc = self._forecast()
        alerts.dispatch(self.alert_policy, self.ledger, self.outbox, fc, now=now)
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

    def _forecast(self) -> forecast.Forecast | None:
        now = self.clock.now()
        if self.state.pool is None:
            return None
        pool = PoolSpec.from_dict(self.state.pool)
        left = max(self.job.workload.amount - work_done_units(self.job, self.store), 0.0)
        hours = left / self.state.rate(self.job, pool)
        return forecast.forecast(self.ledger.total_usd(now), hours, pool.hourly_usd * pool.nodes, at=now,
                                 budget_usd=self.job.constraints.budget_usd, deadline_at=self.deadline_at)

    def _progress(self, record: LaunchRecord, fc: forecast.Forecast | None) -> Progress:
        pool = record.pool_spec
        return Progress(
            work_done=work_done_units(self.job, self.store), work_total=self.job.workload.amount,
            unit=self.job.workload.unit, units_per_hour=self.state.rate(self.job, pool),
            spent_usd=self.ledger.total_usd(self.clock.now()),
            forecast_usd=fc.total_usd if fc else None, budget_usd=self.job.constraints.budget_usd,
            eta=fc.expected_end if fc else None, deadline_at=self.deadline_at, now=self.clock.now(),
            pool=pool.label(), launch=record.launch_id,
            state="training" if record.training_at is not None else "starting",
        )

    def _release(self, record: LaunchRecord, nodes: list[Node], *, reason: str) -> None:
        """Terminate the launch's nodes and stop billing them (idempotent)."""
        if record.released_at is not None:
            return
        self._measure_stop(record)
        began = self.clock.now()
        self.provider.terminate(nodes, grace_s=self.tuning.shutdown_timeout_s)
        end = self.clock.now()
        for node in nodes:
            self._stop_billing(record, node, end, reason)
        self.stop_timings.saw_release((end - began) / 3600)
        self._last_beat = None  # the next launch's first heartbeat gap starts at its own first beat
        record.released_at = end
        self.state.active = False
        pool_id = record.pool_spec.pool_id
        self.state.pool_hours[pool_id] = self.state.pool_hours.get(pool_id, 0.0) + (end - record.provisioned_at) / 3600
        self.save()

    def _measure_stop(self, record: LaunchRecord) -> None:
        """How long this launch's honoured stop request took, from the request to the release (billed time)."""
        control = self.work_dir / contract.CONTROL_FILE
        status = self._status(record.launch_id)
        try:
            request = contract.read_request(control)
            asked = control.stat().st_mtime
        except (contract.ContractError, OSError):
            return
        if (request is None or request.action != "stop" or status is None or status.state != "preempted"
                or status.request_id != request.id):
            return
        self.stop_timings.saw_stop(max(0.0, self.clock.now() - self.clock.sim(asked)) / 3600)

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
                  notice: tuple[Node, Notice] | None, failure: str | None = None) -> _LaunchEnd:
        status = self._status(record.launch_id)
        committed = self.store.latest_step() or 0
        record.end_step = committed
        self.state.steps = committed
        if failure is not None:
            outcome, reason = contract.Outcome.FAILED, failure
        elif status is not None and status.state == "completed" and all(s.returncode == 0 for s in statuses):
            outcome, reason = contract.Outcome.COMPLETED, "training completed"
        elif status is not None and status.state == "preempted":
            outcome, reason = contract.Outcome.PREEMPTED, status.reason or "stopped"
        elif reclaimed or notice is not None:
            outcome, reason = contract.Outcome.PREEMPTED, "node reclaimed before the workers could checkpoint"
        else:
            codes = ", ".join(f"{s.node_id}: {s.returncode}" for s in statuses)
            outcome, reason = contract.Outcome.FAILED, f"workers exited ({codes}){record.log_cause()}"
        self._measure(record, status)
        reached = status.step if status is not None and status.state != "running" else self._estimate_step(record)
        lost = max(0, reached - committed)
        record.outcome = outcome.value
        record.reason = reason
        self.events.emit("launch_end", launch=record.launch_id, outcome=outcome.value, reason=reason,
                         committed_step=committed, reached_step=reached, lost_steps=lost,
                         nodes={st.node_id: st.state.value for st in statuses})
        if outcome is contract.Outcome.PREEMPTED and not budget_stop:
            self.state.lost_steps += lost
        self.save()
        return _LaunchEnd(outcome, reason, budget_stop=budget_stop)

    def _estimate_step(self, record: LaunchRecord) -> int:
        """Where a killed launch had got to: training time times the measured speed."""
        if record.training_at is None or record.training_step is None or record.released_at is None:
            return record.start_step
        hours = (record.released_at - record.training_at) / 3600
        per_step = units_per_step(self.job, self.store)
        return record.training_step + int(hours * self.state.rate(self.job, record.pool_spec) / per_step)

    def _measure(self, record: LaunchRecord, status: contract.RunStatus | None) -> None:
        if record.training_at is None or record.training_step is None or status is None or status.state == "running":
            return
        steps = status.step - record.training_step
        hours = (self.clock.sim(status.updated_at) - record.training_at) / 3600
        if steps <= 0 or hours <= 0:
            return
        units = steps * units_per_step(self.job, self.store)
        rate = self.state.learn_throughput(record.pool_spec, units, hours)
        self.events.emit("throughput", gpu=record.pool_spec.gpu, units_per_hour=round(rate, 4),
                         unit=self.job.workload.unit)

    def _after(self, end: _LaunchEnd) -> None:
        record = self.state.launches[-1]
        pool = record.pool_spec
        if end.outcome is contract.Outcome.COMPLETED:
            self.state.steps = self.store.latest_step() or self.state.steps
            self._finish("completed")
        elif end.budget_stop:
            self._finish("budget_cap", "stopped after a checkpoint before the budget was exceeded")
        elif end.outcome is contract.Outcome.PREEMPTED:
            self._preempted(pool, record)
        else:
            self.state.failures += 1
            limit = self.job.run.max_restarts
            self.events.emit("failure", launch=record.launch_id, cause=end.reason, failures=self.state.failures,
                             max_restarts=limit)
            if self.state.failures > limit:
                self._finish("failed", f"{end.reason} (failed {self.state.failures} times; [run].max_restarts "
                                       f"= {limit})")
            else:
                self.save()  # retry on the same pool

    def _preempted(self, pool: PoolSpec, record: LaunchRecord) -> None:
        now = self.clock.now()
        prior = pool_interruption_rate(self.catalog, pool) or risk.OVER_20_RATE
        count = self.state.penalize(pool, prior_rate=prior, now=now, cooldown_s=self.tuning.cooldown_minutes * 60)
        pid = pool.pool_id
        self.events.emit("preemption", launch=record.launch_id, pool=pid, count=count,
                         cooldown_until=self.state.cooling[pid], interruption_rate=round(self.state.rates[pid], 4),
                         prior_rate=round(prior, 4), step=record.end_step)
        self.state.pool = None
        self.save()
        self._choose_pool(preempted=pid, reason=f"{pid} preempted at step {record.end_step}")

    def _recover(self) -> None:
        """After a controller crash: release the nodes it left, then carry on from the checkpoint."""
        record = self.state.current
        nodes = record.node_objects()
        status = self._status(record.launch_id)
        if status is not None and status.state == "running":
            # The workers may have outlived the controller: ask for a checkpoint first.
            self._request("stop", "controller restarted: checkpoint before the nodes are released")
            deadline = time.monotonic() + self.tuning.shutdown_timeout_s
            while time.monotonic() < deadline and self._worker_state(record.launch_id) == "running":
                time.sleep(self.tuning.poll_s)
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
        if status is not None and status.state == "completed":
            self._finish("completed")
