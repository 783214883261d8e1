"""What the end of a launch means, and what the run does about it: the outcome (completed,
preempted, failed, its phase's end) from what the workers and the nodes said, the steps reached
and lost, the throughput measured; then the run's end, a retry on the same pool, a cool-down or a
re-plan. Also what a resumed run does first: release what its dead controller left."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.workload import workers
from pricing import risk
from pricing.pool import CLUSTER, HELD
from runtime.control import planning
from runtime.control.replan import REPLAN_TARGET, pool_interruption_rate
from runtime.control.run_state import LaunchRecord
from runtime.control.run_summary import units_per_step, work_done_units
from runtime.errors import CheckpointError
from runtime.providers.base import Node, NodeStatus
from runtime.providers.notices import Notice
from runtime.training import contract

if TYPE_CHECKING:
    from runtime.control.controller import Controller


@dataclass(slots=True)
class LaunchEnd:
    outcome: contract.Outcome
    reason: str
    budget_stop: bool = False
    no_capacity: bool = False
    checkpoint_kept: bool = True
    permanent: bool = False  # a failure a retry would repeat (the checkpoint storage refuses writes)
    phase_end: bool = False  # stopped at a checkpoint because the pool's phase ended (runtime.control.phases)
    too_slow: bool = False  # stopped at a checkpoint to move where the deadline is met (runtime.control.pace)
    held_start: bool = False  # stopped at a checkpoint to move onto held capacity (runtime.control.held_start)
    lost_steps: int = 0  # trained past the last committed checkpoint


def classify(controller: Controller, record: LaunchRecord, statuses: Sequence[NodeStatus], *, reclaimed: bool,
             budget_stop: bool, notice: tuple[Node, Notice] | None, failure: str | None = None,
             phase_end: bool = False, too_slow: bool = False, held_start: bool = False) -> LaunchEnd:
    """The launch's outcome, once its nodes are released; logged (``launch_end``) and kept in the run state."""
    state = controller.state
    status = controller.workers.status(record.launch_id)
    committed = controller.store.latest_step() or 0
    permanent = False
    record.end_step = committed
    state.steps = committed
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
    measure(controller, record, status)
    ended = status is not None and status.state != "running"
    reached = status.step if ended and status is not None else _estimate_step(controller, record, status)
    lost = max(0, reached - committed)
    # A stop the plan asked for (its phase ended, or the launch is too slow for the deadline), honoured
    # with a checkpoint: planned, not a preemption.
    planned = outcome is contract.Outcome.PREEMPTED and status is not None and status.state == "preempted" \
        and notice is None and not reclaimed
    phase_end, too_slow, held_start = phase_end and planned, too_slow and planned, held_start and planned
    record.outcome = ("phase_end" if phase_end else "too_slow" if too_slow else "held_start" if held_start
                      else outcome.value)
    record.reason = reason
    controller.events.emit("launch_end", launch=record.launch_id, outcome=record.outcome, reason=reason,
                           committed_step=committed, reached_step=reached, lost_steps=lost,
                           nodes={st.node_id: st.state.value for st in statuses})
    if outcome is contract.Outcome.PREEMPTED and not budget_stop and not phase_end and not too_slow \
            and not held_start:
        state.lost_steps += lost
    controller.save()
    kept = status is not None and status.state == "preempted"  # the stop's checkpoint committed
    return LaunchEnd(outcome, reason, budget_stop=budget_stop, checkpoint_kept=kept, permanent=permanent,
                     phase_end=phase_end, too_slow=too_slow, held_start=held_start, lost_steps=lost)


def _estimate_step(controller: Controller, record: LaunchRecord, status: contract.RunStatus | None) -> int:
    """Where a killed launch had got to: the step rank 0 last reported (``status``, still
    "running"), plus the measured speed over the time since.  Rank 0 reports again within its
    ``heartbeat_s`` while it trains, so once it has reported after its start the time since
    counts for a heartbeat and a step at most: a report that stopped coming means the workers
    had stopped advancing (a hung collective, a stalled store), not that they trained on."""
    if record.training_at is None or record.training_step is None or record.released_at is None:
        return record.start_step
    job, clock = controller.job, controller.clock
    per_step = units_per_step(job, controller.store)
    rate = controller.state.rate(job, record.pool, record.nodes)  # units an hour
    since, step = record.training_at, record.training_step
    if status is not None and status.state == "running" and status.heartbeat_s \
            and clock.sim(status.updated_at) > since:
        since, step = clock.sim(status.updated_at), max(step, status.step)
        hours = min((record.released_at - since) / 3600,
                    status.heartbeat_s * clock.scale / 3600 + per_step / max(rate, 1e-12))
    else:  # killed before its first heartbeat (or workers that do not send one)
        hours = (record.released_at - since) / 3600
    reached = step + int(max(hours, 0.0) * rate / per_step)
    if job.workload.unit == "gpu_hours":  # no step count to bound it by
        return reached
    # A launch cannot get past the job's last step, however slow its release was.
    return min(reached, math.ceil(job.workload.amount / per_step))


