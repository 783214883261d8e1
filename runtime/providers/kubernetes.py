"""``provider = "kubernetes"``: a launch is one indexed Job plus a headless Service on the team's cluster.

The pools it runs are the job's ``[[purchase.cluster]]`` entries (:mod:`planner.cluster`):
``kubernetes:<context>/<namespace>:<name>``. A launch of ``n`` nodes is

* a headless Service ``<run>-<launch>`` (``clusterIP: None``, ``publishNotReadyAddresses``)
  selecting the Job's pods, so pod ``i`` is ``<run>-<launch>-<i>.<service>.<namespace>.svc``
  and node 0's name is the c10d rendezvous endpoint (``rendezvous = "pod-ip"`` uses node 0's
  pod IP instead, where cluster DNS is not available);
* an indexed Job (``completionMode: Indexed``, ``completions = parallelism = n``,
  ``backoffLimit: 0``: a lost pod is not replaced in place, danlu re-plans) whose pods ask for
  the entry's GPU resource, carry its node selector, tolerations and priority class, and run
  the cloud bootstrap (:mod:`runtime.providers.bootstrap`) with every node's name and boot
  nonce: each pod takes its own by ``JOB_COMPLETION_INDEX``.

Everything else is the cloud core (:class:`runtime.providers.cloud.CloudProvider`): the user's
code and the heartbeats go through the run's stage next to the checkpoints in the object
store (``s3://``, ``gs://``, ``az://``), the node agent starts torchrun, the controller
releases and bills. Every object carries ``danlu-run``/``danlu-launch`` labels; ``planner gc``
and a resumed controller find them by those.

What the cluster says, and what danlu makes of it:

* pods ``Unschedulable`` for longer than ``schedule_timeout_s`` (plus a stated queue wait),
  or the Job controller's ``FailedCreate`` "exceeded quota": :class:`CapacityError` -- the
  objects are deleted and the controller re-plans elsewhere;
* a container waiting on ``ErrImagePull``/``ImagePullBackOff``/``InvalidImageName``: a
  :class:`ProviderError` naming the image and the fix (the run fails: re-planning cannot help);
* a ``DisruptionTarget`` condition (eviction, ``kubectl drain``, preemption by a higher
  priority class, taint manager, kubelet) or a pod gone that danlu did not delete: an
  interruption. The terminating pod keeps running its grace period
  (``terminationGracePeriodSeconds`` = ``grace_s``), so the workers checkpoint on the
  controller's stop request, and the controller re-plans from that checkpoint.

A node is billed (at the internal price) from the moment its pod is scheduled -- pending pods
hold no GPUs -- until the API no longer lists it.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from planner.cluster_spec import PENDING_PODS, ClusterPool
from pricing.pool import CLUSTER, Pool
from runtime.providers import bootstrap
from runtime.providers.base import Node, ProviderContext, ProviderError
from runtime.providers.cloud import CloudOptions, CloudProvider, _Held, node_name
from runtime.providers.cloud_api import (
    TAG_LAUNCH,
    TAG_RUN,
    CapacityError,
    ComputeAPI,
    ComputeAPIError,
    Instance,
    InstanceRequest,
    InstanceState,
    fit_label,
)

__all__ = [
    "DISRUPTIONS",
    "PULL_ERRORS",
    "KubernetesCompute",
    "KubernetesOptions",
    "KubernetesProvider",
    "job_name",
    "label_value",
]

log = logging.getLogger("runtime.providers.kubernetes")

SDK_HINT = "pip install 'danlu[kubernetes]'"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
INDEX_ENV = "JOB_COMPLETION_INDEX"
MANAGED_BY = ("app.kubernetes.io/managed-by", "danlu")
DISRUPTIONS = frozenset({"EvictionByEvictionAPI", "PreemptionByScheduler", "DeletionByTaintManager",
                         "TerminationByKubelet", "DeletionByPodGC"})
"""``DisruptionTarget`` reasons: eviction (and drain), priority preemption, taints, node pressure, GC."""
PULL_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                         "CreateContainerConfigError", "CreateContainerError"})
"""Container waiting reasons that no amount of waiting fixes."""
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]")


class KubernetesOptions(CloudOptions):
    """``[run.options]`` for ``provider = "kubernetes"`` (besides those of every cloud, :class:`CloudOptions`)."""

    image: str = Field("python:3.11-slim", min_length=1,
                       description="container image with python3 (danlu is pip-installed when missing)")
    kubeconfig: str | None = Field(None, min_length=1, description="kubeconfig file; default $KUBECONFIG, ~/.kube/config")
    service_account: str | None = Field(None, min_length=1, description="the pods' service account")
    image_pull_secrets: tuple[str, ...] = Field((), description="secrets for a private registry")
    cpu: str | None = Field(None, pattern=r"^[0-9]+(\.[0-9]+|m)?$", description="CPU request and limit per pod")
    memory: str | None = Field(None, pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$", description="memory per pod")
    rendezvous: Literal["service", "pod-ip"] = Field(
        "service", description="c10d endpoint: node 0's DNS name under the headless Service, or its pod IP")
    cluster_domain: str = Field("cluster.local", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    schedule_timeout_s: float = Field(600.0, gt=0, le=86_400,
                                      description="how long pods may stay Unschedulable (plus a stated queue wait)")
    grace_s: int = Field(120, ge=1, le=3600, description="terminationGracePeriodSeconds: time to checkpoint "
                                                         "after an eviction")
    namespaces: tuple[str, ...] = Field((), description="namespaces `planner gc` looks in without cluster-wide list")


def label_value(text: str) -> str:
    """``text`` as a label value: letters, digits, ``-_.``, at most 63, alphanumeric at both ends."""
    return fit_label(text, _LABEL_BAD.sub("-", text).strip("-_."))


def job_name(run_id: str, launch_id: str) -> str:
    """The Job's (and Service's) name: node 0's name without ``-n0``, so pod hostnames fit in 63."""
    return node_name(run_id, launch_id, 0).removesuffix("-n0")


