"""Interruption notices: the code that watches a cloud's metadata service for a reclaim.

Each cloud warns a spot/preemptible instance before taking it away, through a metadata
HTTP service reachable only from the instance itself:

============ ====================================================== ==========================
cloud        request                                                notice
============ ====================================================== ==========================
AWS (IMDSv2) ``PUT /latest/api/token`` (TTL header) -> token, then  2 min; ``action`` is
             ``GET /latest/meta-data/spot/instance-action`` and     terminate, stop or
             ``.../events/recommendations/rebalance`` with the      hibernate; 404 = nothing
             token header                                           scheduled
GCP          ``GET /computeMetadata/v1/instance/preempted``         30 s (spot); ``TRUE`` once
             with ``Metadata-Flavor: Google``; ``?wait_for_change`` preempted
             long-polls
Azure        ``GET /metadata/scheduledevents?api-version=...``      >= 30 s; ``EventType``
             with ``Metadata: true``; ``POST`` ``StartRequests``    ``Preempt`` naming this VM
             acknowledges (expedites) an event
============ ====================================================== ==========================

The watchers here are what runs on a cloud node; the local provider serves each
simulated node a real HTTP server on 127.0.0.1 speaking the same protocols
(:mod:`runtime.providers.metadata_server`), so these classes are the code under test.

A watcher's :meth:`check` makes one round of requests and returns a :class:`Notice` or
``None``; :class:`NoticeWatch` runs one in a thread and reports each notice once::

    watch = NoticeWatch(AwsImdsWatcher("http://127.0.0.1:41234"), interval_s=5, on_notice=handle)
    watch.start()   # ... handle(Notice(cloud="aws", kind="interruption", action="terminate", ...))
    watch.stop()
"""

from __future__ import annotations

import calendar
import email.utils
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pricing.clouds import NOTICE_LEAD_S
from runtime.errors import RuntimeFailure

__all__ = [
    "AWS_BASE_URL",
    "AZURE_API_VERSION",
    "AZURE_BASE_URL",
    "AwsImdsWatcher",
    "AzureScheduledEventsWatcher",
    "GCP_BASE_URL",
    "GcpMetadataWatcher",
    "INTERRUPTION",
    "MetadataUnavailable",
    "NOTICE_LEAD_S",
    "Notice",
    "NoticeWatch",
    "REBALANCE",
    "Watcher",
    "watcher_for",
]

log = logging.getLogger("runtime.providers.notices")

AWS_BASE_URL = "http://169.254.169.254"
GCP_BASE_URL = "http://metadata.google.internal"
AZURE_BASE_URL = "http://169.254.169.254"
AZURE_API_VERSION = "2020-07-01"
AWS_TOKEN_TTL_S = 21600


INTERRUPTION = "interruption"
REBALANCE = "rebalance"


class MetadataUnavailable(RuntimeFailure):
    """The metadata service did not answer, or answered something no cloud would."""


@dataclass(frozen=True, slots=True)
class Notice:
    """One warning from a cloud.

    ``kind`` is :data:`INTERRUPTION` (the instance will be reclaimed) or
    :data:`REBALANCE` (AWS: elevated risk, no reclaim scheduled yet). ``deadline`` is
    when the cloud says the instance goes away (POSIX seconds), when it says so.
    ``event_id`` is Azure's EventId, needed to acknowledge the event.
    """

    cloud: str
    kind: str
    action: str
    deadline: float | None = None
    detail: str = ""
    event_id: str | None = None


class Watcher(Protocol):
    """One cloud's notice protocol: ``check`` makes one round of requests."""

    cloud: str

    def check(self) -> Notice | None: ...


# Metadata services are link-local: a proxy from the environment must never see these requests.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _request(
    url: str, *, method: str = "GET", headers: dict[str, str] | None = None, body: bytes | None = None,
    timeout_s: float,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request; returns (status, headers, body) for any HTTP status."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()) if exc.headers else {}, exc.read()
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise MetadataUnavailable(f"metadata service at {url} did not answer: {exc}") from exc


def _iso_time(text: str) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, TypeError):
        return None


class AwsImdsWatcher:
    """AWS spot interruption and rebalance notices through IMDSv2 (session tokens).

    AWS recommends checking every 5 seconds. A token is fetched once and renewed when it
    nears its TTL or the service answers 401.
    """

    cloud = "aws"

    def __init__(self, base_url: str = AWS_BASE_URL, *, timeout_s: float = 2.0, token_ttl_s: int = AWS_TOKEN_TTL_S):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.token_ttl_s = token_ttl_s
        self._token: str | None = None
        self._token_expires = 0.0

    def _fetch_token(self) -> str:
        status, _, body = _request(
            f"{self.base_url}/latest/api/token", method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(self.token_ttl_s)}, timeout_s=self.timeout_s,
        )
        if status != 200 or not body:
            raise MetadataUnavailable(f"IMDSv2 token request to {self.base_url} answered {status}")
        self._token = body.decode().strip()
        # Renew a minute early so a token never expires between fetch and use.
        self._token_expires = time.monotonic() + max(self.token_ttl_s - 60, self.token_ttl_s / 2)
        return self._token

    def _get(self, path: str) -> tuple[int, bytes]:
        for attempt in range(2):
            token = self._token if self._token and time.monotonic() < self._token_expires else self._fetch_token()
            status, _, body = _request(
                f"{self.base_url}{path}", headers={"X-aws-ec2-metadata-token": token}, timeout_s=self.timeout_s
            )
            if status != 401 or attempt:
                return status, body
            self._token = None  # expired or revoked: fetch a new one and retry once
        return status, body

    def check(self) -> Notice | None:
        status, body = self._get("/latest/meta-data/spot/instance-action")
        if status == 200:
            try:
                data = json.loads(body)
                action = str(data["action"])
            except (ValueError, KeyError, TypeError) as exc:
                raise MetadataUnavailable(f"spot/instance-action returned {body[:200]!r}: {exc}") from exc
            when = str(data.get("time", ""))
            return Notice("aws", INTERRUPTION, action, _iso_time(when), f"spot instance-action {action} at {when}")
        if status != 404:
            raise MetadataUnavailable(f"spot/instance-action answered HTTP {status}")
        status, body = self._get("/latest/meta-data/events/recommendations/rebalance")
        if status == 200:
            try:
                when = str(json.loads(body)["noticeTime"])
            except (ValueError, KeyError, TypeError) as exc:
                raise MetadataUnavailable(f"rebalance recommendation returned {body[:200]!r}: {exc}") from exc
            return Notice("aws", REBALANCE, "rebalance", None, f"rebalance recommendation at {when}")
        if status != 404:
            raise MetadataUnavailable(f"events/recommendations/rebalance answered HTTP {status}")
        return None


class GcpMetadataWatcher:
    """GCP preemption through ``instance/preempted`` (long-polled with ``wait_for_change``)."""

    cloud = "gcp"
    PATH = "/computeMetadata/v1/instance/preempted"

    def __init__(self, base_url: str = GCP_BASE_URL, *, timeout_s: float = 2.0, wait_s: float = 0.0):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.wait_s = wait_s
        self._etag: str | None = None

    def check(self) -> Notice | None:
        """One request; with ``wait_s`` > 0 it long-polls until the value changes (or ``wait_s``)."""
        url = f"{self.base_url}{self.PATH}"
        if self.wait_s > 0 and self._etag is not None:
            query = {"wait_for_change": "true", "last_etag": self._etag, "timeout_sec": str(int(max(1, self.wait_s)))}
            url += "?" + urllib.parse.urlencode(query)
        status, headers, body = _request(
            url, headers={"Metadata-Flavor": "Google"}, timeout_s=self.timeout_s + self.wait_s
        )
        if status != 200 or headers.get("Metadata-Flavor") != "Google":
            raise MetadataUnavailable(f"{self.PATH} answered HTTP {status} without the Metadata-Flavor header")
        self._etag = headers.get("ETag", self._etag)
        value = body.decode().strip().upper()
        if value == "TRUE":
            return Notice("gcp", INTERRUPTION, "preempt", None, "instance/preempted is TRUE")
        if value != "FALSE":
            raise MetadataUnavailable(f"{self.PATH} returned {value[:40]!r}; expected TRUE or FALSE")
        return None


