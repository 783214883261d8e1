"""A local metadata service that speaks AWS IMDSv2, GCP metadata and Azure Scheduled Events.

The local provider starts one per simulated node, on 127.0.0.1 and a port the kernel
picks, so that the notice watchers of :mod:`runtime.providers.notices` -- the code that runs on
cloud nodes -- are exercised over real HTTP. What each protocol enforces, as the clouds
do (see ``shared/research/cloud-apis.md`` §1.5, §2.3, §3.3):

* AWS: ``PUT /latest/api/token`` needs ``X-aws-ec2-metadata-token-ttl-seconds`` in
  1..21600; every ``GET`` needs a live token (else 401). ``spot/instance-action`` and
  ``events/recommendations/rebalance`` are 404 until announced.
* GCP: every request needs ``Metadata-Flavor: Google`` (else 403) and every answer
  carries it and an ``ETag``; ``?wait_for_change=true&last_etag=E`` blocks until the
  value differs from ``E`` or ``timeout_sec`` passes.
* Azure: ``/metadata/scheduledevents`` needs ``Metadata: true`` and ``api-version``
  (else 400); a ``POST`` of ``{"StartRequests": [{"EventId": ...}]}`` acknowledges
  an event, which the provider takes as leave to evict the node at once.

::

    server = MetadataServer(instance_name="node-1").start()
    server.url                                  # "http://127.0.0.1:40321"
    server.announce_preemption(deadline=time.time() + 120)
    server.stop()
"""

from __future__ import annotations

import email.utils
import json
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "MetadataServer",
]

MAX_TOKEN_TTL_S = 21600
MAX_WAIT_S = 30.0


