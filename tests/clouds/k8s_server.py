"""A local Kubernetes API server (core/v1, batch/v1) on 127.0.0.1 for the official ``kubernetes`` client.

No API server can be started on these machines, so this one answers what danlu calls, in the
shapes the real API answers, and plays the controllers a cluster runs behind it: the Job
controller (indexed pods), the scheduler (GPU resources, node selectors, taints), the kubelet
(pod IPs, image pulls) and the garbage collector (propagation policies). Where each shape
comes from:

* URIs, verbs and query parameters: the client's own generated code (``kubernetes/client/api/
  core_v1_api.py``, ``batch_v1_api.py``: ``/api/v1/namespaces/{namespace}/pods``,
  ``.../pods/{name}/eviction``, ``/apis/batch/v1/namespaces/{namespace}/jobs``,
  ``labelSelector``, ``fieldSelector``, ``watch``, ``timeoutSeconds``), and the API reference
  (kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/, job-v1/,
  service-resources/service-v1/, cluster-resources/event-v1/).
* Watch: one JSON object a line, ``{"type": "ADDED"|"MODIFIED"|"DELETED", "object": ...}``
  (kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes).
* Errors: the ``Status`` object (``{"kind": "Status", "apiVersion": "v1", "status": "Failure",
  "message": "pods \\"x\\" not found", "reason": "NotFound", "details": {...}, "code": 404}``).
* Indexed Job pods: labels ``batch.kubernetes.io/job-completion-index``, ``job-name``,
  ``batch.kubernetes.io/job-name``, ``controller-uid``, the index annotation, hostname
  ``<job>-<index>``, the ``JOB_COMPLETION_INDEX`` env var from that label
  (kubernetes.io/docs/tasks/job/indexed-parallel-processing-static/ and
  .../job-with-pod-to-pod-communication/: headless Service, ``subdomain``).
* Unschedulable: condition ``PodScheduled=False``, reason ``Unschedulable``, message
  ``0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are
  available: 1 No preemption victims found for incoming pod.`` and a ``FailedScheduling``
  Warning event from ``default-scheduler``, as recorded in NVIDIA/k8s-device-plugin#430 and
  #348; ``node(s) didn't match Pod's node affinity/selector`` and ``node(s) had untolerated
  taint`` per microsoft/pai#5577 and the scheduler's messages.
* Quota: the Job controller's ``FailedCreate`` Warning event ``Error creating: pods "<pod>" is
  forbidden: exceeded quota: <quota>, requested: requests.nvidia.com/gpu=1, used: ..., limited:
  ...`` (flyteorg/flyte#6226, eggpi/citationhunt#186, kubernetes/kubernetes#6822).
* Image pulls: container ``state.waiting`` with reason ``ErrImagePull`` then ``ImagePullBackOff``,
  message ``Back-off pulling image "<image>"``, events ``Failed``/``BackOff`` from kubelet.
* Disruptions: condition ``DisruptionTarget=True`` with reason ``EvictionByEvictionAPI`` (the
  eviction subresource, and so ``kubectl drain``), ``PreemptionByScheduler`` (priority
  preemption), ``DeletionByTaintManager``, ``TerminationByKubelet``, set before the pod is
  deleted (kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions).

Test hooks: :meth:`FakeKube.preempt` (priority preemption), :meth:`FakeKube.drain` (cordon a
node and evict its pods), :meth:`FakeKube.running` (what the data plane runs), ``bad_images``
(images no registry has), ``quota_gpus`` (a ResourceQuota on the GPU resource).
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

GPU = "nvidia.com/gpu"
REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "AlreadyExists", 422: "Invalid"}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class FakeNode:
    """A cluster node: its labels, taints and allocatable GPUs."""

    name: str
    gpus: int
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    unschedulable: bool = False


def _selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """``a=b,c`` (equality and existence): what danlu and the tests send."""
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field_matches(selector: str | None, obj: dict[str, Any]) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        node: Any = obj
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if str(node) != value:
            return False
    return True


def _gpus(pod: dict[str, Any], resource: str = GPU) -> int:
    total = 0
    for c in pod["spec"].get("containers", []):
        res = c.get("resources") or {}
        amount = (res.get("limits") or {}).get(resource, (res.get("requests") or {}).get(resource, 0))
        total += int(amount)
    return total


def _tolerates(pod: dict[str, Any], taint: dict[str, str]) -> bool:
    for tol in pod["spec"].get("tolerations") or []:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists" and (not tol.get("key") or tol["key"] == taint["key"]):
            return True
        if tol.get("key") == taint["key"] and tol.get("value") == taint.get("value"):
            return True
    return False


class FakeKube:
    """The API server and the cluster behind it (see the module docstring).

    ``boot_s``: scheduled to Running; ``stop_s``: graceful deletion to gone (a pod's
    ``terminationGracePeriodSeconds`` is capped at it, so tests do not wait minutes).
    """

    def __init__(self, nodes: list[FakeNode] | None = None, *, boot_s: float = 0.2, stop_s: float = 0.3,
                 tick_s: float = 0.05):
        self.nodes = nodes if nodes is not None else [FakeNode("gpu-node-1", 8, {"nvidia.com/gpu.product": "A100"})]
        self.boot_s, self.stop_s, self.tick_s = boot_s, stop_s, tick_s
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, namespace, name) -> object
        self.events: list[dict[str, Any]] = []
        self.version = 1
        self.bad_images: set[str] = set()
        self.quota_gpus: int | None = None
        self.forbidden: set[str] = set()  # "list:pods@*": refuse with 403 (a namespaced Role only)
        self.calls: list[tuple[str, str]] = []
        self.ever_pods: list[str] = []
        self._times: dict[tuple[str, str, str], float] = {}
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._threads = [threading.Thread(target=self._server.serve_forever, daemon=True),
                         threading.Thread(target=self._controllers, daemon=True)]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeKube:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def kubeconfig(self, path, *, context: str = "fake", namespace: str = "default"):
        """A kubeconfig file with one context for this server (bearer token, plain HTTP on 127.0.0.1)."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "danlu", "user": {"token": "fake-token"}}],
            "contexts": [{"name": context, "context": {"cluster": "fake", "user": "danlu", "namespace": namespace}}],
        }))
        return path

    # -- state helpers ----------------------------------------------------------------------
    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.changed.notify_all()

    def _event(self, involved: dict[str, Any], reason: str, message: str, *, kind: str, source: str,
               type_: str = "Warning") -> None:
        meta = involved["metadata"]
        for ev in self.events:  # the API server aggregates repeats into one event with a count
            if ev["involvedObject"]["uid"] == meta["uid"] and ev["reason"] == reason and ev["message"] == message:
                ev["count"] += 1
                ev["lastTimestamp"] = _now()
                return
        self.version += 1
        self.events.append({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": meta["namespace"],
                         "uid": str(uuid.uuid4()), "resourceVersion": str(self.version), "creationTimestamp": _now()},
            "involvedObject": {"kind": kind, "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"],
                               "apiVersion": "batch/v1" if kind == "Job" else "v1",
                               "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": message, "source": {"component": source}, "type": type_, "count": 1,
            "firstTimestamp": _now(), "lastTimestamp": _now(), "reportingComponent": source, "reportingInstance": "",
        })

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(o) for (k, ns, _), o in self.objects.items()
                    if k == "pods" and (namespace is None or ns == namespace)]

    def alive(self, label: str = "danlu-run") -> list[str]:
        """Every pod, job and service carrying ``label``: what must be gone after a run."""
        with self.lock:
            return sorted(f"{k}/{ns}/{n}" for (k, ns, n), o in self.objects.items()
                          if label in (o["metadata"].get("labels") or {}))

    def running(self) -> list[dict[str, Any]]:
        """Pods the kubelet runs (phase Running, terminating ones too: their grace period)."""
        return [p for p in self.pods() if p["status"].get("phase") == "Running"]

    # -- hooks tests call -------------------------------------------------------------------------
    def preempt(self, namespace: str, name: str, reason: str = "PreemptionByScheduler",
                message: str = "Preempted by a pod of a higher priority class") -> None:
        """Disrupt a pod the way the scheduler (or the taint manager, the kubelet) does."""
        with self.lock:
            pod = self.objects[("pods", namespace, name)]
            self._disrupt(pod, reason, message)

    def drain(self, node: str) -> list[str]:
        """``kubectl drain``: cordon ``node``, then evict every pod on it. Returns the pods evicted."""
        with self.lock:
            target = next(n for n in self.nodes if n.name == node)
            target.unschedulable = True
            victims = [o for (k, _, _), o in self.objects.items() if k == "pods" and o["spec"].get("nodeName") == node]
            for pod in victims:
                self._disrupt(pod, "EvictionByEvictionAPI", "Eviction API: evicting")
            return [p["metadata"]["name"] for p in victims]

    def _disrupt(self, pod: dict[str, Any], reason: str, message: str) -> None:
        conditions = pod["status"].setdefault("conditions", [])
        if not any(c["type"] == "DisruptionTarget" for c in conditions):
            conditions.append({"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message,
                               "lastProbeTime": None, "lastTransitionTime": _now()})
        self._delete_pod(pod, grace=pod["spec"].get("terminationGracePeriodSeconds", 30))

    def _delete_pod(self, pod: dict[str, Any], grace: float | None = None) -> None:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            return
        grace = pod["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace
        if pod["status"].get("phase") != "Running":
            grace = 0  # nothing runs: gone at once
        meta["deletionTimestamp"] = _now()
        meta["deletionGracePeriodSeconds"] = int(grace)
        self._times[("gone", meta["namespace"], meta["name"])] = time.monotonic() + min(float(grace), self.stop_s)
        self._bump(pod)

    # -- the controllers ------------------------------------------------------------------------
    def _controllers(self) -> None:
        while not self._stop.wait(self.tick_s):
            with self.lock:
                self._job_controller()
                self._scheduler()
                self._kubelet()
                self._collector()

    def _job_controller(self) -> None:
        for (kind, ns, name), job in list(self.objects.items()):
            if kind != "jobs" or job["metadata"].get("deletionTimestamp"):
                continue
            spec, status = job["spec"], job["status"]
            pods = [o for (k, n, _), o in self.objects.items() if k == "pods" and n == ns
                    and o["metadata"]["labels"].get("job-name") == name]
            # Terminating pods that did not succeed count as failed (job tracking with finalizers).
            failed = [p for p in pods if p["status"].get("phase") == "Failed"
                      or (p["metadata"].get("deletionTimestamp") and p["status"].get("phase") != "Succeeded")]
            gone_indexes = set(status.get("_failedIndexes", []))
            status["failed"] = max(status.get("failed", 0), len(failed) + len(gone_indexes))
            status["active"] = sum(1 for p in pods if p["status"].get("phase") in ("Pending", "Running")
                                   and not p["metadata"].get("deletionTimestamp"))
            if status["failed"] > spec.get("backoffLimit", 6):
                if not any(c["type"] == "Failed" for c in status.get("conditions", [])):
                    status.setdefault("conditions", []).append({
                        "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit", "lastProbeTime": _now(),
                        "lastTransitionTime": _now()})
                    self._bump(job)
                continue
            have = {p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") for p in pods
                    if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") != "Failed"}
            for index in range(int(spec.get("completions", 1))):
                if str(index) in have:
                    continue
                if str(index) in gone_indexes or any(
                        p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == str(index)
                        for p in failed):
                    continue  # a failed index is not replaced past the backoff limit (checked above)
                prefix = f"{name}-{index}-"  # the pod's generateName: admission sees no name yet
                need = _gpus({"spec": spec["template"]["spec"]})
                if self.quota_gpus is not None:
                    used = sum(_gpus(o) for (k, n, _), o in self.objects.items() if k == "pods" and n == ns
                               and o["status"].get("phase") in ("Pending", "Running"))
                    if used + need > self.quota_gpus:
                        self._event(job, "FailedCreate",
                                    f'Error creating: pods "{prefix}" is forbidden: exceeded quota: gpu-quota, '
                                    f"requested: requests.{GPU}={need}, used: requests.{GPU}={used}, limited: "
                                    f"requests.{GPU}={self.quota_gpus}", kind="Job", source="job-controller")
                        continue
                self._create_pod(job, index, prefix + secrets.token_hex(3)[:5])

    def _create_pod(self, job: dict[str, Any], index: int, pod_name: str) -> None:
        template = copy.deepcopy(job["spec"]["template"])
        meta = template.get("metadata") or {}
        ns, name, uid = job["metadata"]["namespace"], job["metadata"]["name"], job["metadata"]["uid"]
        labels = {**(meta.get("labels") or {}), "batch.kubernetes.io/controller-uid": uid,
                  "batch.kubernetes.io/job-name": name, "controller-uid": uid, "job-name": name,
                  "batch.kubernetes.io/job-completion-index": str(index)}
        spec = template["spec"]
        spec["hostname"] = f"{name}-{index}"
        for container in spec.get("containers", []):
            container.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "generateName": f"{name}-{index}-", "namespace": ns, "uid": str(uuid.uuid4()),
                         "creationTimestamp": _now(), "labels": labels,
                         "annotations": {**(meta.get("annotations") or {}),
                                         "batch.kubernetes.io/job-completion-index": str(index)},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                                              "controller": True, "blockOwnerDeletion": True}],
                         "finalizers": ["batch.kubernetes.io/job-tracking"]},
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": "BestEffort", "conditions": []},
        }
        self.objects[("pods", ns, pod_name)] = pod
        self.ever_pods.append(pod_name)
        self._bump(pod)
        self._event(job, "SuccessfulCreate", f"Created pod: {pod_name}", kind="Job", source="job-controller",
                    type_="Normal")

    def _scheduler(self) -> None:
        used: dict[str, int] = {}
        for (k, _, _), o in self.objects.items():
            if k == "pods" and o["spec"].get("nodeName"):
                used[o["spec"]["nodeName"]] = used.get(o["spec"]["nodeName"], 0) + _gpus(o)
        for (k, _, _), pod in list(self.objects.items()):
            if k != "pods" or pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            need, why = _gpus(pod), {}
            chosen = None
            for node in self.nodes:
                selector = pod["spec"].get("nodeSelector") or {}
                if node.unschedulable:
                    why["node(s) were unschedulable"] = why.get("node(s) were unschedulable", 0) + 1
                elif any(node.labels.get(key) != value for key, value in selector.items()):
                    key = "node(s) didn't match Pod's node affinity/selector"
                    why[key] = why.get(key, 0) + 1
                elif any(not _tolerates(pod, t) for t in node.taints):
                    t = next(t for t in node.taints if not _tolerates(pod, t))
                    key = f"node(s) had untolerated taint {{{t['key']}: {t.get('value', '')}}}"
                    why[key] = why.get(key, 0) + 1
                elif node.gpus - used.get(node.name, 0) < need:
                    why[f"Insufficient {GPU}"] = why.get(f"Insufficient {GPU}", 0) + 1
                else:
                    chosen = node
                    break
            conditions = pod["status"].setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c["type"] != "PodScheduled"]
            if chosen is not None:
                pod["spec"]["nodeName"] = chosen.name
                used[chosen.name] = used.get(chosen.name, 0) + need
                conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                   "lastTransitionTime": _now()})
                self._times[("started", pod["metadata"]["namespace"], pod["metadata"]["name"])] = \
                    time.monotonic() + self.boot_s
                self._event(pod, "Scheduled", f"Successfully assigned {pod['metadata']['namespace']}/"
                            f"{pod['metadata']['name']} to {chosen.name}", kind="Pod", source="default-scheduler",
                            type_="Normal")
            else:
                total = len(self.nodes)
                parts = ", ".join(f"{n} {w}" for w, n in sorted(why.items()))
                message = (f"0/{total} nodes are available: {parts}. preemption: 0/{total} nodes are available: "
                           f"{total} No preemption victims found for incoming pod.")
                conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                   "message": message, "lastProbeTime": None, "lastTransitionTime": _now()})
                self._event(pod, "FailedScheduling", message, kind="Pod", source="default-scheduler")
            self._bump(pod)

    def _kubelet(self) -> None:
        now = time.monotonic()
        for (k, ns, name), pod in list(self.objects.items()):
            if k != "pods" or not pod["spec"].get("nodeName") or pod["status"]["phase"] != "Pending":
                continue
            if pod["metadata"].get("deletionTimestamp") or now < self._times.get(("started", ns, name), 0):
                continue
            container = pod["spec"]["containers"][0]
            image = container["image"]
            base = {"name": container["name"], "image": image, "imageID": "", "ready": False, "restartCount": 0,
                    "started": False}
            if image in self.bad_images:
                first = not pod["status"].get("containerStatuses")
                reason = "ErrImagePull" if first else "ImagePullBackOff"
                message = (f'failed to pull and unpack image "docker.io/library/{image}": failed to resolve reference '
                           f'"docker.io/library/{image}": not found' if first else f'Back-off pulling image "{image}"')
                pod["status"]["containerStatuses"] = [{**base, "state": {"waiting": {"reason": reason,
                                                                                      "message": message}}}]
                self._event(pod, "Failed" if first else "BackOff",
                            f'Failed to pull image "{image}": {message}' if first else message, kind="Pod",
                            source="kubelet")
                self._times[("started", ns, name)] = now + 0.5
                self._bump(pod)
                continue
            octet = len(self.ever_pods) % 250 + 2
            pod["status"].update({
                "phase": "Running", "hostIP": "10.0.0.2", "podIP": f"10.244.1.{octet}",
                "podIPs": [{"ip": f"10.244.1.{octet}"}], "startTime": _now(),
                "containerStatuses": [{**base, "ready": True, "started": True, "imageID": f"sha256:{'0' * 64}",
                                       "containerID": f"containerd://{secrets.token_hex(32)}",
                                       "state": {"running": {"startedAt": _now()}}}],
            })
            pod["status"]["conditions"] += [{"type": t, "status": "True", "lastProbeTime": None,
                                             "lastTransitionTime": _now()}
                                            for t in ("Initialized", "Ready", "ContainersReady")]
            self._event(pod, "Started", f"Started container {container['name']}", kind="Pod", source="kubelet",
                        type_="Normal")
            self._bump(pod)

    def _collector(self) -> None:
        now = time.monotonic()
        jobs = {(ns, o["metadata"]["uid"]) for (k, ns, _), o in self.objects.items() if k == "jobs"}
        for (k, ns, name), obj in list(self.objects.items()):
            meta = obj["metadata"]
            if k == "pods":
                owner = next((r for r in meta.get("ownerReferences") or [] if r["kind"] == "Job"), None)
                if owner is not None and (ns, owner["uid"]) not in jobs and not meta.get("deletionTimestamp"):
                    self._delete_pod(obj)  # its Job is gone (background propagation)
                if meta.get("deletionTimestamp") and now >= self._times.get(("gone", ns, name), 0):
                    job = self.objects.get(("jobs", ns, (meta.get("labels") or {}).get("job-name", "")))
                    if job is not None and owner is not None and obj["status"].get("phase") != "Succeeded":
                        # Counted as failed while it terminated: remember its index once it is gone.
                        job["status"].setdefault("_failedIndexes", []).append(meta["labels"].get(
                            "batch.kubernetes.io/job-completion-index"))
                    del self.objects[(k, ns, name)]
                    self.version += 1
                    self.changed.notify_all()
            elif k == "jobs" and meta.get("deletionTimestamp"):
                left = [o for (kk, n, _), o in self.objects.items() if kk == "pods" and n == ns
                        and o["metadata"]["labels"].get("job-name") == name]
                for pod in left:
                    self._delete_pod(pod)
                if not left:  # foreground deletion: the Job goes when its pods have
                    del self.objects[(k, ns, name)]
                    self.version += 1
                    self.changed.notify_all()

    # -- the API ------------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        self.calls.append((method, path))
        m = re.match(r"^/(?:api/v1|apis/batch/v1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<kind>pods|services|jobs|events)"
                     r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>eviction))?$", path)
        if not m:
            return 404, _status(404, f"the server could not find the requested resource ({path})")
        ns, kind, name, sub = m["ns"], m["kind"], m["name"], m["sub"]
        if (kind == "jobs") != path.startswith("/apis/batch/v1"):
            return 404, _status(404, f"the server could not find the requested resource ({path})")
        verb = {"GET": "list" if name is None else "get", "POST": "create", "DELETE": "delete"}.get(method, method)
        if f"{verb}:{kind}@{ns or '*'}" in self.forbidden:
            scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
            return 403, _status(403, f'{kind} is forbidden: User "system:serviceaccount:ml:danlu" cannot {verb} '
                                     f'resource "{kind}" in API group "{"batch" if kind == "jobs" else ""}" {scope}')
        with self.lock:
            if method == "POST" and sub == "eviction":
                pod = self.objects.get(("pods", ns, name))
                if pod is None:
                    return 404, _status(404, f'pods "{name}" not found', name=name, kind="pods")
                self._disrupt(pod, "EvictionByEvictionAPI", "Eviction API: evicting")
                return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
            if method == "POST" and name is None:
                return self._create(kind, ns, body)
            if method == "GET" and name is None:
                items = [copy.deepcopy(o) for (k, n, _), o in sorted(self.objects.items())
                         if k == kind and (ns is None or n == ns)] if kind != "events" else \
                    [copy.deepcopy(e) for e in self.events if ns is None or e["metadata"]["namespace"] == ns]
                items = [o for o in items if _selector_matches(query.get("labelSelector"), o["metadata"].get("labels")
                                                               or {}) and _field_matches(query.get("fieldSelector"), o)]
                kind_name = {"pods": "PodList", "services": "ServiceList", "jobs": "JobList", "events": "EventList"}
                return 200, {"kind": kind_name[kind], "apiVersion": "batch/v1" if kind == "jobs" else "v1",
                             "metadata": {"resourceVersion": str(self.version)}, "items": items}
            obj = self.objects.get((kind, ns, name))
            if obj is None:
                return 404, _status(404, f'{kind}{".batch" if kind == "jobs" else ""} "{name}" not found', name=name,
                                    kind=kind)
            if method == "GET":
                return 200, copy.deepcopy(obj)
            if method == "DELETE":
                policy = (body or {}).get("propagationPolicy") or query.get("propagationPolicy") or "Background"
                if kind == "pods":
                    grace = (body or {}).get("gracePeriodSeconds")
                    self._delete_pod(obj, grace=grace)
                    return 200, copy.deepcopy(obj)
                if kind == "jobs" and policy == "Foreground":
                    obj["metadata"]["deletionTimestamp"] = _now()
                    obj["metadata"].setdefault("finalizers", []).append("foregroundDeletion")
                    self._bump(obj)
                    return 200, copy.deepcopy(obj)
                if kind == "jobs" and policy == "Orphan":
                    for (k, n, _), o in self.objects.items():
                        if k == "pods" and n == ns and o["metadata"]["labels"].get("job-name") == name:
                            o["metadata"]["ownerReferences"] = []
                del self.objects[(kind, ns, name)]
                self.version += 1
                self.changed.notify_all()
                return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                             "details": {"name": name, "kind": kind, "uid": obj["metadata"]["uid"]}}
        return 405, _status(400, f"{method} is not supported here")

    def _create(self, kind: str, ns: str, body: dict[str, Any]) -> tuple[int, Any]:
        name = (body.get("metadata") or {}).get("name") or ""
        if not re.match(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", name):
            return 422, _status(422, f'{kind} "{name}" is invalid: metadata.name: Invalid value: "{name}": a lowercase '
                                     "RFC 1123 label must consist of lower case alphanumeric characters or '-'")
        for value in ((body.get("metadata") or {}).get("labels") or {}).values():
            if len(value) > 63 or not re.match(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$", value):
                return 422, _status(422, f'{kind} "{name}" is invalid: metadata.labels: Invalid value: "{value}"')
        if (kind, ns, name) in self.objects:
            return 409, _status(409, f'{kind}{".batch" if kind == "jobs" else ""} "{name}" already exists', name=name,
                                kind=kind)
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=_now())
        meta.setdefault("labels", {})
        if kind == "jobs":
            spec = obj["spec"]
            if spec.get("completionMode") == "Indexed" and "completions" not in spec:
                return 422, _status(422, f'jobs.batch "{name}" is invalid: spec.completions: Required value: when '
                                         "completion mode is Indexed")
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("parallelism", 1)
            spec.setdefault("completionMode", "NonIndexed")
            obj["status"] = {"active": 0, "startTime": _now()}
        elif kind == "services":
            obj["spec"].setdefault("type", "ClusterIP")
            obj["spec"].setdefault("clusterIP", "10.96.0.10")
            obj["status"] = {"loadBalancer": {}}
        elif kind == "pods":
            obj["status"] = {"phase": "Pending", "conditions": []}
        obj["apiVersion"] = "batch/v1" if kind == "jobs" else "v1"
        obj["kind"] = {"pods": "Pod", "services": "Service", "jobs": "Job"}[kind]
        self.objects[(kind, ns, name)] = obj
        self._bump(obj)
        return 201, copy.deepcopy(obj)

    def watch(self, path: str, query: dict[str, str], write) -> None:
        """Stream ADDED/MODIFIED/DELETED of the listed objects until ``timeoutSeconds``."""
        _, listed = self.handle("GET", path, {k: v for k, v in query.items() if k != "watch"}, None)
        seen = {o["metadata"]["uid"]: o for o in listed.get("items", [])}
        since = int(query.get("resourceVersion") or 0)  # a watch from a list's version: only what changed since
        for obj in seen.values():
            if int(obj["metadata"].get("resourceVersion") or 0) > since:
                write({"type": "ADDED" if not since else "MODIFIED", "object": obj})
        deadline = time.monotonic() + float(query.get("timeoutSeconds", 30))
        while time.monotonic() < deadline and not self._stop.is_set():
            with self.changed:
                self.changed.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            _, listed = self.handle("GET", path, {k: v for k, v in query.items() if k != "watch"}, None)
            now = {o["metadata"]["uid"]: o for o in listed.get("items", [])}
            for uid, obj in now.items():
                if uid not in seen:
                    write({"type": "ADDED", "object": obj})
                elif obj["metadata"].get("resourceVersion") != seen[uid]["metadata"].get("resourceVersion"):
                    write({"type": "MODIFIED", "object": obj})
            for uid, obj in seen.items():
                if uid not in now:
                    write({"type": "DELETED", "object": obj})
            seen = now


def _status(code: int, message: str, *, name: str | None = None, kind: str | None = None) -> dict[str, Any]:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
              "reason": REASONS.get(code, "BadRequest"), "code": code}
    if name is not None:
        status["details"] = {"name": name, "kind": kind}
    return status


def _handler(kube: FakeKube):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _reply(self, code: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.headers.get("Authorization") != "Bearer fake-token":
                self._reply(401, _status(401, "Unauthorized") | {"reason": "Unauthorized"})
                return
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                self._reply(400, _status(400, "the request body is not JSON"))
                return
            if method == "GET" and query.get("watch") in ("true", "1", "True"):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def write(event: dict[str, Any]) -> None:
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()

                try:
                    kube.watch(parts.path, query, write)
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass
                return
            code, payload = kube.handle(method, parts.path, query, body)
            self._reply(code, payload)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler
