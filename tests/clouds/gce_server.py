"""A local Compute Engine API (v1 REST) on 127.0.0.1 for google-cloud-compute's REST transport.

Only what danlu calls, in the shapes the real API answers. Where each shape comes from:

* URIs and verbs: google-cloud-compute's own REST transport
  (``google/cloud/compute_v1/services/instances/transports/rest_base.py`` and
  ``zone_operations/transports/rest_base.py``, ``http_options``): ``POST|GET
  /compute/v1/projects/{p}/zones/{z}/instances``, ``GET|DELETE .../instances/{name}``,
  ``GET /compute/v1/projects/{p}/aggregated/instances``, ``GET .../operations/{op}`` and
  ``POST .../operations/{op}/wait``.
* Instance, Operation, InstanceList, InstanceAggregatedList fields: the compute v1 REST
  reference (cloud.google.com/compute/docs/reference/rest/v1/instances,
  .../zoneOperations) as generated into googleapis/google-api-ruby-client
  ``generated/google/apis/compute_v1/classes.rb`` and haxegrest/grest
  ``compute/v1/types/InstanceAggregatedList.hx`` (``items`` keyed ``zones/<zone>``, a
  scope without instances carries ``warning`` ``NO_RESULTS_ON_PAGE``).
* A capacity failure inside the operation (HTTP 200 on insert, then ``status: DONE`` with
  ``error.errors[].code``/``message``/``errorDetails`` and the instance never created):
  recorded operations in CCExtractor/sample-platform#901 (``ZONE_RESOURCE_POOL_EXHAUSTED``),
  jenkinsci/google-compute-engine-plugin#555 (``..._WITH_DETAILS``), kubernetes/k8s.io#9834
  (the ``errorDetails`` list: help, localizedMessage, errorInfo), googleapis/nodejs-compute#377
  (the instance 404s afterwards); ``httpErrorStatusCode`` 503 for stock-outs per
  scylladb/scylla-cluster-tests#12477 ("503 SERVICE UNAVAILABLE ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS").
* ``QUOTA_EXCEEDED``: message ``Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally.``
  (fastai/course-v3#165), ``errorDetails[].quotaInfo`` (Compute v1 ``ErrorDetails.QuotaInfo``:
  metricName, limitName, limit), HTTP 403.
* Synchronous HTTP errors: the Google JSON error body ``{"error": {"code", "message",
  "errors": [{"domain", "reason", "message"}]}}`` as recorded for compute in
  jenkinsci/google-compute-engine-plugin#463 (404 ``notFound``, domain ``global``); 409
  ``alreadyExists`` and 400 ``invalid`` likewise.

Hooks for tests: :meth:`FakeGce.fail_next_insert` (a capacity/quota error on the next
insert, in the operation or as the HTTP status), :meth:`FakeGce.preempt` (a spot
preemption: the VM goes TERMINATED with ``lastStopTimestamp``, a
``compute.instances.preempted`` operation is recorded, and a DELETE-action VM then
disappears), :meth:`FakeGce.running` (what the data plane runs: name, labels,
startup-script).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

BASE = "https://www.googleapis.com/compute/v1"
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
STATUS_TEXT = {400: "BAD REQUEST", 403: "FORBIDDEN", 404: "NOT FOUND", 409: "CONFLICT", 429: "TOO MANY REQUESTS",
               503: "SERVICE UNAVAILABLE"}


def _now() -> str:
    # RFC 3339 with the offset, as GCE writes timestamps ("2024-06-26T11:42:22.006-07:00").
    return time.strftime("%Y-%m-%dT%H:%M:%S.000-00:00", time.gmtime())


def _numeric_id() -> str:
    return str(uuid.uuid4().int % (10**19))


def capacity_error(code: str, *, project: str, zone: str, machine: str) -> tuple[int, dict[str, Any]]:
    """(httpErrorStatusCode, one ``error.errors[]`` item) as GCE writes them for ``code``."""
    if code.startswith("ZONE_RESOURCE_POOL_EXHAUSTED"):
        message = (f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available to "
                   "fulfill the request.  Try a different zone, or try again later.")
        details = [
            {"help": {"links": [{"description": "Troubleshooting documentation",
                                  "url": "https://cloud.google.com/compute/docs/resource-error"}]}},
            {"localizedMessage": {"locale": "en-US", "message": f"A {machine} VM instance is currently unavailable "
                                  f"in the {zone} zone."}},
            {"errorInfo": {"domain": "compute.googleapis.com", "reason": "resource_availability",
                           "metadatas": {"vmType": machine, "zone": zone, "zonesAvailable": "", "attachment": ""}}},
        ]
        return 503, {"code": code, "message": message, "errorDetails": details}
    if code == "QUOTA_EXCEEDED":
        message = "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally."
        details = [{"quotaInfo": {"metricName": "compute.googleapis.com/gpus_all_regions",
                                  "limitName": "GPUS-ALL-REGIONS-per-project", "limit": 0}}]
        return 403, {"code": code, "message": message, "errorDetails": details}
    if code == "RESOURCE_EXHAUSTED":
        return 429, {"code": code, "message": "Resource has been exhausted (e.g. check quota)."}
    return 400, {"code": code, "message": f"injected error {code}"}


@dataclass
class _Injected:
    code: str
    http: bool
    skip: int = 0


@dataclass
class _Vm:
    zone: str
    body: dict[str, Any]
    created: float = field(default_factory=time.monotonic)
    deleting_since: float | None = None
    preempted: bool = False


class FakeGce:
    """The server and its state; ``boot_s``/``stop_s`` are how long a VM spends PROVISIONING+STAGING/STOPPING."""

    def __init__(self, project: str = "danlu-test", *, boot_s: float = 0.3, stop_s: float = 0.3,
                 operation_s: float = 0.2):
        self.project = project
        self.boot_s, self.stop_s, self.operation_s = boot_s, stop_s, operation_s
        self.lock = threading.Condition()
        self.vms: dict[tuple[str, str], _Vm] = {}
        self.operations: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self.injected: list[_Injected] = []
        self.calls: list[tuple[str, str]] = []
        self.ever: list[str] = []  # every instance id ever created ("zone/name")
        self._ip = 1
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="fake-gce", daemon=True)

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeGce:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- test hooks -----------------------------------------------------------------------
    def fail_next_insert(self, code: str, *, http: bool = False, skip: int = 0) -> None:
        """The insert after ``skip`` more successful ones fails with ``code`` (in its operation, or as HTTP)."""
        with self.lock:
            self.injected.append(_Injected(code, http, skip))

    def preempt(self, instance_id: str) -> None:
        """GCE reclaims the spot VM ``zone/name``: TERMINATED now, gone soon if its action is DELETE."""
        zone, name = instance_id.split("/", 1)
        with self.lock:
            vm = self.vms.get((zone, name))
            if vm is None:
                return
            self._refresh(vm)
            vm.preempted = True
            vm.body["status"] = "TERMINATED"
            vm.body["lastStopTimestamp"] = _now()
            self._operation(zone, name, "compute.instances.preempted", done=True, user="system")
            if vm.body.get("scheduling", {}).get("instanceTerminationAction", "STOP") == "DELETE":
                vm.deleting_since = time.monotonic() - self.stop_s + 0.5  # gone half a second later
            self.lock.notify_all()

    def running(self) -> list[dict[str, Any]]:
        """Instances whose status is RUNNING: id, name, labels, startup-script (the data plane's view)."""
        with self.lock:
            found = []
            for (zone, name), vm in list(self.vms.items()):
                self._refresh(vm)
                if (zone, name) in self.vms and vm.body["status"] == "RUNNING":
                    items = vm.body.get("metadata", {}).get("items", [])
                    script = next((i.get("value", "") for i in items if i.get("key") == "startup-script"), "")
                    found.append({"id": f"{zone}/{name}", "name": name, "zone": zone,
                                  "labels": dict(vm.body.get("labels", {})), "startup_script": script})
            return found

    def status(self, instance_id: str) -> str | None:
        """The VM's status now, or None when it does not exist (any more)."""
        zone, name = instance_id.split("/", 1)
        with self.lock:
            vm = self.vms.get((zone, name))
            if vm is None:
                return None
            self._refresh(vm)
            return vm.body["status"] if (zone, name) in self.vms else None

    def alive(self) -> list[str]:
        """Ids of every VM that still exists (any status)."""
        with self.lock:
            for vm in list(self.vms.values()):
                self._refresh(vm)
            return [f"{z}/{n}" for z, n in self.vms]

    def instance(self, instance_id: str) -> dict[str, Any] | None:
        zone, name = instance_id.split("/", 1)
        with self.lock:
            vm = self.vms.get((zone, name))
            return json.loads(json.dumps(vm.body)) if vm else None

    # -- state machine (called with the lock held) ----------------------------------------
    def _refresh(self, vm: _Vm) -> None:
        now = time.monotonic()
        key = (vm.zone, vm.body["name"])
        if vm.deleting_since is not None:
            if now - vm.deleting_since >= self.stop_s:
                self.vms.pop(key, None)
            elif not vm.preempted:
                vm.body["status"] = "STOPPING"
            return
        if vm.preempted:
            return
        age = now - vm.created
        status = "PROVISIONING" if age < self.boot_s / 2 else "STAGING" if age < self.boot_s else "RUNNING"
        if status == "RUNNING" and vm.body["status"] != "RUNNING":
            vm.body["lastStartTimestamp"] = _now()
        vm.body["status"] = status

    def _operation(self, zone: str, target: str, kind: str, *, done: bool = False, user: str = "danlu@test",
                   error: tuple[int, dict[str, Any]] | None = None) -> dict[str, Any]:
        name = f"operation-{int(time.time() * 1000)}-{uuid.uuid4().hex[:13]}-{uuid.uuid4().hex[:8]}"
        zone_url = f"{BASE}/projects/{self.project}/zones/{zone}"
        op: dict[str, Any] = {
            "kind": "compute#operation", "id": _numeric_id(), "name": name, "zone": zone_url,
            "operationType": kind, "targetLink": f"{zone_url}/instances/{target}", "targetId": _numeric_id(),
            "status": "DONE" if done else "RUNNING", "user": user, "progress": 100 if done else 0,
            "insertTime": _now(), "startTime": _now(), "selfLink": f"{zone_url}/operations/{name}",
        }
        if done:
            op["endTime"] = _now()
        if error is not None:
            op["_error"] = error
        self.operations[(zone, name)] = (time.monotonic(), op)
        return op

    def _operation_now(self, zone: str, name: str) -> dict[str, Any] | None:
        entry = self.operations.get((zone, name))
        if entry is None:
            return None
        started, op = entry
        if op["status"] != "DONE" and time.monotonic() - started >= self.operation_s:
            op.update(status="DONE", progress=100, endTime=_now())
            error = op.pop("_error", None)
            if error is not None:
                status, item = error
                op["error"] = {"errors": [item]}
                op["httpErrorStatusCode"] = status
                op["httpErrorMessage"] = STATUS_TEXT.get(status, "ERROR")
        public = {k: v for k, v in op.items() if not k.startswith("_")}
        return json.loads(json.dumps(public))

    # -- API ------------------------------------------------------------------------------
    def insert(self, zone: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = str(body.get("name", ""))
        if not NAME_RE.match(name):
            return _http_error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'. Must be a match "
                               "of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?|[1-9][0-9]{0,19})'")
        for key, value in (body.get("labels") or {}).items():
            if not LABEL_KEY_RE.match(key) or not LABEL_VALUE_RE.match(str(value)):
                return _http_error(400, "invalid", f"Invalid value for field 'resource.labels': '{key}={value}'")
        if not body.get("machineType"):
            return _http_error(400, "required", "Required field 'resource.machineType' not specified")
        scheduling = body.get("scheduling") or {}
        if scheduling.get("provisioningModel") == "SPOT" and scheduling.get("automaticRestart", True):
            return _http_error(400, "invalid", "Invalid value for field 'resource.scheduling.automaticRestart': "
                               "'true'. Spot VMs do not support automatic restart.")
        if body.get("guestAccelerators") and scheduling.get("onHostMaintenance", "MIGRATE") != "TERMINATE":
            return _http_error(400, "invalid", "Invalid value for field 'resource.scheduling.onHostMaintenance': "
                               "'MIGRATE'. Instances with guest accelerators do not support live migration.")
        machine = body["machineType"].rsplit("/", 1)[-1]
        with self.lock:
            injected = self._take_injection()
            if injected is not None:
                status, item = capacity_error(injected.code, project=self.project, zone=zone, machine=machine)
                if injected.http:
                    return _http_error(status, item["code"], item["message"])
                return 200, self._public(self._operation(zone, name, "insert", error=(status, item)))
            if (zone, name) in self.vms:
                return _http_error(409, "alreadyExists",
                                   f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' already exists")
            zone_url = f"{BASE}/projects/{self.project}/zones/{zone}"
            vm = dict(body)
            self._ip += 1
            interfaces = [dict(nic) for nic in body.get("networkInterfaces") or [{}]]
            for i, nic in enumerate(interfaces):
                nic.update(kind="compute#networkInterface", name=f"nic{i}",
                           networkIP=f"10.128.0.{self._ip}", fingerprint=uuid.uuid4().hex[:12])
            vm.update(
                kind="compute#instance", id=_numeric_id(), creationTimestamp=_now(), status="PROVISIONING",
                zone=zone_url, selfLink=f"{zone_url}/instances/{name}",
                machineType=f"{zone_url}/machineTypes/{machine}", networkInterfaces=interfaces,
                labelFingerprint=uuid.uuid4().hex[:12], fingerprint=uuid.uuid4().hex[:12],
                cpuPlatform="Intel Cascade Lake", startRestricted=False, deletionProtection=False,
            )
            vm.setdefault("metadata", {}).update(kind="compute#metadata", fingerprint=uuid.uuid4().hex[:12])
            self.vms[(zone, name)] = _Vm(zone, vm)
            self.ever.append(f"{zone}/{name}")
            return 200, self._public(self._operation(zone, name, "insert"))

    def _take_injection(self) -> _Injected | None:
        if not self.injected:
            return None
        head = self.injected[0]
        if head.skip > 0:
            head.skip -= 1
            return None
        return self.injected.pop(0)

    @staticmethod
    def _public(op: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in op.items() if not k.startswith("_")}

    def get(self, zone: str, name: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            vm = self.vms.get((zone, name))
            if vm is not None:
                self._refresh(vm)
            if (zone, name) not in self.vms:
                return _not_found(f"projects/{self.project}/zones/{zone}/instances/{name}")
            return 200, json.loads(json.dumps(vm.body))

    def delete(self, zone: str, name: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            vm = self.vms.get((zone, name))
            if vm is not None:
                self._refresh(vm)
            if (zone, name) not in self.vms:
                return _not_found(f"projects/{self.project}/zones/{zone}/instances/{name}")
            if vm.deleting_since is None:
                vm.deleting_since = time.monotonic()
                if not vm.preempted:
                    vm.body["status"] = "STOPPING"
            self.lock.notify_all()
            return 200, self._public(self._operation(zone, name, "delete"))

    def list_zone(self, zone: str, flt: str) -> tuple[int, dict[str, Any]]:
        items = [body for z, body in self._matching(flt) if z == zone]
        result: dict[str, Any] = {"kind": "compute#instanceList", "id": f"projects/{self.project}/zones/{zone}/instances",
                                  "selfLink": f"{BASE}/projects/{self.project}/zones/{zone}/instances"}
        if items:
            result["items"] = items
        return 200, result

    def aggregated(self, flt: str) -> tuple[int, dict[str, Any]]:
        scopes: dict[str, Any] = {}
        for zone, body in self._matching(flt):
            scopes.setdefault(f"zones/{zone}", {"instances": []})["instances"].append(body)
        for zone in ("us-central1-a", "us-east1-b"):  # scopes without instances look like this
            scopes.setdefault(f"zones/{zone}", {"warning": {
                "code": "NO_RESULTS_ON_PAGE", "message": f"There are no results for scope 'zones/{zone}' on this page.",
                "data": [{"key": "scope", "value": f"zones/{zone}"}]}})
        return 200, {"kind": "compute#instanceAggregatedList", "id": f"projects/{self.project}/aggregated/instances",
                     "items": scopes, "selfLink": f"{BASE}/projects/{self.project}/aggregated/instances"}

    def _matching(self, flt: str) -> list[tuple[str, dict[str, Any]]]:
        terms = _parse_filter(flt)
        with self.lock:
            found = []
            for (zone, name), vm in list(self.vms.items()):
                self._refresh(vm)
                if (zone, name) in self.vms and all(_term_matches(t, vm.body) for t in terms):
                    found.append((zone, json.loads(json.dumps(vm.body))))
            return found

    def operation(self, zone: str, name: str, *, wait: bool) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + 120.0  # zoneOperations.wait returns after at most ~2 minutes
        with self.lock:
            while True:
                op = self._operation_now(zone, name)
                if op is None:
                    return _not_found(f"projects/{self.project}/zones/{zone}/operations/{name}")
                if not wait or op["status"] == "DONE" or time.monotonic() > deadline:
                    return 200, op
                self.lock.wait(0.05)


def _http_error(status: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    domain = "usageLimits" if reason in ("QUOTA_EXCEEDED", "quotaExceeded", "RESOURCE_EXHAUSTED") else "global"
    return status, {"error": {"code": status, "message": message,
                              "errors": [{"message": message, "domain": domain, "reason": reason}]}}


def _not_found(resource: str) -> tuple[int, dict[str, Any]]:
    return _http_error(404, "notFound", f"The resource '{resource}' was not found")


_TERM = re.compile(r'\(?\s*([\w.-]+)\s*(=|!=|:|eq|ne)\s*("[^"]*"|[^\s)]+)\s*\)?')


def _parse_filter(flt: str) -> list[tuple[str, str, str]]:
    """``labels.k = "v"``, ``labels.k:*``, ``status != TERMINATED``, joined by AND or spaces."""
    terms = []
    for part in re.split(r"\s+AND\s+", flt.strip()) if flt.strip() else []:
        for match in _TERM.finditer(part):
            field_, op, value = match.groups()
            terms.append((field_, op, value.strip('"')))
    return terms


def _term_matches(term: tuple[str, str, str], body: dict[str, Any]) -> bool:
    field_, op, value = term
    if field_.startswith("labels."):
        actual = (body.get("labels") or {}).get(field_[len("labels."):])
    else:
        actual = body.get(field_)
    if op == ":":
        return actual is not None if value == "*" else actual is not None and value in str(actual)
    if op in ("=", "eq"):
        return actual is not None and str(actual) == value
    return actual is None or str(actual) != value


_ROUTES = [
    ("POST", re.compile(r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/instances$"), "insert"),
    ("GET", re.compile(r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/instances$"), "list"),
    ("GET", re.compile(r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/instances/([^/]+)$"), "get"),
    ("DELETE", re.compile(r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/instances/([^/]+)$"), "delete"),
    ("GET", re.compile(r"^/compute/v1/projects/([^/]+)/aggregated/instances$"), "aggregated"),
    ("GET", re.compile(r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/operations/([^/]+)$"), "op_get"),
    ("POST", re.compile(r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/operations/([^/]+)/wait$"), "op_wait"),
]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self) -> None:
        gce = self.server.gce
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        with gce.lock:
            gce.calls.append((self.command, parts.path))
        for method, pattern, action in _ROUTES:
            match = pattern.match(parts.path)
            if method != self.command or not match:
                continue
            project, *rest = (unquote(g) for g in match.groups())
            if project != gce.project:
                return self._reply(*_http_error(404, "notFound", f"The resource 'projects/{project}' was not found"))
            flt = query.get("filter", [""])[0]
            if action == "insert":
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    return self._reply(*_http_error(400, "parseError", "Parse Error"))
                return self._reply(*gce.insert(rest[0], body))
            if action == "list":
                return self._reply(*gce.list_zone(rest[0], flt))
            if action == "get":
                return self._reply(*gce.get(rest[0], rest[1]))
            if action == "delete":
                return self._reply(*gce.delete(rest[0], rest[1]))
            if action == "aggregated":
                return self._reply(*gce.aggregated(flt))
            return self._reply(*gce.operation(rest[0], rest[1], wait=action == "op_wait"))
        self._reply(*_http_error(404, "notFound", f"no route {self.command} {parts.path}"))

    do_GET = do_POST = do_DELETE = _dispatch


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, gce: FakeGce):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.gce = gce