class AzureScheduledEventsWatcher:
    """Azure Scheduled Events: a ``Preempt`` event naming this VM (or any, without a name)."""

    cloud = "azure"
    PATH = "/metadata/scheduledevents"

    def __init__(
        self, base_url: str = AZURE_BASE_URL, *, resource_name: str | None = None, timeout_s: float = 2.0,
        api_version: str = AZURE_API_VERSION,
    ):
        self.base_url = base_url.rstrip("/")
        self.resource_name = resource_name
        self.timeout_s = timeout_s
        self.api_version = api_version
        self.incarnation: int | None = None

    @property
    def _url(self) -> str:
        return f"{self.base_url}{self.PATH}?api-version={urllib.parse.quote(self.api_version)}"

    def check(self) -> Notice | None:
        status, _, body = _request(self._url, headers={"Metadata": "true"}, timeout_s=self.timeout_s)
        if status != 200:
            raise MetadataUnavailable(f"scheduledevents answered HTTP {status}: {body[:200]!r}")
        try:
            document = json.loads(body)
            self.incarnation = int(document["DocumentIncarnation"])
            events = list(document["Events"])
        except (ValueError, KeyError, TypeError) as exc:
            raise MetadataUnavailable(f"scheduledevents returned {body[:200]!r}: {exc}") from exc
        for event in events:
            if event.get("EventType") != "Preempt":
                continue
            if self.resource_name is not None and self.resource_name not in event.get("Resources", ()):
                continue
            not_before = event.get("NotBefore") or ""
            deadline = None
            if not_before:
                parsed = email.utils.parsedate_to_datetime(not_before)
                deadline = parsed.timestamp()
            return Notice(
                "azure", INTERRUPTION, "preempt", deadline,
                f"scheduled event {event.get('EventId')} Preempt, not before {not_before or 'now'}",
                event_id=str(event.get("EventId")),
            )
        return None

    def acknowledge(self, notice: Notice) -> None:
        """Tell Azure the VM is ready: the eviction may proceed at once."""
        if notice.event_id is None:
            return
        body = json.dumps({"StartRequests": [{"EventId": notice.event_id}]}).encode()
        status, _, reply = _request(
            self._url, method="POST", body=body, timeout_s=self.timeout_s,
            headers={"Metadata": "true", "Content-Type": "application/json"},
        )
        if status != 200:
            raise MetadataUnavailable(f"acknowledging event {notice.event_id} answered HTTP {status}: {reply[:200]!r}")


def watcher_for(cloud: str, base_url: str, *, resource_name: str | None = None, wait_s: float = 0.0) -> Watcher:
    """The watcher of ``cloud``'s protocol pointed at ``base_url``.

    Clouds without a notice protocol of their own (e.g. Lambda) are watched through the
    AWS one, the de-facto standard that most metadata emulators speak.
    """
    if cloud == "gcp":
        return GcpMetadataWatcher(base_url, wait_s=wait_s)
    if cloud == "azure":
        return AzureScheduledEventsWatcher(base_url, resource_name=resource_name)
    return AwsImdsWatcher(base_url)


class NoticeWatch:
    """Runs a watcher in a daemon thread and calls ``on_notice`` once per notice kind.

    Transport errors are logged (once per streak) and retried: a metadata service that
    hiccups must not stop a training run.
    """

    def __init__(self, watcher: Watcher, *, interval_s: float, on_notice: Callable[[Notice], None]):
        self.watcher = watcher
        self.interval_s = interval_s
        self.on_notice = on_notice
        self.seen: list[Notice] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"notices-{watcher.cloud}", daemon=True)

    def start(self) -> NoticeWatch:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop watching; waits up to ``timeout_s`` for a request in flight (0: do not wait)."""
        self._stop.set()
        if self._thread.is_alive() and timeout_s > 0:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        reported: set[str] = set()
        failing = False
        while not self._stop.is_set():
            try:
                notice = self.watcher.check()
                failing = False
            except MetadataUnavailable as exc:
                if self._stop.is_set():
                    return  # the service went away because the node is being released
                self.errors += 1
                if not failing:
                    log.warning("%s notice watcher: %s (retrying)", self.watcher.cloud, exc)
                failing = True
                notice = None
            if notice is not None and notice.kind not in reported and not self._stop.is_set():
                reported.add(notice.kind)
                self.seen.append(notice)
                self.on_notice(notice)
            if INTERRUPTION in reported:
                return
            self._stop.wait(self.interval_s)
