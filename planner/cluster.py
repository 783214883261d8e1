"""A team's Kubernetes cluster in the plan: ``[[purchase.cluster]]`` as held-like configurations.

Each entry (:class:`planner.cluster_spec.ClusterPool`) becomes one pool,
``kubernetes:<context>/<namespace>:<name>`` bought as ``cluster``, at 1 .. ``max_gpus //
gpus_per_node`` nodes (pods), priced at the internal price per GPU-hour. The MILP treats it
like held capacity: its purchase class comes first, so a plan is "the cluster, then the
cloud" and never the other way round; ``max_hours`` caps its hours like a reservation's end.

Availability is the queue wait: the hours before the cluster's pods start, stated
(``queue_wait_hours = 0.5``) or measured from the pods pending there now
(``"pending_pods"``, :mod:`pricing.cluster_queue`). The phase pays it in time, not money
(:attr:`planner.pools.Config.launch_wait_hours`): pending pods are not billed.

:func:`notes` says, for the quote, why the plan does or does not use each cluster: it
fits; it does not fit in time (its GPUs, queue and the deadline) so the cloud finishes
the rest; or the cloud is cheaper or faster.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from planner.cluster_spec import PENDING_PODS, ClusterPool
from planner.errors import PlannerError
from pricing.catalog import Catalog, Offering
from pricing.pool import CLUSTER, CLUSTER_CLOUD, Pool

if TYPE_CHECKING:
    from planner.job import JobSpec
    from planner.workload import WorkModel

__all__ = ["cluster_configs", "cluster_pool", "find_cluster", "notes", "queue_wait"]


def cluster_pool(cluster: ClusterPool) -> Pool:
    """The pool of one ``[[purchase.cluster]]`` entry (per node: one pod of ``gpus_per_node`` GPUs)."""
    return Pool(cloud=CLUSTER_CLOUD, region=cluster.region, zone=cluster.namespace, instance_type=cluster.name,
                gpu=cluster.gpu, gpus_per_node=cluster.gpus_per_node, purchase=CLUSTER,
                hourly_usd=cluster.hourly_usd, term_hours=cluster.max_hours)


def find_cluster(job: JobSpec, pool: Pool) -> ClusterPool | None:
    """The ``[[purchase.cluster]]`` entry ``pool`` was made from (None: not a cluster pool of this job)."""
    if pool.purchase != CLUSTER:
        return None
    for cluster in job.purchase.cluster:
        if (cluster.region, cluster.namespace, cluster.name) == (pool.region, pool.zone, pool.instance_type):
            return cluster
    return None


def queue_wait(cluster: ClusterPool, index: int) -> tuple[float, str]:
    """(hours, where the figure comes from) of one entry's queue wait.

    Raises:
        PlannerError: ``"pending_pods"`` and the cluster cannot be asked; names the key and the fix.
    """
    if cluster.queue_wait_hours != PENDING_PODS:
        return float(cluster.queue_wait_hours), "stated in the job file"
    from pricing.cluster_queue import ClusterQueueError, kube_api_client, pending_wait

    try:
        api = kube_api_client(cluster.context)
        try:
            waited = pending_wait(api, cluster.namespace, cluster.gpu_resource, cluster.node_selector)
        finally:
            api.close()
    except ClusterQueueError as exc:
        raise PlannerError(f"purchase.cluster[{index}].queue_wait_hours = \"pending_pods\": {exc}") from None
    return waited.hours, waited.source


def _memory(catalog: Catalog, gpu: str) -> float | None:
    sizes = [o.gpu_memory_gb for o in catalog if o.gpu.lower() == gpu.lower()]
    return max(sizes) if sizes else None


def cluster_configs(job: JobSpec, work: WorkModel, catalog: Catalog, builder: Any, warnings: list[str]) -> list:
    """The configurations of every ``[[purchase.cluster]]`` entry (``builder``: planner.pools._Builder)."""
    out = []
    for i, cluster in enumerate(job.purchase.cluster):
        if work.speed(cluster.gpu) is None:
            warnings.append(f"purchase.cluster[{i}] ({cluster.name}): no throughput figure for {cluster.gpu}; "
                            "cluster not used (add it to [workload.throughput])")
            continue
        memory = _memory(catalog, cluster.gpu)
        if work.min_gpu_memory_gb and memory is not None and memory < work.min_gpu_memory_gb:
            warnings.append(f"purchase.cluster[{i}] ({cluster.name}): {cluster.gpu} has {memory:g} GB, the job "
                            f"needs {work.min_gpu_memory_gb:g} GB per GPU; cluster not used")
            continue
        wait, _ = queue_wait(cluster, i)
        pool = cluster_pool(cluster)
        # The offering only carries what the builder reads: speed by GPU, carbon (unknown: estimated).
        offering = Offering(CLUSTER_CLOUD, pool.region, pool.zone, pool.instance_type, cluster.gpu,
                            cluster.gpus_per_node, memory or 0.0, 0.0, 0.0, pool.hourly_usd,
                            source="[[purchase.cluster]]")
        for config in builder.configs(pool, offering, None, max_nodes=cluster.max_nodes):
            # An internal price has no catalog date to age.
            out.append(dataclasses.replace(config, as_of=None, launch_wait_hours=wait, launch_wait_p90_hours=wait))
    return out


def notes(quote: Any) -> list[dict[str, Any]]:
    """Per cluster of the job: whether the plan uses it and why (``quote``: planner.quote.Quote)."""
    job = quote.job
    if not job.purchase.cluster:
        return []
    configs = quote.candidates.configs if quote.candidates else []
    plan = quote.plan.solution if quote.plan else None
    deadline = job.constraints.deadline_hours
    out = []
    for i, cluster in enumerate(job.purchase.cluster):
        pool = cluster_pool(cluster)
        mine = [c for c in configs if c.pool.key == pool.key]
        entry: dict[str, Any] = {"pool": pool.id, "gpus": cluster.max_gpus, "gpu": cluster.gpu,
                                 "gpu_hour_usd": cluster.gpu_hour_usd, "used": False}
        if not mine:
            entry["reason"] = next((w for w in (quote.candidates.warnings if quote.candidates else [])
                                    if w.startswith(f"purchase.cluster[{i}]")), "no configuration of it fits the job")
            out.append(entry)
            continue
        fastest = max(mine, key=lambda c: c.rate)
        wait = fastest.launch_wait_hours
        alone = wait + quote.work.work / fastest.rate
        if cluster.max_hours is not None:
            alone = max(alone, wait + min(cluster.max_hours, quote.work.work / fastest.rate))
        capped = cluster.max_hours is not None and quote.work.work / fastest.rate > cluster.max_hours
        entry.update(queue_wait_hours=round(wait, 4), alone_hours=round(alone, 4))
        where = (f"{fastest.nodes} pod(s) x {cluster.gpus_per_node} {cluster.gpu} (the team's {cluster.max_gpus} "
                 f"GPUs), queue wait {wait:.2f} h")
        phases = plan.phases if plan is not None else ()
        used = [p for p in phases if p.config.pool.key == pool.key]
        others = [p for p in phases if p.config.pool.key != pool.key]
        if used:
            entry["used"] = True
            share = sum(p.work_hours * p.config.rate for p in used) / quote.work.work
            entry["work_share"] = round(share, 4)
        if used and not others:
            limit = f" within the deadline of {deadline:g} h" if deadline else ""
            entry["reason"] = (f"fits: {where}; the whole job takes {alone:.2f} h there{limit}, at the internal "
                               f"${cluster.gpu_hour_usd:g}/GPU-h")
        elif used:
            rest = ", then ".join(p.config.pool.label(p.config.nodes) for p in others)
            why = (f"the team may hold it {cluster.max_hours:g} h" if capped else
                   f"alone it would take {alone:.2f} h" + (f", past the deadline of {deadline:g} h" if deadline
                                                             and alone > deadline else ""))
            if not capped and (not deadline or alone <= deadline):
                why += "; splitting is cheaper or faster for the objective"
            entry["reason"] = (f"does not fit in time: {where}; {why}. It does {share:.0%} of the work first, "
                               f"then {rest} finishes the rest")
        elif plan is not None:
            if deadline and alone > deadline:
                entry["reason"] = f"not used: {where}; alone it would take {alone:.2f} h, past the deadline of " \
                                  f"{deadline:g} h, and no split with the cloud does better for the objective"
            else:
                entry["reason"] = (f"not used: {where}; the chosen plan is better for the objective "
                                   f"({quote.objective}) than starting on the cluster")
        else:
            entry["reason"] = f"{where}; alone it would take {alone:.2f} h; no plan meets the job's limits"
        out.append(entry)
    return out
