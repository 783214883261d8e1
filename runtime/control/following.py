"""Following one launch to its end: the poll loop (training started, notices, the phase's end, nodes
that went down, a start-up that never trains), its heartbeat (billing, alerts, the budget cap) and
the release of its nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.workload import workers
from pricing.pool import CLUSTER
from runtime.accounting import alerts, forecast
from runtime.control import held_start, pace, planning
from runtime.control.launch_end import LaunchEnd, classify
from runtime.control.run_state import LaunchRecord, Throughput
from runtime.control.run_summary import units_per_step
from runtime.providers.base import Node, NodeState
from runtime.providers.notices import INTERRUPTION, Notice

if TYPE_CHECKING:
    from runtime.control.controller import Controller

HEARTBEAT_S = 1.0


def follow(controller: Controller, record: LaunchRecord, nodes: list[Node]) -> LaunchEnd:
    """Poll the launch until it ends, release its nodes and say how it ended."""
    provider, clock, events, workers, tuning = (controller.provider, controller.clock, controller.events,
                                                controller.workers, controller.tuning)
    started = clock.monotonic()
    last_beat = float("-inf")
    stop_sent: str | None = None
    reported: set[tuple[str, str]] = set()
    notice: tuple[Node, Notice] | None = None
    ending_since: float | None = None
    budget_stop = False
    phase_end_at = planning.phase_end_at(controller, record)
    phase_end = False
    pace_watch = pace.PaceWatch(controller, record)
    too_slow = False
    held_watch = held_start.HeldStartWatch(controller, record)
    moved = False
    while True:
        statuses = provider.poll(nodes)
        if record.training_at is None:
            status = workers.status(record.launch_id)
            if status is not None and status.state == "running":
                clock.resume()
                record.training_at = clock.sim(status.updated_at)
                record.training_step = status.step
                events.emit("training", launch=record.launch_id, step=status.step, world_size=status.world_size)
                controller.save()
                provider.training_started(nodes)
                if (unmatched := _steps_unmatched(controller, status.max_steps)) is not None:
                    events.emit("steps_unmatched", launch=record.launch_id, message=unmatched)
                    release(controller, record, nodes, reason="steps unmatched")
                    end = classify(controller, record, statuses, reclaimed=False, budget_stop=False, notice=None,
                                   failure=unmatched)
                    end.permanent = True  # every launch of this job would train to the same step
                    return end
        for node in nodes:
            seen = provider.interruption_notice(node)
            if seen is None or (node.id, seen.kind) in reported:
                continue
            reported.add((node.id, seen.kind))
            events.emit("notice", node=node.id, cloud=seen.cloud, kind=seen.kind, action=seen.action,
                        detail=seen.detail)
            if seen.kind == INTERRUPTION and stop_sent is None:
                notice = (node, seen)
                stop_sent = workers.request("stop", f"{seen.cloud} interruption notice for {node.id}")
            elif seen.kind != INTERRUPTION and stop_sent is None:
                workers.request("checkpoint", f"{seen.cloud} {seen.kind} for {node.id}")
        now = clock.monotonic()
        if now - last_beat >= HEARTBEAT_S:
            last_beat = now
            cap = _heartbeat(controller, record, nodes)
            if cap is not None and cap.stop_now and stop_sent is None:
                budget_stop = True
                events.emit("budget_cap", reason=cap.reason, spent_usd=round(cap.spent_usd, 4),
                            reserve_usd=round(cap.reserve_usd, 4), measured=cap.measured)
                stop_sent = workers.request("stop", "budget cap: checkpoint and stop before overspending")
            elif cap is not None and budget_stop and cap.release_now:
                events.emit("budget_release", reason="the checkpoint did not commit in time: release "
                            "without it to stay under the budget", spent_usd=round(cap.spent_usd, 4))
                break
        if stop_sent is None and record.training_at is not None \
                and (why := planning.phase_over(controller, record, phase_end_at)):
            phase_end = True
            stop_sent = workers.request("stop", f"{record.pool.id}: its phase of the plan ends ({why}): "
                                                "checkpoint and move on")
        elif stop_sent is None and (slow := pace_watch.too_slow()) is not None:
            too_slow = True
            events.emit("too_slow", launch=record.launch_id, pool=record.label(), reason=slow.reason,
                        units_per_hour=round(slow.units_per_hour, 4), hours_needed=round(slow.hours_needed, 4),
                        hours_left=round(slow.hours_left, 4), move_to=slow.move_to)
            stop_sent = workers.request("stop", f"too slow for the deadline: checkpoint and move to {slow.move_to}")
        elif stop_sent is None and (move := held_watch.started()) is not None:
            moved = True
            events.emit("held_start", launch=record.launch_id, pool=record.label(), reason=move.reason,
                        move_to=move.move_to)
            stop_sent = workers.request("stop", f"{move.reason}: checkpoint and move")
        if stop_sent is not None and workers.state(record.launch_id) == "preempted":
            break  # the checkpoint is committed: release now rather than pay for the workers' teardown
        ended = any(st.state in (NodeState.EXITED, NodeState.RECLAIMED) for st in statuses)
        running = any(st.state is NodeState.RUNNING for st in statuses)
        if ended and ending_since is None:
            ending_since = now
        if ended and (not running or now - ending_since > tuning.shutdown_timeout_s):
            break  # a node that ended takes the job down with it: the others get a grace period
        if record.training_at is None and now - started > (limit := _startup_limit_s(controller)):
            release(controller, record, nodes, reason="startup timeout")
            return classify(controller, record, statuses, reclaimed=False, budget_stop=False, notice=None,
                            failure=f"the launch did not start training within {limit:.0f}s "
                                    "(a stuck rendezvous or a hung start-up); if the job only needs longer to "
                                    "start (a download, a large checkpoint to restore), raise [overheads] "
                                    "restart_minutes")
        clock.sleep(tuning.poll_s)
    reclaimed = any(s.state is NodeState.RECLAIMED for s in statuses)
    if notice is not None and not reclaimed:
        node, seen = notice
        provider.acknowledge(node, seen)  # Azure: evict now, the checkpoint is safe
    release(controller, record, nodes, reason="preempted" if notice or reclaimed else
            "phase end" if phase_end else "too slow" if too_slow else "held start" if moved else "launch ended")
    return classify(controller, record, statuses, reclaimed=reclaimed, budget_stop=budget_stop, notice=notice,
                    phase_end=phase_end, too_slow=too_slow, held_start=moved)


def _steps_unmatched(controller: Controller, max_steps: int | None) -> str | None:
    """Why the script and the job disagree on the steps to train, or None: the plan, the budget and the
    deadline count the job's, and a script that trains on would spend past them (to the budget cap)
    while one that stops short would end "completed" with work left."""
    job = controller.job
    if max_steps is None or job.workload.unit != "steps" or max_steps == job.workload.amount:
        return None
    return (f"the training script trains to step {max_steps} (its max_steps), but [workload] steps = "
            f"{job.workload.amount:g} in {controller.state.job_path}: the plan, the budget and the deadline count "
            f"{job.workload.amount:g}. To fix: make the two agree (the entrypoint's arguments or [workload] steps) "
            "and start the run again")


def _startup_limit_s(controller: Controller) -> float:
    """Real seconds a launch may take from its workers' start to its first training step.

    The rendezvous timeout, then the longer of the controller's start-up grace and the job's
    ``[overheads] restart_minutes``: the quote already counts that long for loading and warming
    up after every restart, so a launch is not given up on as hung sooner (simulated minutes, so
    divided by the time scale)."""
    restart_s = controller.job.overheads.restart_minutes * 60 / controller.state.time_scale
    return controller.tuning.rdzv_timeout_s + max(controller.tuning.startup_grace_s, restart_s)


def _heartbeat(controller: Controller, record: LaunchRecord, nodes: list[Node]) -> forecast.CapDecision | None:
    """Bill the nodes up to now, send due alerts, refresh the display; the cap's decision (None: no budget)."""
    clock, spend, ledger, job = controller.clock, controller.spend, controller.ledger, controller.job
    beat = clock.monotonic()
    if controller.last_beat is not None:
        controller.stop_timings.saw_gap((beat - controller.last_beat) * controller.state.time_scale / 3600)
    controller.last_beat = beat
    now = clock.now()
    _measure_pace(controller, record)
    spend.bill_until(record, nodes, now)
    fc = spend.forecast()
    alerts.dispatch(controller.alert_policy, ledger, controller.outbox, fc, now=now)
    if job.tracking.enabled:
        spend.write_meter(controller.work_dir, record, fc, now)
    if controller.on_progress is not None:
        controller.on_progress(spend.progress(record, fc))
    budget = job.constraints.budget_usd
    if budget is None:
        return None
    snap = ledger.snapshot(now=now)
    timings = controller.stop_timings
    if (save_write_s := controller.workers.save_write_s(record.launch_id)) is not None:
        timings.saw_save_write(save_write_s * controller.state.time_scale / 3600)
    return timings.cap(spent_usd=snap.total_usd, burn_usd_per_hour=snap.burn_usd_per_hour, budget_usd=budget)


def _measure_pace(controller: Controller, record: LaunchRecord) -> None:
    """Keep the running launch's pace so far in the run's state (``live``), from its workers' latest
    report: forecasts, the alerts on them and `planner status` go by it before the launch ends."""
    status = controller.workers.status(record.launch_id)
    if status is None or status.state != "running" or record.training_at is None or record.training_step is None:
        return
    steps = status.step - record.training_step
    hours = (controller.clock.sim(status.updated_at) - record.training_at) / 3600
    live = controller.state.live
    if steps <= 0 or hours <= 0 or (live is not None and (live.steps, live.hours) == (steps, hours)):
        return
    units = steps * units_per_step(controller.job, controller.store)
    controller.state.live = Throughput(gpu=record.pool.gpu, gpus=workers(controller.job, record.pool.gpus_per_node,
                                                                         record.nodes),
                                       units=units, hours=hours, steps=steps)
    controller.save()


def release(controller: Controller, record: LaunchRecord, nodes: list[Node], *, reason: str) -> None:
    """Terminate the launch's nodes and stop billing them (idempotent)."""
    if record.released_at is not None:
        return
    state, clock = controller.state, controller.clock
    # What a stop really takes on this machine, for the budget cap (see _heartbeat).
    stop_hours = controller.workers.stop_hours(record.launch_id)
    if stop_hours is not None:
        controller.stop_timings.saw_stop(stop_hours)
    began = clock.now()
    controller.provider.terminate(nodes, grace_s=controller.tuning.shutdown_timeout_s)
    controller.held_lease.give_back()
    end = clock.now()
    for node in nodes:
        controller.spend.stop_billing(record, node, end, reason)
    controller.stop_timings.saw_release((end - began) / 3600)
    controller.last_beat = None  # the next launch's first heartbeat gap starts at its own first beat
    record.released_at = end
    state.active = False
    if record.pool.purchase in ("spot", CLUSTER):
        # A spot pool's exposure (its interruption rate's) and a cluster's hours against its max_hours.
        # Not other purchases: an on-demand or held pool's id is a zoneless (Azure) spot pool's too.
        pool_id = record.pool.id
        state.pool_hours[pool_id] = state.pool_hours.get(pool_id, 0.0) + record.hours(end)
    controller.save()