def measure(controller: Controller, record: LaunchRecord, status: contract.RunStatus | None) -> None:
    """Fold the ended launch's pace into what the run has measured (``state.measured``): from its workers'
    final report (``status``), else from their last one while it ran (``state.live``)."""
    live, controller.state.live = controller.state.live, None  # the launch's final measure replaces it
    job = controller.job
    if record.training_at is None or record.training_step is None:
        return
    if status is not None and status.state != "running":
        steps = status.step - record.training_step
        hours = (controller.clock.sim(status.updated_at) - record.training_at) / 3600
        units = steps * units_per_step(job, controller.store)
    elif live is not None and (live.gpu, live.gpus) == (record.pool.gpu,
                                                        workers(job, record.pool.gpus_per_node, record.nodes)):
        steps, hours, units = live.steps, live.hours, live.units  # killed mid-run: its workers' last report
    else:
        return
    if steps <= 0 or hours <= 0:
        return
    rate = controller.state.learn_throughput(record.pool, record.nodes, units, hours, steps)
    controller.events.emit("throughput", gpu=record.pool.gpu, units_per_hour=round(rate, 4),
                           unit=job.workload.unit)


def after(controller: Controller, end: LaunchEnd) -> None:
    """What the run does once a launch has ended: end, retry on the same pool, or move on."""
    state = controller.state
    if end.outcome is contract.Outcome.COMPLETED:
        state.steps = controller.store.latest_step() or state.steps
        controller.finish("completed")
    elif end.budget_stop and end.checkpoint_kept:
        controller.finish("budget_cap", "stopped after a checkpoint before the budget was exceeded")
    elif end.budget_stop and not end.lost_steps:
        controller.finish("budget_cap", "stopped before the budget was exceeded, before the launch trained past "
                                        f"step {state.steps}: nothing is lost")
    elif end.budget_stop:
        controller.finish("budget_cap", "stopped before the budget was exceeded; the stop's checkpoint did not "
                                         f"commit in time, so the work since step {state.steps} is lost")
    elif end.outcome is contract.Outcome.PREEMPTED and training_finished(controller):
        # Reclaimed after the final checkpoint committed (before its "completed" reached us):
        # the job is done, and a re-plan would find nothing to run, tick after tick.
        state.steps = controller.store.latest_step() or state.steps
        controller.finish("completed")
    elif end.phase_end:
        _phase_ended(controller, state.launches[-1])
    elif end.too_slow:
        record = state.launches[-1]
        _move(controller, f"{record.label()} too slow for the deadline at step {record.end_step}",
              "the launch is too slow for the deadline: re-plan now")
    elif end.held_start:
        record = state.launches[-1]
        _move(controller, f"{record.label()} left at step {record.end_step} for held capacity that started",
              "held capacity started: re-plan now")
    elif end.outcome is contract.Outcome.PREEMPTED:
        _preempted(controller, state.launches[-1])
    else:
        state.failures += 1
        failures = state.failures - state.failures_before_reopen  # what max_restarts allows for
        limit = controller.job.run.max_restarts
        launch = state.launches[-1].launch_id if state.launches and not end.no_capacity else None
        controller.events.emit("failure", launch=launch, cause=end.reason, failures=failures, max_restarts=limit)
        if end.permanent:
            controller.finish("failed", end.reason)
        elif failures > limit:
            controller.finish("failed", f"{end.reason} (failed {failures} times; [run].max_restarts = {limit})")
        elif not end.no_capacity and _same_startup_failure(controller):
            controller.finish("failed", f"{end.reason} (the same start-up failure twice: a retry would repeat it)")
        elif end.no_capacity:
            _no_capacity(controller)
        else:
            controller.save()  # retry on the same pool


def training_finished(controller: Controller) -> bool:
    """True when the training has already ended: its last launch said so, or its
    newest committed checkpoint is the final one or holds all the job's work."""
    launches, store, job = controller.state.launches, controller.store, controller.job
    last = launches[-1] if launches else None
    status = controller.workers.status(last.launch_id) if last is not None else None
    if status is not None and status.state == "completed":
        return True
    latest = store.latest_step()
    if latest is None:
        return False
    try:
        # An interval save that landed on the last step is the final one too: no "final" save follows it.
        return (store.read_manifest(latest).reason == "final"
                or work_done_units(job, store) >= job.workload.amount)
    except CheckpointError:
        return False