class _State:
    """What the node's clouds would say about it, guarded by one condition variable."""

    def __init__(self, instance_name: str):
        self.instance_name = instance_name
        self.cond = threading.Condition()
        self.tokens: dict[str, float] = {}
        self.action: str | None = None
        self.deadline: float | None = None
        self.rebalance_at: float | None = None
        self.event_id: str | None = None
        self.incarnation = 1
        self.etag_counter = 1
        self.acknowledged: list[str] = []
        self.requests: list[tuple[str, str]] = []


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib signature)
        return  # the node's request log is kept in state.requests instead

    # -- plumbing -------------------------------------------------------------------------
    def _reply(self, status: int, body: str | bytes = b"", headers: dict[str, str] | None = None) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> tuple[str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        with self.server.state.cond:
            self.server.state.requests.append((self.command, parts.path))
        return parts.path, parse_qs(parts.query)

    def do_PUT(self) -> None:  # noqa: N802 (http.server naming)
        path, _ = self._record()
        if path != "/latest/api/token":
            return self._reply(404, "Not Found")
        raw = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
        try:
            ttl = int(raw)
        except ValueError:
            ttl = 0
        if not 1 <= ttl <= MAX_TOKEN_TTL_S:
            return self._reply(400, "Bad Request: X-aws-ec2-metadata-token-ttl-seconds must be 1..21600")
        token = secrets.token_urlsafe(32)
        with self.server.state.cond:
            self.server.state.tokens[token] = time.monotonic() + ttl
        self._reply(200, token, {"Content-Type": "text/plain", "X-aws-ec2-metadata-token-ttl-seconds": str(ttl)})

    def do_GET(self) -> None:  # noqa: N802
        path, query = self._record()
        if path.startswith("/latest/"):
            return self._aws(path)
        if path.startswith("/computeMetadata/v1/"):
            return self._gcp(path, query)
        if path == "/metadata/scheduledevents":
            return self._azure_get(query)
        self._reply(404, "Not Found")

    def do_POST(self) -> None:  # noqa: N802
        path, query = self._record()
        if path != "/metadata/scheduledevents":
            return self._reply(404, "Not Found")
        if not self._azure_headers_ok(query):
            return None
        length = int(self.headers.get("Content-Length") or 0)
        try:
            ids = [str(r["EventId"]) for r in json.loads(self.rfile.read(length))["StartRequests"]]
        except (ValueError, KeyError, TypeError):
            return self._reply(400, "Bad Request: expected {\"StartRequests\": [{\"EventId\": ...}]}")
        state = self.server.state
        with state.cond:
            known = [i for i in ids if i == state.event_id]
            state.acknowledged.extend(known)
        for event_id in known:
            self.server.on_acknowledge(event_id)
        self._reply(200, "")

    # -- AWS ------------------------------------------------------------------------------
    def _aws(self, path: str) -> None:
        state = self.server.state
        token = self.headers.get("X-aws-ec2-metadata-token", "")
        with state.cond:
            expires = state.tokens.get(token)
            action, deadline, rebalance = state.action, state.deadline, state.rebalance_at
        if expires is None or expires < time.monotonic():
            return self._reply(401, "Unauthorized")
        if path == "/latest/meta-data/spot/instance-action":
            if action is None:
                return self._reply(404, "Not Found")
            body = json.dumps({"action": action, "time": _iso(deadline or time.time())})
            return self._reply(200, body, {"Content-Type": "text/plain"})
        if path == "/latest/meta-data/events/recommendations/rebalance":
            if rebalance is None:
                return self._reply(404, "Not Found")
            return self._reply(200, json.dumps({"noticeTime": _iso(rebalance)}), {"Content-Type": "text/plain"})
        if path == "/latest/meta-data/instance-life-cycle":
            return self._reply(200, "spot", {"Content-Type": "text/plain"})
        self._reply(404, "Not Found")

    # -- GCP ------------------------------------------------------------------------------
    def _gcp(self, path: str, query: dict[str, list[str]]) -> None:
        if self.headers.get("Metadata-Flavor") != "Google":
            return self._reply(403, "Missing Metadata-Flavor:Google header.", {"Content-Type": "text/html"})
        state = self.server.state
        values = {
            "/computeMetadata/v1/instance/preempted": lambda: "TRUE" if state.action else "FALSE",
            "/computeMetadata/v1/instance/scheduling/preemptible": lambda: "TRUE",
            "/computeMetadata/v1/instance/maintenance-event": lambda: "TERMINATE_ON_HOST_MAINTENANCE"
            if state.action else "NONE",
            "/computeMetadata/v1/instance/name": lambda: state.instance_name,
        }
        value_of = values.get(path)
        if value_of is None:
            return self._reply(404, "Not Found", {"Metadata-Flavor": "Google"})
        with state.cond:
            if query.get("wait_for_change", [""])[0].lower() == "true":
                last = query.get("last_etag", [""])[0]
                try:
                    wait = min(float(query.get("timeout_sec", [MAX_WAIT_S])[0]), MAX_WAIT_S)
                except ValueError:
                    wait = MAX_WAIT_S
                until = time.monotonic() + wait
                while str(state.etag_counter) == last and not self.server.closing:
                    left = until - time.monotonic()
                    if left <= 0:
                        break
                    state.cond.wait(min(left, 0.5))
            value, etag = value_of(), str(state.etag_counter)
        self._reply(200, value, {"Metadata-Flavor": "Google", "ETag": etag, "Content-Type": "application/text"})

    # -- Azure ----------------------------------------------------------------------------
    def _azure_headers_ok(self, query: dict[str, list[str]]) -> bool:
        if self.headers.get("Metadata", "").lower() != "true":
            self._reply(400, json.dumps({"error": "Bad request. Required metadata header not specified"}))
            return False
        if not query.get("api-version"):
            self._reply(400, json.dumps({"error": "Bad request. api-version was not specified in the request"}))
            return False
        return True

    def _azure_get(self, query: dict[str, list[str]]) -> None:
        if not self._azure_headers_ok(query):
            return
        state = self.server.state
        with state.cond:
            events = []
            if state.action is not None:
                events.append({
                    "EventId": state.event_id,
                    "EventStatus": "Scheduled",
                    "EventType": "Preempt",
                    "ResourceType": "VirtualMachine",
                    "Resources": [state.instance_name],
                    "NotBefore": email.utils.formatdate(state.deadline or time.time(), usegmt=True),
                    "Description": "Virtual machine is being evicted from Azure Spot.",
                    "EventSource": "Platform",
                    "DurationInSeconds": -1,
                })
            document = {"DocumentIncarnation": state.incarnation, "Events": events}
        self._reply(200, json.dumps(document), {"Content-Type": "application/json"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, state: _State, on_acknowledge: Callable[[str], None]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state
        self.on_acknowledge = on_acknowledge
        self.closing = False


class MetadataServer:
    """One node's metadata service on 127.0.0.1 (see the module docstring).

    ``on_acknowledge(event_id)`` is called when an Azure event is acknowledged.
    """

    def __init__(self, *, instance_name: str, on_acknowledge: Callable[[str], None] | None = None):
        self._state = _State(instance_name)
        self._server = _Server(self._state, on_acknowledge or (lambda event_id: None))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name=f"metadata-{instance_name}",
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def acknowledged(self) -> list[str]:
        with self._state.cond:
            return list(self._state.acknowledged)

    @property
    def requests(self) -> list[tuple[str, str]]:
        """``(method, path)`` of every request served, oldest first."""
        with self._state.cond:
            return list(self._state.requests)

    def start(self) -> MetadataServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._state.cond:
            self._server.closing = True
            self._state.cond.notify_all()
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def announce_preemption(self, *, deadline: float, action: str = "terminate") -> None:
        """From now on every protocol says this node is reclaimed at ``deadline`` (POSIX s).

        AWS also raises its rebalance recommendation, which the docs say may come with
        the notice rather than before it.
        """
        with self._state.cond:
            if self._state.action is not None:
                return
            self._state.action = action
            self._state.deadline = deadline
            self._state.rebalance_at = self._state.rebalance_at or time.time()
            self._state.event_id = str(uuid.uuid4()).upper()
            self._state.incarnation += 1
            self._state.etag_counter += 1
            self._state.cond.notify_all()

    def announce_rebalance(self) -> None:
        """AWS only: an elevated-risk signal without a scheduled reclaim."""
        with self._state.cond:
            if self._state.rebalance_at is None:
                self._state.rebalance_at = time.time()
