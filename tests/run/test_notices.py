"""The notice watchers against the local metadata server, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from runtime.providers import notices
from runtime.providers.metadata_server import MetadataServer
from runtime.providers.notices import (
    INTERRUPTION,
    REBALANCE,
    AwsImdsWatcher,
    AzureScheduledEventsWatcher,
    GcpMetadataWatcher,
    MetadataUnavailable,
    NoticeWatch,
)

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def server() -> Iterator[MetadataServer]:
    acks: list[str] = []
    srv = MetadataServer(instance_name="node-1", on_acknowledge=acks.append).start()
    srv.acks = acks  # type: ignore[attr-defined]
    try:
        yield srv
    finally:
        srv.stop()


def _status(url: str, *, method: str = "GET", headers: dict[str, str] | None = None, body: bytes | None = None) -> int:
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=body)
    try:
        with _DIRECT.open(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_aws_imdsv2_requires_a_token_and_reports_action_with_time(server: MetadataServer) -> None:
    assert _status(f"{server.url}/latest/meta-data/spot/instance-action") == 401
    assert _status(f"{server.url}/latest/api/token", method="PUT") == 400
    assert _status(f"{server.url}/latest/api/token", method="PUT",
                   headers={"X-aws-ec2-metadata-token-ttl-seconds": "99999"}) == 400
    watcher = AwsImdsWatcher(server.url)
    assert watcher.check() is None
    deadline = time.time() + 120
    server.announce_preemption(deadline=deadline, action="stop")
    notice = watcher.check()
    assert notice is not None and notice.cloud == "aws" and notice.kind == INTERRUPTION
    assert notice.action == "stop"
    assert notice.deadline == pytest.approx(int(deadline), abs=1)
    assert server.requests.count(("PUT", "/latest/api/token")) == 3  # the two refused and one token


def test_aws_token_is_renewed_after_a_401(server: MetadataServer) -> None:
    watcher = AwsImdsWatcher(server.url)
    watcher.check()
    watcher._token = "revoked"  # what an expired token looks like to the service
    assert watcher.check() is None
    assert server.requests.count(("PUT", "/latest/api/token")) == 2


def test_aws_rebalance_recommendation_comes_before_any_interruption(server: MetadataServer) -> None:
    watcher = AwsImdsWatcher(server.url)
    server.announce_rebalance()
    notice = watcher.check()
    assert notice is not None and notice.kind == REBALANCE and notice.deadline is None


def test_gcp_requires_the_flavor_header(server: MetadataServer) -> None:
    assert _status(f"{server.url}/computeMetadata/v1/instance/preempted") == 403
    assert GcpMetadataWatcher(server.url).check() is None
    server.announce_preemption(deadline=time.time() + 30)
    notice = GcpMetadataWatcher(server.url).check()
    assert notice is not None and (notice.cloud, notice.kind, notice.action) == ("gcp", INTERRUPTION, "preempt")


def test_gcp_wait_for_change_returns_as_soon_as_the_value_changes(server: MetadataServer) -> None:
    watcher = GcpMetadataWatcher(server.url, wait_s=20)
    assert watcher.check() is None  # the first request learns the ETag
    threading.Timer(0.3, lambda: server.announce_preemption(deadline=time.time() + 30)).start()
    started = time.monotonic()
    notice = watcher.check()  # long-polls
    assert notice is not None and notice.kind == INTERRUPTION
    assert 0.2 < time.monotonic() - started < 5


def test_gcp_wait_for_change_times_out_with_the_current_value(server: MetadataServer) -> None:
    watcher = GcpMetadataWatcher(server.url, wait_s=1)
    watcher.check()
    started = time.monotonic()
    assert watcher.check() is None
    assert 0.8 < time.monotonic() - started < 4


def test_azure_needs_header_and_api_version_and_filters_by_resource(server: MetadataServer) -> None:
    url = f"{server.url}/metadata/scheduledevents"
    assert _status(f"{url}?api-version=2020-07-01") == 400
    assert _status(url, headers={"Metadata": "true"}) == 400
    assert AzureScheduledEventsWatcher(server.url, resource_name="node-1").check() is None
    deadline = time.time() + 30
    server.announce_preemption(deadline=deadline)
    assert AzureScheduledEventsWatcher(server.url, resource_name="another-vm").check() is None
    watcher = AzureScheduledEventsWatcher(server.url, resource_name="node-1")
    notice = watcher.check()
    assert notice is not None and notice.cloud == "azure" and notice.event_id
    assert notice.deadline == pytest.approx(int(deadline), abs=1)
    assert watcher.incarnation == 2


def test_azure_acknowledge_posts_start_requests(server: MetadataServer) -> None:
    server.announce_preemption(deadline=time.time() + 30)
    watcher = AzureScheduledEventsWatcher(server.url, resource_name="node-1")
    notice = watcher.check()
    assert notice is not None
    watcher.acknowledge(notice)
    assert server.acknowledged == [notice.event_id]
    assert server.acks == [notice.event_id]  # type: ignore[attr-defined]
    body = json.dumps({"StartRequests": [{"Event": "x"}]}).encode()
    assert _status(f"{server.url}/metadata/scheduledevents?api-version=2020-07-01", method="POST",
                   headers={"Metadata": "true"}, body=body) == 400


def test_unreachable_service_raises_a_specific_error() -> None:
    srv = MetadataServer(instance_name="gone").start()
    url = srv.url
    srv.stop()
    with pytest.raises(MetadataUnavailable, match="did not answer"):
        AwsImdsWatcher(url, timeout_s=1).check()


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_notice_watch_reports_each_kind_once_then_stops(server: MetadataServer, cloud: str) -> None:
    seen: list[notices.Notice] = []
    got = threading.Event()

    def on_notice(notice: notices.Notice) -> None:
        seen.append(notice)
        if notice.kind == INTERRUPTION:
            got.set()

    watcher = notices.watcher_for(cloud, server.url, resource_name="node-1", wait_s=5)
    watch = NoticeWatch(watcher, interval_s=0.05, on_notice=on_notice).start()
    try:
        time.sleep(0.2)
        server.announce_preemption(deadline=time.time() + 30)
        assert got.wait(10)
        time.sleep(0.2)
    finally:
        watch.stop()
    assert [n.kind for n in seen if n.kind == INTERRUPTION] == [INTERRUPTION]
    assert {n.cloud for n in seen} == {cloud}