def _same_startup_failure(controller: Controller) -> bool:
    """True when the last two launches died before training of the same error (an import
    error, a missing file): not transient, so not worth another launch."""
    launches = controller.state.launches
    if len(launches) < 2:
        return False
    before, last = launches[-2].startup_error(), launches[-1].startup_error()
    return last is not None and last == before


def _no_capacity(controller: Controller) -> None:
    """The pool had no capacity: leave it out for the cool-down and plan elsewhere."""
    state = controller.state
    pool, nodes = state.pool, state.nodes
    assert pool is not None and nodes is not None
    until = controller.clock.now() + controller.tuning.cooldown_minutes * 60
    if pool.purchase == "spot":
        state.cooling[pool.id] = until  # the policy leaves it out too
    elif pool.purchase == CLUSTER:
        state.left_out[pool.id] = until
    elif pool.purchase != HELD:  # held nodes: the queue's allotment says when some are free
        state.refuse(pool, until)
    state.set_pool(None, None)
    controller.save()
    planning.choose_pool(controller, preempted=None, reason=f"{pool.label(nodes)} has no capacity")


def _phase_ended(controller: Controller, record: LaunchRecord) -> None:
    """A cluster's phase or a held reservation ended at a checkpoint: leave the pool for good (a
    queue's reservation: until its allotment has nodes again) and plan the rest."""
    state, pool = controller.state, record.pool
    if controller.held is None or not controller.held.covers(pool):
        state.left_out[pool.id] = None  # a queue's window may open again: its job_view says when
    hours = sum(launch.hours(launch.released_at) for launch in state.launches
                if launch.pool.key == pool.key and launch.released_at is not None)
    controller.events.emit("phase_end", launch=record.launch_id, pool=pool.id, step=record.end_step,
                           hours=round(hours, 4))
    state.set_pool(None, None)
    controller.save()
    planning.choose_pool(controller, preempted=None, reason=f"{pool.id}: its phase ended at step {record.end_step}")


def _move(controller: Controller, reason: str, decision: str) -> None:
    """Left at a checkpoint for a better plan (runtime.control.pace: its pace would miss the deadline;
    runtime.control.held_start: held capacity started): re-plan at once with what it measured. Not the
    switching policy's call: it judges a preemption's risk, and its answer (on-demand, say) could rule
    out the plan the move was for."""
    state = controller.state
    controller.events.emit("decision", policy=state.policy, target=REPLAN_TARGET, reason=decision, trigger=reason)
    state.set_pool(None, None)
    controller.save()
    planning.plan_next(controller, purchase=None, reason=reason)


def _preempted(controller: Controller, record: LaunchRecord) -> None:
    state = controller.state
    now = controller.clock.now()
    pool = record.pool
    prior = pool_interruption_rate(controller.catalog, pool) or risk.OVER_20_RATE
    count = state.penalize(pool, prior_rate=prior, now=now, cooldown_s=controller.tuning.cooldown_minutes * 60)
    pid = pool.id
    controller.events.emit("preemption", launch=record.launch_id, pool=pid, count=count,
                           cooldown_until=state.cooling[pid], interruption_rate=round(state.rates[pid], 4),
                           prior_rate=round(prior, 4), step=record.end_step)
    state.set_pool(None, None)
    controller.save()
    planning.choose_pool(controller, preempted=pid, reason=f"{pid} preempted at step {record.end_step}")


def recover(controller: Controller) -> None:
    """After a controller crash: release the nodes it left, then carry on from the checkpoint."""
    state, clock, workers = controller.state, controller.clock, controller.workers
    record = state.current
    assert record is not None
    nodes = record.node_objects()
    status = workers.status(record.launch_id)
    if status is not None and status.state == "running":
        # The workers may have outlived the controller: ask for a checkpoint first.
        workers.request("stop", "controller restarted: checkpoint before the nodes are released")
        deadline = clock.monotonic() + workers.stop_wait_s(record.launch_id, controller.tuning.shutdown_timeout_s)
        while clock.monotonic() < deadline and workers.state(record.launch_id) == "running":
            clock.sleep(controller.tuning.poll_s)
    stale = controller.provider.release_stale(nodes)
    controller.state.live = None  # what the lost controller saw of this launch, not measured to its end
    end = clock.now()
    for node in nodes:
        controller.spend.stop_billing(record, node, end, "controller restart")
    record.released_at = end
    state.active = False
    status = workers.status(record.launch_id)
    controller.events.emit("recovered", launch=record.launch_id, stale_nodes=stale,
                           worker_state=status.state if status else None)
    record.end_step = controller.store.latest_step() or 0
    state.steps = record.end_step
    record.outcome, record.reason = "interrupted", "controller restart"
    controller.save()