def _node_id(region: str, namespace: str, job: str, index: int) -> str:
    return f"{region}:{namespace}/{job}#{index}"


def _split(instance_id: str) -> tuple[str, str, str, str]:
    """(region, namespace, kind, name): kind ``node`` (name ``job#index``), ``job``, ``service`` or ``pod``."""
    region, _, rest = instance_id.partition(":")
    parts = rest.split("/")
    if "#" in rest and len(parts) == 2:
        return region, parts[0], "node", parts[1]
    if len(parts) == 3 and parts[1] in ("job", "service", "pod"):
        return region, parts[0], parts[1], parts[2]
    raise ComputeAPIError(f"Kubernetes object id {instance_id!r} is not 'context:namespace/job#index' or "
                          "'context:namespace/kind/name'", code="BAD_ID")


def _api_error(exc: Any, what: str) -> ComputeAPIError:
    """The API's Status as one of ours: quota refusals are capacity, the rest name the fix."""
    import json

    status = getattr(exc, "status", None)
    try:
        body = json.loads(exc.body) if getattr(exc, "body", None) else {}
    except ValueError:
        body = {}
    message = body.get("message") or getattr(exc, "reason", None) or str(exc)
    reason = body.get("reason") or str(status)
    if status == 403 and "exceeded quota" in message:
        return CapacityError(f"Kubernetes {what}: {message}", code="ExceededQuota")
    fix = ""
    if status == 403:
        fix = " To fix: bind the kubeconfig's user to the danlu Role of docs/kubernetes.md in that namespace."
    elif status == 401:
        fix = " To fix: refresh the kubeconfig's credentials (`kubectl get pods` should work)."
    return ComputeAPIError(f"Kubernetes {what}: {status} {reason}: {message}.{fix}", code=reason)


