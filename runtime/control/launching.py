"""Starting a launch on the pool the plan chose: the queue's held nodes taken first, the nodes
provisioned and billed, the workers started with a fresh rendezvous id -- then followed to the end
(:mod:`runtime.control.following`)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from pricing import risk
from pricing.pool import Pool
from runtime.control import following, trackers
from runtime.control.launch_end import LaunchEnd
from runtime.control.replan import pool_interruption_rate
from runtime.control.run_state import LaunchRecord
from runtime.providers.base import LaunchSpec, ProviderError
from runtime.tracking.launch import launch_env as tracking_env
from runtime.training import contract

if TYPE_CHECKING:
    from planner.job import JobSpec
    from runtime.control.controller import Controller


def launch_and_follow(controller: Controller) -> LaunchEnd:
    """Run the next launch on the run's pool to its end."""
    state, held, clock = controller.state, controller.held, controller.clock
    pool, count = state.pool, state.nodes
    assert pool is not None and count is not None
    launch_id = f"l-{len(state.launches) + 1}"
    start_step = controller.store.latest_step() or 0
    if held is not None and held.covers(pool) and not controller.held_lease.take(
            pool, count, launch_id=launch_id, hours=float((state.plan or {}).get("expected_hours") or 0.0)):
        why = (f"the queue's other jobs hold its nodes ({held.free(pool)} free)"
               if held.held_now(pool) >= count else
               f"the queue holds {held.held_now(pool)} of its nodes now (outside the reservation's window)")
        return LaunchEnd(contract.Outcome.FAILED, f"{pool.label(count)}: {why}", no_capacity=True)
    if controller.provider.host_startup and clock.scale > 1:
        clock.pause()  # until the workers train: this host's start-up is not the cloud's
    try:
        return _provision_and_follow(controller, pool, count, launch_id, start_step)
    finally:
        clock.resume()


def _provision_and_follow(controller: Controller, pool: Pool, count: int, launch_id: str,
                          start_step: int) -> LaunchEnd:
    state, provider, events = controller.state, controller.provider, controller.events
    try:
        nodes = provider.provision(pool, nodes=count, launch_id=launch_id)
    except ProviderError as exc:
        controller.held_lease.give_back()
        events.emit("provision_failed", launch=launch_id, pool=pool.label(count), reason=str(exc))
        return LaunchEnd(contract.Outcome.FAILED, f"{pool.label(count)}: {exc}", no_capacity=True)
    processes = processes_per_node(controller.job, pool, remote=provider.remote)
    record = LaunchRecord(
        launch_id=launch_id, pool=pool, nodes=count, world_size=count * processes,
        start_step=start_step, provisioned_at=controller.clock.sim(nodes[0].provisioned_at),
        hosts=[n.to_dict() for n in nodes],
    )
    state.launches.append(record)
    state.active = True
    controller.save()
    controller.spend.start_billing(record, nodes)
    if len(state.launches) > 1:
        # While the nodes boot, before anything of this launch logs.
        trackers.rewind(controller.run_dir, controller.job, cwd=state.cwd, events=events, step=start_step)
    provider.wait_ready(nodes, timeout_s=controller.tuning.rdzv_timeout_s)
    controller.workers.forget_requests()
    rdzv_id = uuid.uuid4().hex
    nodes = provider.run(nodes, _launch_spec(controller, launch_id, rdzv_id, pool, processes))
    record.hosts = [n.to_dict() for n in nodes]
    controller.save()
    events.emit("launch", launch=launch_id, pool=record.label(), world_size=record.world_size,
                rdzv_id=rdzv_id, start_step=start_step)
    if provider.remote and processes != pool.gpus_per_node:
        events.emit("gpus_unmatched", launch=launch_id, message=(
            f"[run].nproc_per_node = {processes} on {pool.instance_type}, which has {pool.gpus_per_node} GPU(s) a "
            + (f"node: {pool.gpus_per_node - processes} of them stay idle, paid for (the plan counts only those "
               "at work)" if processes < pool.gpus_per_node
               else "node: processes share GPUs")
            + "; leave nproc_per_node out to run one process per GPU"))
    return following.follow(controller, record, nodes)


def processes_per_node(job: JobSpec, pool: Pool, *, remote: bool) -> int:
    """torchrun's --nproc-per-node for a launch on ``pool``: ``[run].nproc_per_node`` where the job sets
    it; else one process per GPU of the instance where the nodes are real machines (``remote``: the
    quote's throughput counts every GPU of a node), and one on this machine, which has none to match."""
    if job.run.nproc_per_node is not None:
        return job.run.nproc_per_node
    return pool.gpus_per_node if remote else 1


def _launch_spec(controller: Controller, launch_id: str, rdzv_id: str, pool: Pool, processes: int) -> LaunchSpec:
    state, job, tuning = controller.state, controller.job, controller.tuning
    scale = state.time_scale
    mtbf = None
    if pool.purchase == "spot":
        rate = state.rates.get(pool.id) or pool_interruption_rate(controller.catalog, pool) or risk.OVER_20_RATE
        mtbf = 3600.0 / rate / scale
    terms = contract.LaunchContract(
        checkpoint_dir=state.checkpoint_dir, run_dir=str(controller.work_dir), attempt=launch_id, mtbf_s=mtbf,
        restart_s=job.overheads.restart_minutes * 60 / scale, pg_timeout_s=60.0,
    )
    return LaunchSpec(
        launch_id=launch_id, entrypoint=tuple(job.run.entrypoint), nproc_per_node=processes,
        rdzv_id=rdzv_id, env={**terms.to_env(), **tracking_env(job, controller.run_dir)}, cwd=state.cwd,
        log_dir=controller.run_dir / "launches" / launch_id,
        rdzv_timeout_s=tuning.rdzv_timeout_s, shutdown_timeout_s=tuning.shutdown_timeout_s,
    )
