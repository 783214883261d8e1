"""How long a new pod waits on a team's Kubernetes cluster: measured from the pods pending now.

``queue_wait_hours = "pending_pods"`` in ``[[purchase.cluster]]`` asks the cluster, at
quote time, for the namespace's pending pods (``GET /api/v1/namespaces/{ns}/pods
?fieldSelector=status.phase=Pending``) and keeps those that compete for the same GPUs: they
ask for the pool's GPU resource and their node selector does not contradict the pool's.
The wait quoted is the longest any of them has waited so far (now minus its
``metadata.creationTimestamp``): a pod that joins the queue now waits at least that long
in a FIFO queue, so it is a lower bound, not a forecast -- the quote says which it used.

The client comes from the user's kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``, the
context named, else the current one), or from the pod's service account when danlu runs
inside the cluster. :func:`kube_api_client` is the same loader the Kubernetes provider
uses, so a quote and a run reach the same cluster.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from danlu.extras import require
from pricing.errors import PricingError

__all__ = ["ClusterQueueError", "QueueWait", "competes", "kube_api_client", "pending_wait"]


class ClusterQueueError(PricingError):
    """The cluster could not be asked (no kubeconfig, unknown context, API error)."""


@dataclass(frozen=True, slots=True)
class QueueWait:
    """The measured wait: ``hours``, from ``pending`` competing pods asking for ``pending_gpus``."""

    hours: float
    pending: int
    pending_gpus: int
    source: str


def kube_api_client(context: str | None = None, kubeconfig: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` for ``context`` of ``kubeconfig`` (default ``$KUBECONFIG``,
    ``~/.kube/config``); in a pod without a kubeconfig, its service account.

    Raises:
        MissingExtra: the kubernetes client is not installed.
        ClusterQueueError: no kubeconfig, or no such context; the message says how to fix it.
    """
    require("kubernetes", "kubernetes", feature="a Kubernetes cluster pool")
    import os

    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    # The client reads $KUBECONFIG once, when imported: read it now, as kubectl would.
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    api = client.ApiClient(configuration=client.Configuration())
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=api.configuration)
    except (ConfigException, OSError) as exc:
        try:
            config.load_incluster_config(client_configuration=api.configuration)
        except ConfigException:
            where = kubeconfig or "$KUBECONFIG or ~/.kube/config"
            raise ClusterQueueError(
                f"kubeconfig {where}: cannot use context {context or '(current)'}: {exc}. To fix: run "
                "`kubectl config get-contexts` and set the context's name (or point KUBECONFIG at the file)."
            ) from None
    return api


def competes(pod: Mapping[str, Any], resource: str, node_selector: Mapping[str, str]) -> int:
    """GPUs of ``resource`` a pod asks for when it could take the pool's nodes (0: it does not compete)."""
    spec = pod.get("spec") or {}
    theirs = spec.get("nodeSelector") or spec.get("node_selector") or {}
    if any(k in theirs and theirs[k] != v for k, v in node_selector.items()):
        return 0  # it waits for other nodes
    total = 0
    for container in spec.get("containers") or ():
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            amount = (resources.get(part) or {}).get(resource)
            if amount is not None:
                total += int(str(amount))
                break
    return total


def pending_wait(api_client: Any, namespace: str, resource: str, node_selector: Mapping[str, str], *,
                 now: dt.datetime | None = None) -> QueueWait:
    """The wait a new pod of the pool faces (see the module docstring); ``now`` defaults to the clock.

    Raises:
        ClusterQueueError: the API refused or failed the list.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    core = client.CoreV1Api(api_client)
    try:
        pods = core.list_namespaced_pod(namespace, field_selector="status.phase=Pending", _request_timeout=30)
    except ApiException as exc:
        raise ClusterQueueError(f"cluster namespace {namespace}: listing pending pods failed: {exc.status} "
                                f"{exc.reason}. To fix: the kubeconfig's user needs `list pods` there (see "
                                "docs/kubernetes.md), or state queue_wait_hours as a number.") from None
    except (HTTPError, OSError) as exc:
        raise ClusterQueueError(f"cluster namespace {namespace}: cannot reach the API server ({exc}). To fix: "
                                "check the kubeconfig's server, or state queue_wait_hours as a number.") from None
    now = now or dt.datetime.now(dt.UTC)
    oldest = 0.0
    count = gpus = 0
    for pod in pods.items:
        raw = api_client.sanitize_for_serialization(pod)
        if (raw.get("status") or {}).get("phase") != "Pending" or (raw.get("metadata") or {}).get("deletionTimestamp"):
            continue
        asked = competes(raw, resource, node_selector)
        if not asked:
            continue
        count += 1
        gpus += asked
        created = pod.metadata.creation_timestamp
        if created is not None:
            oldest = max(oldest, (now - created).total_seconds() / 3600)
    source = (f"{count} pending pod(s) asking for {gpus} {resource} in {namespace}; the oldest has waited "
              f"{oldest:.2f} h" if count else f"no pending pod asks for {resource} in {namespace}")
    return QueueWait(hours=oldest, pending=count, pending_gpus=gpus, source=source)
