"""Where a run goes next: the switching policy's decision and the re-plan whenever a launch ends
(:mod:`runtime.control.replan`), the late plan when only the deadline stands in the way, and when
the plan itself ends the launch that runs (a cluster's phase, a held reservation, the queue's held
nodes another job needs)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from planner.job import JobSpec, when
from planner.policy import ON_DEMAND, PolicyMemory
from planner.report import plan_json
from runtime.accounting import alerts
from runtime.control import phases
from runtime.control.replan import (
    Measured,
    ReplanRequest,
    ReplanResult,
    decide,
    first_plan,
    replan,
    replan_or_late,
    within_cap,
)
from runtime.control.run_state import LaunchRecord, Throughput
from runtime.control.run_summary import work_done_units

if TYPE_CHECKING:
    from runtime.control.controller import Controller

TICK_HOURS = 1 / 60


def choose_pool(controller: Controller, *, preempted: str | None, reason: str) -> None:
    """Pick the next pool: the policy says spot or on-demand, the planner says which."""
    state, job, clock, events = controller.state, controller.job, controller.clock, controller.events
    done = work_done_units(job, controller.store)
    total = job.workload.amount
    last = state.launches[-1] if state.launches else None
    purchase: tuple[str, ...] | None = None
    while last is not None:
        decision = decide(
            controller.policy, job=_plannable_job(controller), catalog=controller.catalog,
            elapsed_hours=clock.elapsed_hours(), work_done=done, work_total=total,
            rate_per_hour=state.rate(job, last.pool, last.nodes),
            cooling=state.cooling_at(clock.now()), preempted=preempted,
            memory=PolicyMemory.from_dict(state.policy_memory), tick_hours=TICK_HOURS,
        )
        state.policy_memory = decision.memory.to_dict()
        events.emit("decision", policy=state.policy, target=decision.target, reason=decision.reason,
                    trigger=reason)
        if decision.target is not None:
            if decision.target == ON_DEMAND and "on_demand" in job.purchase.allow:
                purchase = ("on_demand",)
            break
        clock.sleep(clock.real_seconds(TICK_HOURS * 3600))  # wait one tick for spot to come back
    plan_next(controller, purchase=purchase, reason=reason)


def plan_next(controller: Controller, *, purchase: tuple[str, ...] | None, reason: str) -> None:
    """Re-plan from where the run stands (``purchase``: only pools bought that way, if any fits) and
    make the plan's first phase the next launch's pool; the run ends ``infeasible`` when nothing fits."""
    state, job, clock, events = controller.state, controller.job, controller.clock, controller.events
    done = work_done_units(job, controller.store)
    total = job.workload.amount
    last = state.launches[-1] if state.launches else None
    now = clock.now()
    result = _replan(controller, done, total, purchase)
    if result.plan is None and purchase is not None:
        # Every pool bought that way refused a launch, or none fits: spot or a reservation still may.
        result = _replan(controller, done, total, None)
    if result.plan is None or result.pool is None or result.nodes is None:
        events.emit("replan" if state.launches else "plan", reason=result.reason, pool=None, pool_changed=False)
        controller.finish("infeasible", result.reason)
        return
    pool, nodes, plan_view = result.pool, result.nodes, result.plan
    if result.late and _deadline_missed(controller, result):
        return
    state.set_pool(pool, nodes)
    state.plan = plan_json(plan_view)
    old_total = controller.expected_total_usd
    controller.expected_total_usd = controller.ledger.total_usd(now) + plan_view.expected_cost_usd
    if state.launches:
        state.replans += 1
        events.emit("replan", reason=reason + (f"; {result.note}" if result.note else ""),
                    previous=last.label() if last else None, pool=pool.label(nodes),
                    pool_changed=last is None or last.pool.key != pool.key,
                    expected_cost_usd=round(plan_view.expected_cost_usd, 4),
                    expected_hours=round(plan_view.expected_hours, 4), work_left=total - done)
    else:
        events.emit("plan", pool=pool.label(nodes), expected_cost_usd=round(plan_view.expected_cost_usd, 4),
                    expected_hours=round(plan_view.expected_hours, 4), note=result.note)
    controller.save()
    replanned = []
    if old_total is not None:
        replanned.append(alerts.Replanned(str(state.replans), old_total, controller.expected_total_usd, reason))
    alerts.dispatch(controller.alert_policy, controller.ledger, controller.outbox, controller.spend.forecast(),
                    replanned, now=now)


def _replan(controller: Controller, done: float, total: float, purchase: tuple[str, ...] | None) -> ReplanResult:
    state, job = controller.state, controller.job
    now = controller.clock.now()
    hours_left = (controller.deadline_at - now) / 3600 if controller.deadline_at is not None else None
    if not state.launches and not state.failures and (hours_left is None or hours_left > 0):
        # Nothing refused or learned yet: the quote, for the time left (a run reopened later has less).
        if hours_left is not None:
            job = job.model_copy(update={"constraints": job.constraints.model_copy(
                update={"deadline_hours": hours_left})})
        quoted = first_plan(job, controller.catalog, now=phases.run_time(now))
        request = replan_request(controller, total - done, purchase=purchase, measured=None)
        if quoted.plan is None or within_cap(quoted.plan.solution, request):
            return quoted
        # The budget cap would stop the quote's plan before its end: the cheapest plan it lets finish.
        result = replan(request)
        note = (f"the quote's plan ({quoted.pool.label(quoted.nodes)}, ${quoted.plan.expected_cost_usd:,.2f}) leaves "
                f"less than the budget cap's stop reserve ({request.stop_reserve_hours * 60:.1f} min of its cost)")
        return dataclasses.replace(result, note=note) if result.plan is not None else ReplanResult.none(
            f"{result.reason}; {note}")
    return replan_or_late(replan_request(controller, total - done, purchase=purchase, measured=state.measured))


def replan_request(controller: Controller, work_left: float, *, purchase: tuple[str, ...] | None,
                   measured: Throughput | None) -> ReplanRequest:
    """What a re-plan solves now: the work, budget and time left, with what the run has learned."""
    state, job = controller.state, controller.job
    now = controller.clock.now()
    budget = job.constraints.budget_usd
    m = measured
    return ReplanRequest(
        job=_plannable_job(controller), catalog=controller.catalog, work_left=work_left,
        budget_left_usd=budget - controller.ledger.total_usd(now) if budget is not None else None,
        hours_left=(controller.deadline_at - now) / 3600 if controller.deadline_at is not None else None,
        restart_hours=job.overheads.restart_minutes / 60,
        measured=Measured(m.gpu, m.gpus, m.units_per_hour, m.steps) if m else None,
        cooling=state.cooling_at(now), refused=state.refused_at(now), rates=dict(state.rates), purchase=purchase,
        now=phases.run_time(now), stop_reserve_hours=controller.stop_timings.reserve_hours(),
    )


def _plannable_job(controller: Controller) -> JobSpec:
    """The job a re-plan solves: without the cluster pools left out now (runtime.control.phases),
    and in a queue with only the held nodes the other jobs leave free (runtime.control.held)."""
    held, clock = controller.held, controller.clock
    job = controller.job if held is None else held.job_view(controller.job, phases.run_time(clock.now()))
    return phases.replan_job(job, left_out=controller.state.left_out_at(clock.now()),
                             used_hours=controller.state.pool_hours)


def _deadline_missed(controller: Controller, result: ReplanResult) -> bool:
    """Log and alert a plan that can only finish late; True when the job says to stop instead."""
    stop = controller.job.run.on_deadline_miss == "stop"
    assert result.plan is not None and result.pool is not None
    controller.events.emit("deadline_miss", reason=result.note, action="stop" if stop else "continue",
                           pool=result.pool.label(result.nodes),
                           expected_cost_usd=round(result.plan.expected_cost_usd, 4),
                           expected_hours=round(result.plan.expected_hours, 4))
    if stop:
        controller.finish("infeasible", f"{result.note}; [run].on_deadline_miss = \"stop\"")
        return True
    now = controller.clock.now()
    if controller.deadline_at is not None:
        late = alerts.LatePlan(now + result.plan.expected_hours * 3600, controller.deadline_at, result.note)
        alerts.dispatch(controller.alert_policy, controller.ledger, controller.outbox, controller.spend.forecast(),
                        [late], now=now)
    return False


def phase_end_at(controller: Controller, record: LaunchRecord) -> tuple[float, str] | None:
    """When the launch's phase ends (simulated time) and why, or None: it runs until the job is done."""
    job = controller.job
    hours = phases.phase_hours(controller.state.plan, record.pool, job,
                               controller.state.pool_hours.get(record.pool.id, 0.0))
    if hours is not None:
        return record.provisioned_at + hours * 3600, "the hours the plan gives the team's cluster"
    held = phases.held_reservation(job, record.pool, record.provisioned_at)
    if held is not None and held.capacity_block:
        return held.usable_until.timestamp(), (f"capacity block {held.reservation_id} ends {when(held.ends_at)} "
                                               "and AWS terminates its instances from 30 minutes before")
    if held is not None:
        return held.usable_until.timestamp(), f"the held reservation ends {when(held.ends_at)}"
    return None


def phase_over(controller: Controller, record: LaunchRecord, end_at: tuple[float, str] | None) -> str | None:
    """Why the launch's phase is over now (``end_at``: :func:`phase_end_at`), or None."""
    if end_at is not None and controller.clock.now() >= end_at[0]:
        return end_at[1]
    return controller.held_lease.why_end(record.pool, record.nodes, controller.spend.forecast)