class KubernetesCompute(ComputeAPI):
    """Indexed Jobs as instances: one node per pod index (see the module docstring).

    ``api_for(region)`` is the ``ApiClient`` of a pool's region (its kubeconfig context);
    ``clusters`` the job's ``[[purchase.cluster]]`` entries.
    """

    cloud = "kubernetes"

    def __init__(self, api_for: Callable[[str], Any], clusters: Iterable[ClusterPool] = (), *,
                 options: KubernetesOptions | None = None, sleep: Callable[[float], None] = time.sleep):
        self.api_for = api_for
        self.clusters = list(clusters)
        self.options = options or KubernetesOptions()
        self._sleep = sleep
        self._deleted: set[tuple[str, str, str]] = set()  # (region, namespace, job) danlu deleted itself
        self._seen: dict[str, dict[str, Any]] = {}  # node id -> the pod last seen (a dict)
        self._disrupted: set[str] = set()

    def tag_value(self, value: str) -> str:
        return label_value(value)

    # -- clients --------------------------------------------------------------------------

    def _core(self, region: str) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_for(region))

    def _batch(self, region: str) -> Any:
        from kubernetes import client

        return client.BatchV1Api(self.api_for(region))

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, _request_timeout=60, **kwargs)
        except ApiException as exc:
            raise _api_error(exc, what) from None
        except (HTTPError, OSError) as exc:
            raise ComputeAPIError(f"Kubernetes {what}: the API server cannot be reached ({exc}). To fix: check the "
                                  "kubeconfig's server and that `kubectl get pods` works.", code="Unreachable") \
                from None

    def cluster_of(self, pool: Pool) -> ClusterPool:
        for cluster in self.clusters:
            if (cluster.region, cluster.namespace, cluster.name) == (pool.region, pool.zone, pool.instance_type):
                return cluster
        raise ComputeAPIError(f"pool {pool.id} is not one of the job's [[purchase.cluster]] entries "
                              f"({', '.join(c.name for c in self.clusters) or 'none'})", code="UNKNOWN_CLUSTER")

    # -- create ---------------------------------------------------------------------------
    def manifests(self, request: InstanceRequest) -> tuple[dict[str, Any], dict[str, Any]]:
        """(Service, Job) of one launch: what :meth:`create` sends."""
        pool, cluster, opts = request.pool, self.cluster_of(request.pool), self.options
        first = request.names[0]
        name = first.removesuffix("-n0")
        labels = {k: label_value(v) for k, v in request.tags.items()} | dict([MANAGED_BY])
        service = {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"job-name": name},
                     # A headless Service needs no port for DNS; one named port documents the rendezvous.
                     "ports": [{"name": "c10d", "port": 29400, "targetPort": 29400}]},
        }
        resources = {cluster.gpu_resource: str(pool.gpus_per_node)}
        if opts.cpu:
            resources["cpu"] = opts.cpu
        if opts.memory:
            resources["memory"] = opts.memory
        pod_spec: dict[str, Any] = {
            "restartPolicy": "Never", "subdomain": name, "enableServiceLinks": False,
            "terminationGracePeriodSeconds": opts.grace_s,
            "containers": [{
                "name": "node", "image": opts.image, "command": ["python3", "-c", request.user_data],
                "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "DANLU_NODE_HOME", "value": "/tmp/danlu"}],
                "resources": {"limits": resources, "requests": dict(resources)},
            }],
        }
        if cluster.node_selector:
            pod_spec["nodeSelector"] = dict(cluster.node_selector)
        if cluster.tolerations:
            pod_spec["tolerations"] = [t.to_api() for t in cluster.tolerations]
        if cluster.priority_class:
            pod_spec["priorityClassName"] = cluster.priority_class
        if opts.service_account:
            pod_spec["serviceAccountName"] = opts.service_account
        if opts.image_pull_secrets:
            pod_spec["imagePullSecrets"] = [{"name": s} for s in opts.image_pull_secrets]
        job = {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels},
            "spec": {"completionMode": "Indexed", "completions": request.count, "parallelism": request.count,
                     "backoffLimit": 0, "ttlSecondsAfterFinished": 3600,
                     "template": {"metadata": {"labels": labels}, "spec": pod_spec}},
        }
        return service, job

    def create(self, request: InstanceRequest) -> list[Instance]:
        """Create the Service and the Job, and return when every pod is scheduled (all or nothing)."""
        if request.options:
            self.options = KubernetesProvider.parse_options(request.options)  # type: ignore[assignment]
        cluster = self.cluster_of(request.pool)
        region, ns = cluster.region, cluster.namespace
        service, job = self.manifests(request)
        name = job["metadata"]["name"]
        core, batch = self._core(region), self._batch(region)
        made: list[str] = []
        try:
            self._call(f"create service {ns}/{name}", core.create_namespaced_service, ns, service)
            made.append(f"{region}:{ns}/service/{name}")
            self._call(f"create job {ns}/{name}", batch.create_namespaced_job, ns, job)
            made.append(f"{region}:{ns}/job/{name}")
            stated = cluster.queue_wait_hours if cluster.queue_wait_hours != PENDING_PODS else 0.0
            self._wait_scheduled(region, ns, name, request.count, self.options.schedule_timeout_s + 3600 * stated)
        except BaseException:  # a refusal, a timeout, Ctrl-C: a failed create holds nothing
            if made:
                try:
                    self.delete(made)
                except ComputeAPIError as exc:  # the first error matters more; gc and the sweep retry
                    log.error("could not delete %s after a failed create: %s", made, exc)
            raise
        return [Instance(id=_node_id(region, ns, name, i), name=n, state=InstanceState.PENDING, zone=ns,
                         tags=dict(job["metadata"]["labels"])) for i, n in enumerate(request.names)]

    def _wait_scheduled(self, region: str, ns: str, name: str, count: int, timeout_s: float) -> None:
        from kubernetes import watch

        core = self._core(region)
        deadline = time.monotonic() + timeout_s
        while True:
            listed = self._call(f"list pods of job {ns}/{name}", core.list_namespaced_pod, ns,
                                label_selector=f"job-name={name}")
            pods = [core.api_client.sanitize_for_serialization(p) for p in listed.items]
            scheduled = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
            if len(scheduled) >= count:
                return
            quota = self._job_event(region, ns, name, "FailedCreate")
            if quota and "exceeded quota" in quota:
                raise CapacityError(f"Kubernetes job {ns}/{name}: {quota}", code="ExceededQuota")
            if time.monotonic() >= deadline:
                why = next((c.get("message") for p in pods for c in (p.get("status") or {}).get("conditions") or []
                            if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"), None)
                raise CapacityError(
                    f"Kubernetes job {ns}/{name}: {count - len(scheduled)} of {count} pods not scheduled after "
                    f"{timeout_s:.0f}s" + (f" (Unschedulable: {why})" if why else "")
                    + ". The cluster has no room now: re-planning elsewhere.", code="Unschedulable")
            # Wait for the next change of these pods (or 2 s): a watch from the list's version.
            stream = watch.Watch()
            try:
                for _ in stream.stream(core.list_namespaced_pod, ns, label_selector=f"job-name={name}",
                                       resource_version=listed.metadata.resource_version,
                                       timeout_seconds=max(1, min(2, int(deadline - time.monotonic()) + 1))):
                    break
            except Exception as exc:  # noqa: BLE001 -- a broken watch only costs the wait: list again
                log.debug("watch of %s/%s ended: %s", ns, name, exc)
                self._sleep(0.5)
            finally:
                stream.stop()

    def _job_event(self, region: str, ns: str, name: str, reason: str) -> str | None:
        events = self._call(f"list events of job {ns}/{name}", self._core(region).list_namespaced_event, ns,
                            field_selector=f"involvedObject.name={name},involvedObject.kind=Job,reason={reason}")
        messages = [e.message for e in events.items if e.message]
        return messages[-1] if messages else None

    # -- describe / delete / list ---------------------------------------------------------
    def describe(self, ids: Sequence[str]) -> list[Instance]:
        parsed = [_split(i) for i in ids]
        pods_of: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
        jobs_alive: dict[tuple[str, str, str], bool] = {}
        out = []
        for instance_id, (region, ns, kind, name) in zip(ids, parsed, strict=True):
            if kind != "node":
                out.append(self._describe_object(instance_id, region, ns, kind, name))
                continue
            job, _, index = name.partition("#")
            key = (region, ns, job)
            if key not in pods_of:
                core = self._core(region)
                listed = self._call(f"list pods of job {ns}/{job}", core.list_namespaced_pod, ns,
                                    label_selector=f"job-name={job}")
                by_index: dict[str, dict[str, Any]] = {}
                for pod in listed.items:
                    raw = core.api_client.sanitize_for_serialization(pod)
                    idx = (raw["metadata"].get("labels") or {}).get(INDEX_LABEL)
                    if idx is not None and (idx not in by_index or _newer(raw, by_index[idx])):
                        by_index[idx] = raw
                pods_of[key] = by_index
            pod = pods_of[key].get(index)
            out.append(self._node_instance(instance_id, key, pod, jobs_alive))
        return out

    def _node_instance(self, instance_id: str, key: tuple[str, str, str], pod: dict[str, Any] | None,
                       jobs_alive: dict[tuple[str, str, str], bool]) -> Instance:
        region, ns, job = key
        ours = key in self._deleted
        if pod is None:
            seen = instance_id in self._seen
            if not seen and not ours:
                if key not in jobs_alive:
                    jobs_alive[key] = self._exists(region, ns, "job", job)
                if jobs_alive[key]:
                    return Instance(id=instance_id, name=instance_id, state=InstanceState.PENDING, zone=ns)
            # Gone: deleted by danlu, or by the cluster (an eviction whose pod we never saw fail).
            return Instance(id=instance_id, name=instance_id, state=InstanceState.TERMINATED, zone=ns,
                            interruption=seen and not ours)
        self._seen[instance_id] = pod
        meta, status = pod["metadata"], pod.get("status") or {}
        disrupted = any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                        for c in status.get("conditions") or [])
        if disrupted or (status.get("reason") in ("Evicted", "Preempting") and not ours):
            self._disrupted.add(instance_id)
        phase = status.get("phase")
        if phase in ("Succeeded", "Failed", "Unknown"):
            state = InstanceState.TERMINATED
        elif phase == "Running":
            # A terminating pod still runs its grace period: the workers checkpoint in it.
            state = InstanceState.STOPPING if meta.get("deletionTimestamp") and ours else InstanceState.RUNNING
        else:
            state = InstanceState.PENDING
        return Instance(id=instance_id, name=meta.get("name", instance_id), state=state, zone=ns,
                        tags=meta.get("labels") or {}, address=status.get("podIP") or None,
                        interruption=instance_id in self._disrupted and not ours)

    def _describe_object(self, instance_id: str, region: str, ns: str, kind: str, name: str) -> Instance:
        state = InstanceState.TERMINATED
        if self._exists(region, ns, kind, name):
            state = InstanceState.RUNNING
        elif kind == "job":  # background deletion: the Job goes first, its pods a grace period later
            core = self._core(region)
            left = self._call(f"list pods of job {ns}/{name}", core.list_namespaced_pod, ns,
                              label_selector=f"job-name={name}")
            state = InstanceState.STOPPING if left.items else InstanceState.TERMINATED
        return Instance(id=instance_id, name=name, state=state, zone=ns)

    def _exists(self, region: str, ns: str, kind: str, name: str) -> bool:
        read = {"job": self._batch(region).read_namespaced_job, "service": self._core(region).read_namespaced_service,
                "pod": self._core(region).read_namespaced_pod}[kind]
        try:
            self._call(f"read {kind} {ns}/{name}", read, name, ns)
        except ComputeAPIError as exc:
            if exc.code == "NotFound":
                return False
            raise
        return True

    def delete(self, ids: Sequence[str]) -> None:
        done: set[tuple[str, str, str, str]] = set()
        for instance_id in ids:
            region, ns, kind, name = _split(instance_id)
            targets = [(kind, name)]
            if kind == "node":  # a node is a pod of its launch's Job: the Job and Service go together
                job = name.partition("#")[0]
                self._deleted.add((region, ns, job))
                targets = [("job", job), ("service", job)]
            elif kind == "job":
                self._deleted.add((region, ns, name))
            for what, obj in targets:
                if (region, ns, what, obj) in done:
                    continue
                done.add((region, ns, what, obj))
                self._delete_one(region, ns, what, obj)

    def _delete_one(self, region: str, ns: str, kind: str, name: str) -> None:
        core, batch = self._core(region), self._batch(region)
        try:
            if kind == "job":
                # Background: the Job goes now, the garbage collector deletes its pods (their grace period).
                self._call(f"delete job {ns}/{name}", batch.delete_namespaced_job, name, ns,
                           body={"propagationPolicy": "Background"})
            elif kind == "service":
                self._call(f"delete service {ns}/{name}", core.delete_namespaced_service, name, ns)
            else:
                self._call(f"delete pod {ns}/{name}", core.delete_namespaced_pod, name, ns)
        except ComputeAPIError as exc:
            if exc.code != "NotFound":
                raise

    def regions(self) -> dict[str, list[str]]:
        """Region -> namespaces to look in: the job's clusters (a run), else the current context (gc),
        each with the ``namespaces`` option's."""
        found: dict[str, list[str]] = {}
        for cluster in self.clusters:
            found.setdefault(cluster.region, []).append(cluster.namespace)
        if not found:
            found["current"] = [] if self.options.namespaces else [_context_namespace(self.options.kubeconfig)]
        return {r: list(dict.fromkeys([*ns, *self.options.namespaces])) for r, ns in found.items()}

    def list_tagged(self, key: str = TAG_RUN, value: str | None = None) -> list[Instance]:
        selector = key if value is None else f"{key}={label_value(value)}"
        found: list[Instance] = []
        for region, namespaces in self.regions().items():
            for kind in ("job", "service", "pod"):
                objects = self._list(region, namespaces, kind, selector)
                if kind == "pod":  # pods of a listed Job go with it
                    jobs = {(i.zone, i.name) for i in found if i.id.split("/")[1] == "job"}
                    objects = [o for o in objects if (o["metadata"]["namespace"],
                                                      (o["metadata"].get("labels") or {}).get("job-name")) not in jobs]
                for obj in objects:
                    meta = obj["metadata"]
                    labels = meta.get("labels") or {}
                    if key not in labels or (value is not None and labels[key] != label_value(value)):
                        continue  # the selector is the server's, the promise is ours
                    state = InstanceState.STOPPING if meta.get("deletionTimestamp") else InstanceState.RUNNING
                    found.append(Instance(id=f"{region}:{meta['namespace']}/{kind}/{meta['name']}", name=meta["name"],
                                          state=state, zone=meta["namespace"], tags=labels))
        return found

    def _list(self, region: str, namespaces: list[str], kind: str, selector: str) -> list[dict[str, Any]]:
        core, batch = self._core(region), self._batch(region)
        everywhere = {"job": batch.list_job_for_all_namespaces, "service": core.list_service_for_all_namespaces,
                      "pod": core.list_pod_for_all_namespaces}[kind]
        per_ns = {"job": batch.list_namespaced_job, "service": core.list_namespaced_service,
                  "pod": core.list_namespaced_pod}[kind]
        try:
            items = self._call(f"list {kind}s", everywhere, label_selector=selector).items
        except ComputeAPIError as exc:
            if not exc.code.startswith(("Forbidden", "403")):
                raise
            # A namespaced Role cannot list across namespaces: the ones danlu uses, one by one.
            items = [i for ns in namespaces for i in self._call(f"list {kind}s in {ns}", per_ns, ns,
                                                               label_selector=selector).items]
        return [core.api_client.sanitize_for_serialization(i) for i in items]

    def boot_problem(self, ids: Sequence[str]) -> str | None:
        """A container of these nodes that cannot start (see :data:`PULL_ERRORS`), as a message with the fix."""
        for instance_id in ids:
            pod = self._seen.get(instance_id)
            for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
                waiting = (status.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") in PULL_ERRORS:
                    meta = pod["metadata"]
                    return (f"Kubernetes pod {meta['namespace']}/{meta['name']} cannot start: {waiting['reason']}: "
                            f"{waiting.get('message', '')}. To fix: set [run.options] image to an image the cluster "
                            "can pull (with python3), and image_pull_secrets for a private registry.")
        return None


def _newer(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return str(a["metadata"].get("creationTimestamp", "")) > str(b["metadata"].get("creationTimestamp", ""))


def _context_namespace(kubeconfig: str | None) -> str:
    """The current context's namespace (``default`` when it names none or there is no kubeconfig)."""
    try:
        import os

        from kubernetes import config

        kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        _, active = config.list_kube_config_contexts(config_file=kubeconfig)
        return (active or {}).get("context", {}).get("namespace") or "default"
    except Exception:  # noqa: BLE001 -- no kubeconfig: the API client says so when it is built
        return "default"


def build_compute(options: KubernetesOptions, clusters: Iterable[ClusterPool] = ()) -> KubernetesCompute:
    """A :class:`KubernetesCompute` with one ``ApiClient`` per kubeconfig context, built on first use.

    Raises:
        ProviderError: the client is missing, or the kubeconfig or a context cannot be used.
    """
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        raise ProviderError(f"provider 'kubernetes' needs the kubernetes client. To fix: {SDK_HINT}") from None
    from pricing.cluster_queue import ClusterQueueError, kube_api_client

    clusters = list(clusters)
    contexts = {c.region: c.context for c in clusters}
    clients: dict[str, Any] = {}

    def api_for(region: str) -> Any:
        if region not in clients:
            try:
                clients[region] = kube_api_client(contexts.get(region), options.kubeconfig)
            except ClusterQueueError as exc:
                raise ProviderError(f"provider 'kubernetes': {exc}") from None
        return clients[region]

    api_for("current" if not clusters else clusters[0].region)  # fail now, not mid-launch
    return KubernetesCompute(api_for, clusters, options=options)


class KubernetesProvider(CloudProvider):
    """``provider = "kubernetes"``: the job's cluster pools, one indexed Job per launch."""

    name = "kubernetes"
    Options = KubernetesOptions

    @classmethod
    def compute(cls, options: CloudOptions, clusters: Iterable[ClusterPool] = ()) -> KubernetesCompute:
        k8s = options if isinstance(options, KubernetesOptions) else KubernetesOptions(**options.model_dump())
        return build_compute(k8s, clusters)

    @classmethod
    def from_context(cls, context: ProviderContext) -> KubernetesProvider:
        from runtime.control.run_state import RunStateError, load_state
        from runtime.providers.cloud import _stage_from_run

        options = cls.parse_options(context.options)
        try:
            clusters = load_state(context.run_root).job_spec().purchase.cluster
        except RunStateError:
            clusters = ()
        return cls(cls.compute(options, clusters), run_id=context.run_id or context.run_root.name,
                   options=options, state_dir=context.state_dir, stage=_stage_from_run(context), clock=context.clock,
                   home=context.home)

    def install_spec(self) -> str:
        """A pod without danlu installs it with the extra its checkpoint store needs."""
        if self.options.install:
            return self.options.install
        from importlib import metadata

        scheme = (self._stage_url or "").split("://", 1)[0]
        store = {"s3": "aws", "gs": "gcp", "gcs": "gcp", "az": "azure", "abfs": "azure", "abfss": "azure"}.get(scheme)
        try:
            version = metadata.version("danlu")
        except metadata.PackageNotFoundError:
            version = "0.1.0"
        return f"danlu[{','.join(filter(None, ('train', store)))}]=={version}"

    def provision(self, pool: Pool, *, nodes: int, launch_id: str) -> list[Node]:
        if pool.purchase != CLUSTER:
            raise ProviderError(
                f"provider 'kubernetes' runs the job's [[purchase.cluster]] pools; {pool.label(nodes)} is not one. "
                "To fix: set [run] provider = \"auto\", which runs each pool on its cloud's provider "
                "(docs/kubernetes.md), or limit [constraints] clouds to the cluster (clouds = [\"kubernetes\"]).")
        assert isinstance(self.compute, KubernetesCompute)
        if not self._swept:
            self._sweep_orphans()
        self.stage.remove("launches", launch_id)
        names = [node_name(self.run_id, launch_id, i) for i in range(nodes)]
        boots = [secrets.token_hex(8) for _ in names]
        for name in names:
            self.stage.remove("nodes", name)
        script = bootstrap.render_indexed(
            {"launch": launch_id, "stage": self.stage.url, "cloud": self.name, "install": self.install_spec(),
             "heartbeat_s": self.options.heartbeat_s},
            [{"node": n, "boot": b} for n, b in zip(names, boots, strict=True)], index_env=INDEX_ENV)
        created = self.compute.create(InstanceRequest(
            pool=pool, names=tuple(names), tags={**self._run_tags(), TAG_LAUNCH: launch_id}, user_data=script,
            options=self.options.model_dump()))
        scheduled = self.clock.wall()  # billed from here: a scheduled pod holds its GPUs
        made = []
        for index, (instance, name, boot) in enumerate(zip(created, names, boots, strict=True)):
            node = Node(id=name, index=index, pool=pool, provisioned_at=scheduled,
                        handle={"instance": instance.id, "boot": boot, "zone": instance.zone, "cloud": self.name,
                                "stage": self.stage.url, "job": job_name(self.run_id, launch_id)})
            self._held[name] = _Held(node, instance.id, boot, instance_state=instance.state)
            made.append(node)
        return made

    def boot_problem(self, nodes: Sequence[Node]) -> str | None:
        assert isinstance(self.compute, KubernetesCompute)
        return self.compute.boot_problem([self._get(n).instance for n in nodes])

    def rendezvous_endpoint(self, nodes: Sequence[Node], first: Mapping[str, Any]) -> str:
        if self.options.rendezvous == "pod-ip":
            return super().rendezvous_endpoint(nodes, first)
        node = nodes[0]
        job = node.handle.get("job") or node.id.removesuffix("-n0")
        # <hostname>.<subdomain>.<namespace>.svc.<domain>: the headless Service's record for pod 0.
        return f"{job}-0.{job}.{node.handle.get('zone')}.svc.{self.options.cluster_domain}:{first.get('port')}"
