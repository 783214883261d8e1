"""KubernetesCompute (runtime/providers/kubernetes.py) through the official client against the local API.

The real ``kubernetes`` client, loaded from a kubeconfig file, talks to tests/clouds/k8s_server.py
on 127.0.0.1: what is asserted is what danlu sends (the indexed Job, the headless Service, the
pods' GPU resources, node selector, tolerations, labels) and how it reads the cluster's answers
-- each failure path (Unschedulable, quota exceeded, image pull error) and each disruption
(eviction, drain, priority preemption) once.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes client is not installed (pip install 'danlu[kubernetes]')")

from planner.cluster import cluster_pool
from planner.cluster_spec import ClusterPool
from runtime.providers.base import ProviderError
from runtime.providers.cloud_api import (
    TAG_LAUNCH,
    TAG_RUN,
    CapacityError,
    InstanceRequest,
)
from runtime.providers.cloud_api import InstanceState as S
from runtime.providers.kubernetes import (
    KubernetesOptions,
    KubernetesProvider,
    build_compute,
    job_name,
)
from tests.clouds.k8s_server import FakeKube, FakeNode

SELECTOR = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
CLUSTER = ClusterPool(name="a100", context="fake", namespace="ml", gpu="A100-80GB", gpus_per_node=2, max_gpus=4,
                      gpu_hour_usd=0.5, node_selector=SELECTOR, priority_class="team-low",
                      tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},))


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    server = FakeKube([FakeNode("gpu-a", 4, dict(SELECTOR), taints=[TAINT]), FakeNode("cpu-a", 0)]).start()
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig", context="fake", namespace="ml")))
    yield server
    server.stop()


def _api(options: KubernetesOptions | None = None):
    return build_compute(options or KubernetesOptions(schedule_timeout_s=3), [CLUSTER])


def _request(nodes: int = 2, run: str = "run-a", launch: str = "l-1") -> InstanceRequest:
    names = tuple(f"{job_name(run, launch)}-n{i}" for i in range(nodes))
    return InstanceRequest(pool=cluster_pool(CLUSTER), names=names, tags={TAG_RUN: run, TAG_LAUNCH: launch},
                           user_data="#!/usr/bin/env python3\nprint('hi')\n")


def _until(check, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_create_sends_an_indexed_job_and_a_headless_service_with_the_pools_gpus(kube):
    api = _api()
    created = api.create(_request())
    assert [i.id for i in created] == ["fake:ml/run-a-l-1#0", "fake:ml/run-a-l-1#1"]
    job = kube.objects[("jobs", "ml", "run-a-l-1")]
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimit"]) == \
        ("Indexed", 2, 2, 0)
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "run-a-l-1" and pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == SELECTOR and pod["priorityClassName"] == "team-low"
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2"} == container["resources"]["requests"]
    assert container["command"] == ["python3", "-c", "#!/usr/bin/env python3\nprint('hi')\n"]
    assert job["metadata"]["labels"] == {TAG_RUN: "run-a", TAG_LAUNCH: "l-1", "app.kubernetes.io/managed-by": "danlu"}
    service = kube.objects[("services", "ml", "run-a-l-1")]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {"job-name": "run-a-l-1"}
    assert service["spec"]["publishNotReadyAddresses"] is True
    # Both pods were scheduled on the GPU node (taint tolerated, selector matched) before create returned.
    pods = kube.pods("ml")
    assert sorted(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1"]
    assert {p["spec"]["nodeName"] for p in pods} == {"gpu-a"}
    running = _until(lambda: [i for i in api.describe([c.id for c in created]) if i.state is S.RUNNING][1:] or None)
    assert running[0].address.startswith("10.244.") and not running[0].interruption
    assert ("GET", "/api/v1/namespaces/ml/pods") in kube.calls  # listed, and watched while waiting


def test_unschedulable_pods_are_a_capacity_error_and_leave_nothing(kube):
    api = _api()
    with pytest.raises(CapacityError) as info:
        api.create(_request(nodes=3))  # 6 GPUs asked, the node has 4
    assert info.value.code == "Unschedulable"
    assert "0/2 nodes are available" in str(info.value) and "Insufficient nvidia.com/gpu" in str(info.value)
    _until(lambda: not kube.alive())


def test_quota_exceeded_is_a_capacity_error_at_once(kube):
    kube.quota_gpus = 2
    api = _api(KubernetesOptions(schedule_timeout_s=600))
    started = time.monotonic()
    with pytest.raises(CapacityError) as info:
        api.create(_request(nodes=2))
    assert info.value.code == "ExceededQuota" and "exceeded quota: gpu-quota" in str(info.value)
    assert time.monotonic() - started < 120  # the FailedCreate event, not the schedule timeout
    _until(lambda: not kube.alive())


def test_an_image_the_cluster_cannot_pull_is_a_clear_error(kube):
    kube.bad_images.add("nope:1")
    api = _api(KubernetesOptions(image="nope:1", schedule_timeout_s=5))
    created = api.create(_request(nodes=1))
    message = _until(lambda: (api.describe([c.id for c in created]), api.boot_problem([c.id for c in created]))[1])
    assert "ErrImagePull" in message or "ImagePullBackOff" in message
    assert "nope:1" in message and "[run.options] image" in message


@pytest.mark.parametrize("how", ["eviction", "drain", "preemption"])
def test_eviction_drain_and_priority_preemption_read_as_interruptions(kube, how):
    from kubernetes import client

    api = _api()
    (node,) = api.create(_request(nodes=1))
    _until(lambda: api.describe([node.id])[0].state is S.RUNNING)
    (pod,) = kube.pods("ml")
    name = pod["metadata"]["name"]
    if how == "eviction":  # through the real client: POST .../pods/{name}/eviction
        core = client.CoreV1Api(api.api_for("fake"))
        core.create_namespaced_pod_eviction(name, "ml", client.V1Eviction(metadata=client.V1ObjectMeta(name=name)))
    elif how == "drain":
        assert kube.drain("gpu-a") == [name]
    else:
        kube.preempt("ml", name)
    seen = api.describe([node.id])[0]
    assert seen.interruption and seen.state is S.RUNNING  # its grace period: the workers checkpoint now
    gone = _until(lambda: [i for i in api.describe([node.id]) if i.state is S.TERMINATED] or None)
    assert gone[0].interruption


def test_delete_takes_job_service_and_pods_and_gc_lists_leftovers(kube):
    api = _api()
    created = api.create(_request(nodes=2, run="run-b"))
    assert {i.id.split("/", 1)[1] for i in api.list_tagged(TAG_RUN, "run-b")} == {"job/run-b-l-1", "service/run-b-l-1"}
    api.delete([created[0].id])
    _until(lambda: all(i.state is S.TERMINATED for i in api.describe([c.id for c in created])))
    assert kube.alive() == []
    assert not any(i.interruption for i in api.describe([c.id for c in created]))  # danlu deleted them
    # A pod whose Job was deleted with orphan propagation is listed by itself (gc deletes it).
    again = api.create(_request(nodes=1, run="run-c"))
    from kubernetes import client

    client.BatchV1Api(api.api_for("fake")).delete_namespaced_job("run-c-l-1", "ml", body={"propagationPolicy": "Orphan"})
    left = sorted(i.id for i in api.list_tagged(TAG_RUN, "run-c"))
    assert left[0].startswith("fake:ml/pod/run-c-l-1-0-") and left[1] == "fake:ml/service/run-c-l-1"
    api.delete(left)
    _until(lambda: not kube.alive())
    assert again


def test_run_ids_that_one_label_would_cut_to_the_same_text_find_only_their_own_jobs(kube):
    api = _api()
    queue = "nightly-finetune-llama-3-8b-on-the-support-tickets-of-the-last-quarter"
    first, second = f"{queue}-job-1-3f2a1c", f"{queue}-job-2-3f2a1c"
    api.create(_request(nodes=1, run=first))
    api.create(_request(nodes=1, run=second))
    mine = {i.id.split("/", 1)[1] for i in api.list_tagged(TAG_RUN, first)}
    theirs = {i.id.split("/", 1)[1] for i in api.list_tagged(TAG_RUN, second)}
    assert mine == {f"job/{job_name(first, 'l-1')}", f"service/{job_name(first, 'l-1')}"}
    assert theirs == {f"job/{job_name(second, 'l-1')}", f"service/{job_name(second, 'l-1')}"}


def test_gc_without_cluster_wide_list_falls_back_to_namespaces(kube):
    api = _api()
    api.create(_request(nodes=1, run="run-d"))
    kube.forbidden |= {"list:jobs@*", "list:services@*", "list:pods@*"}
    plain = build_compute(KubernetesProvider.parse_options({}))  # what `planner gc` builds: the current context
    assert {i.name for i in plain.list_tagged(TAG_RUN)} == {"run-d-l-1"}


def test_options_and_a_missing_kubeconfig_are_one_line_errors(tmp_path, monkeypatch):
    with pytest.raises(ProviderError, match=r"\[run.options\] imag: not an option of provider 'kubernetes'"):
        KubernetesProvider.check_options({"imag": "x"})
    with pytest.raises(ProviderError, match="rendezvous"):
        KubernetesProvider.check_options({"rendezvous": "carrier-pigeon"})
    KubernetesProvider.check_options({"image": "nvcr.io/nvidia/pytorch:24.05-py3", "cpu": "8", "memory": "64Gi"})
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ProviderError, match="kubectl config get-contexts"):
        KubernetesProvider.compute(KubernetesOptions(), [CLUSTER])


def test_provision_names_every_pod_in_one_script_and_pod_zero_is_the_rendezvous(kube, tmp_path):
    from runtime.providers import bootstrap

    options = KubernetesProvider.parse_options({"heartbeat_s": 0.5, "install": "danlu"})
    provider = KubernetesProvider(build_compute(options, [CLUSTER]), run_id="run-a", options=options,
                                  state_dir=tmp_path / "state", stage=str(tmp_path / "stage"))
    try:
        nodes = provider.provision(cluster_pool(CLUSTER), nodes=2, launch_id="l-1")
        assert [n.id for n in nodes] == ["run-a-l-1-n0", "run-a-l-1-n1"]
        script = kube.objects[("jobs", "ml", "run-a-l-1")]["spec"]["template"]["spec"]["containers"][0]["command"][2]
        config = bootstrap.config_of(script)
        assert config["index_env"] == "JOB_COMPLETION_INDEX" and config["cloud"] == "kubernetes"
        assert [(n["node"], n["boot"]) for n in config["nodes"]] == [(n.id, n.handle["boot"]) for n in nodes]
        # The headless Service's DNS record for pod 0: <hostname>.<subdomain>.<namespace>.svc.<domain>.
        assert provider.rendezvous_endpoint(nodes, {"address": "10.244.1.7", "port": 29500}) == \
            "run-a-l-1-0.run-a-l-1.ml.svc.cluster.local:29500"
        pod0 = next(p for p in kube.pods("ml") if p["metadata"]["labels"][
            "batch.kubernetes.io/job-completion-index"] == "0")
        assert pod0["spec"]["hostname"] == "run-a-l-1-0" and pod0["spec"]["subdomain"] == "run-a-l-1"
        pod_ip = KubernetesProvider.parse_options({"rendezvous": "pod-ip"})
        provider.options = pod_ip
        assert provider.rendezvous_endpoint(nodes, {"address": "10.244.1.7", "port": 29500}) == "10.244.1.7:29500"
    finally:
        provider.close()  # terminate: the Job, its pods and the Service are gone when it returns
    assert kube.alive() == []


def test_planner_gc_finds_and_deletes_what_a_deleted_run_left(kube, tmp_path, capsys):
    from planner.cli import main

    _api().create(_request(nodes=1, run="gone-run"))
    runs = tmp_path / "runs"
    runs.mkdir()
    assert main(["gc", "--runs-dir", str(runs), "--provider", "kubernetes"]) == 0
    listed = capsys.readouterr().out
    assert "gone-run-l-1" in listed and "run directory gone" in listed and "dry run" in listed
    assert kube.alive()
    assert main(["gc", "--runs-dir", str(runs), "--provider", "kubernetes", "--yes"]) == 0
    _until(lambda: not kube.alive())


def test_pending_pods_give_the_queue_wait_a_quote_uses(kube):
    import datetime as dt

    from kubernetes import client

    from planner.job import parse_job
    from planner.quote import make_quote
    from planner.report import quote_json
    from pricing.catalog import Catalog, Offering
    from pricing.cluster_queue import kube_api_client, pending_wait

    kube.nodes[0].gpus = 0  # the cluster is full: pods asking for GPUs stay Pending
    api = kube_api_client("fake")
    core = client.CoreV1Api(api)
    for name, gpus, selector in (("theirs-0", 2, SELECTOR), ("theirs-1", 1, {}), ("elsewhere", 4, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
                                 ("cpu-only", 0, {})):
        container = {"name": "c", "image": "busybox", **({"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
                                                          if gpus else {})}
        core.create_namespaced_pod("ml", {"metadata": {"name": name}, "spec": {"containers": [container],
                                                                              "nodeSelector": selector}})
    created = min(p.metadata.creation_timestamp for p in core.list_namespaced_pod("ml").items)
    now = created + dt.timedelta(hours=2.5)  # an injected clock: the same answer on any day
    waited = pending_wait(api, "ml", "nvidia.com/gpu", SELECTOR, now=now)
    assert (waited.pending, waited.pending_gpus) == (2, 3)  # not the H100 pod, not the CPU one
    assert waited.hours == pytest.approx(2.5, abs=2 / 3600)
    # A quote with queue_wait_hours = "pending_pods" asks the cluster (real clock: the pods are seconds old).
    job = parse_job({"name": "q", "workload": {"model": "gpt-7b", "tokens": 1e9},
                     "purchase": {"allow": ["on_demand"], "cluster": [{**CLUSTER.model_dump(exclude={"tolerations"}),
                                                                        "queue_wait_hours": "pending_pods"}]}})
    catalog = Catalog.of([Offering("aws", "us-east-1", None, "p4d.24xlarge", "A100", 8, 80, 96, 1152, 40.0)])
    q = make_quote(job, catalog, top=0, frontier_points=0)
    (note,) = quote_json(q)["cluster"]
    assert note["used"] and 0 <= note["queue_wait_hours"] < 0.1
