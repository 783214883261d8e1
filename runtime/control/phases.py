"""Where a launch on the team's cluster ends, and which cluster pools a re-plan may still use.

The plan is a sequence of phases; the controller runs its first phase's pool and re-plans
whenever a launch ends. A cloud phase needs no end of its own: the switching policy decides
when to leave spot, and a later phase is what the re-plan then chooses. A phase on a
``[[purchase.cluster]]`` pool does need one -- the planner puts the cluster first because it
is cheap, and a plan "the cluster, then spot on AWS" means the cluster is left when its hours
are up, not when the job is done:

* :func:`phase_hours`: the billed hours a launch on a cluster pool may hold it -- the hours
  its plan gave the first phase when the plan goes on to another pool, and at most the
  team's ``max_hours`` less what the run already held it. The controller then stops the
  workers at a checkpoint (the stop request a notice sends) and re-plans.
* :func:`held_reservation`: the ``[[purchase.held]]`` entry a launch runs on, which it must leave at
  the reservation's end on the run's clock (an AWS capacity block 40 minutes before its end, when
  AWS warns that it begins terminating the block's instances in 10 minutes). The planner gave the
  held pool no more hours than that; a launch still running then is stopped at a checkpoint like
  a cluster phase, and the re-plan, dated by the run's clock, no longer offers the reservation.
* :func:`replan_job`: the job a re-plan solves. A cluster whose phase ended is left out for
  the rest of the run (the cluster first, then the cloud, never back), one that had no
  capacity while it cools down (``left_out``: pool id -> until, None for the rest of the
  run), and ``max_hours`` counts down by the hours the run has held it. An eviction does not
  leave the cluster out: the team's quota is still there, and a re-plan may run it again.

A timeline, for ``examples/cluster-burst.toml`` (its quote: the cluster 8.70 h, of which 1.50 h
queue wait, then spot on AWS)::

    t=0      plan: 2x a100 cluster kubernetes:lab/ml-team, then 1x p6-b200.48xlarge spot aws
    t=1.5h   the pods are scheduled (billing starts at the internal price)
    t=8.7h   7.20 billed hours later: stop -> the workers checkpoint -> the Job and Service are deleted
    t=8.7h   re-plan without the cluster: 1x p6-b200.48xlarge spot aws:us-east-1, from that checkpoint
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from typing import Any

from planner.cluster import cluster_pool, find_cluster
from planner.job import HeldReservation, JobSpec
from pricing.pool import CLUSTER, HELD, Pool, PoolError

__all__ = ["held_reservation", "phase_hours", "replan_job", "run_date", "run_time"]

_EPSILON_HOURS = 1e-6


def phase_hours(plan: Mapping[str, Any] | None, pool: Pool, job: JobSpec, used_hours: float = 0.0) -> float | None:
    """Billed hours a launch on ``pool`` may run before its phase ends (None: until the job is done).

    ``plan`` is the run's plan (:func:`planner.report.plan_json`), ``used_hours`` the hours
    the run has already held ``pool`` in launches before this one.
    """
    if pool.purchase != CLUSTER:
        return None
    limits = []
    phases = (plan or {}).get("phases") or []
    first = phases[0] if phases else {}
    if len(phases) > 1 and _pool_of(first) == pool.key and isinstance(first.get("hours"), int | float):
        waits = float(first.get("queue_wait_hours") or 0.0)
        staging = float((first.get("transfer") or {}).get("data_staging_hours") or 0.0)
        limits.append(first["hours"] - waits - staging)  # pending pods and staging are not billed
    cluster = find_cluster(job, pool)
    if cluster is not None and cluster.max_hours is not None:
        limits.append(cluster.max_hours - used_hours)
    return max(0.0, min(limits)) if limits else None


def held_reservation(job: JobSpec, pool: Pool, now: float) -> HeldReservation | None:
    """The ``[[purchase.held]]`` entry the held ``pool`` runs on at ``now`` (the run clock's POSIX
    seconds; None: not a held pool). A launch on it must end at its ``usable_until``.

    A pool in a reservation its launches target is that entry's alone. Of several entries for the same
    instance type that name none and have started, the last to end: the planner sees one pool for them,
    with the hours of that one."""
    if pool.purchase != HELD:
        return None
    entries = [h for h in job.purchase.held if h.started(run_time(now)) and h.reservation_id == pool.reservation
               and (h.cloud, h.region, h.instance_type) == (pool.cloud, pool.region, pool.instance_type)]
    return max(entries, key=lambda h: h.usable_until) if entries else None


def run_time(now: float) -> dt.datetime:
    """``now`` (the run clock's POSIX seconds) in UTC: the moment a re-plan plans from."""
    return dt.datetime.fromtimestamp(now, dt.UTC)


def run_date(now: float) -> dt.date:
    """The UTC date at ``now`` (the run clock's POSIX seconds)."""
    return run_time(now).date()


def replan_job(job: JobSpec, *, left_out: Collection[str] = (),
               used_hours: Mapping[str, float] | None = None) -> JobSpec:
    """``job`` with the cluster pools in ``left_out`` removed and ``max_hours`` less ``used_hours``."""
    used = used_hours or {}
    kept = []
    for cluster in job.purchase.cluster:
        pool_id = cluster_pool(cluster).id
        if pool_id in left_out:
            continue
        if cluster.max_hours is not None and used.get(pool_id):
            left = cluster.max_hours - used[pool_id]
            if left <= _EPSILON_HOURS:
                continue
            cluster = cluster.model_copy(update={"max_hours": left})
        kept.append(cluster)
    if kept == list(job.purchase.cluster):
        return job
    return job.model_copy(update={"purchase": job.purchase.model_copy(update={"cluster": tuple(kept)})})


def _pool_of(phase: Any) -> tuple[str, str] | None:
    """The pool key of a plan phase; None for one that does not read (a hand-written ``--plan``)."""
    try:
        return Pool.from_dict(phase).key
    except (KeyError, TypeError, ValueError, AttributeError, PoolError):
        return None
