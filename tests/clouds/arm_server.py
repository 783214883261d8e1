"""A local Azure Resource Manager for the Azure SDK: virtualMachines over HTTPS on 127.0.0.1.

What it answers, in the shapes of the real API:

* ``PUT/GET/DELETE /subscriptions/{s}/resourceGroups/{g}/providers/Microsoft.Compute/virtualMachines/{vm}``,
  ``GET .../virtualMachines/{vm}/instanceView``, ``GET .../providers/Microsoft.Compute/virtualMachines``
  (``list_all``, ``statusOnly=true``) and the per-group list. Bodies follow the
  azure-rest-api-specs examples of Microsoft.Compute (ComputeRP/stable/2024-07-01/examples/
  virtualMachineExamples/VirtualMachine_Create_WithNetworkInterfaceConfigurationDnsSettings.json:
  201 with ``provisioningState: Creating``, NICs created from networkInterfaceConfigurations;
  VirtualMachine_Get_InstanceView.json: ``statuses`` ``ProvisioningState/succeeded`` +
  ``PowerState/running``; VirtualMachine_ListAll_MinimumSet_Gen.json: ``{"value": [...]}``).
* Long-running operations as ARM runs them (https://learn.microsoft.com/azure/
  azure-resource-manager/management/async-operations): 201 (PUT) / 202 (DELETE) with an
  ``Azure-AsyncOperation`` header (and ``Location`` on DELETE) naming
  ``/subscriptions/{s}/providers/Microsoft.Compute/locations/{loc}/operations/{id}``, whose
  GET says ``{"status": "InProgress" | "Succeeded" | "Failed", "error": {...}}``; the
  ``Location`` URL answers 202 until done, then 200/204. A DELETE of a VM that is not
  there is 204.
* Errors as ``{"error": {"code", "message"}}`` (https://learn.microsoft.com/azure/
  azure-resource-manager/troubleshooting/error-codes): ``SkuNotAvailable``,
  ``OperationNotAllowed`` (quota, https://learn.microsoft.com/azure/azure-resource-manager/
  troubleshooting/error-resource-quota) and ``QuotaExceeded`` on the PUT itself (409);
  ``AllocationFailed``, ``ZonalAllocationFailed`` and ``OverconstrainedAllocationRequest``
  in the operation, leaving the VM behind in ``provisioningState: Failed`` as Azure does;
  ``ResourceNotFound`` (404).
* Tokens: a managed-identity endpoint in the App Service shape (``GET ...?api-version=
  2019-08-01&resource=...`` with ``X-IDENTITY-HEADER``, answer ``access_token`` /
  ``expires_on`` / ``token_type``; https://learn.microsoft.com/azure/app-service/
  overview-managed-identity#rest-endpoint-reference), which ``DefaultAzureCredential``
  finds through ``IDENTITY_ENDPOINT`` / ``IDENTITY_HEADER``; every ARM call needs one of its
  bearer tokens (else 401 ``AuthenticationFailed``).

TLS: azure-core sends bearer tokens over https only, so the server has a self-signed
certificate for 127.0.0.1 (made with ``cryptography``); clients trust it through
``REQUESTS_CA_BUNDLE`` (:meth:`ArmServer.environment`).

Hooks for tests: :meth:`fail_next_create` (the next VM PUT fails with a capacity/quota
code), :meth:`evict` (a spot eviction with policy Delete: the VM goes ``Deleting`` without
anyone asking, then is gone with its NIC and disk), :meth:`vms` / :meth:`running`.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import secrets
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["ARM_ERRORS", "ArmServer", "make_certificate"]

# Messages as ARM words them (error-codes and allocation-failure troubleshooting pages above).
ARM_ERRORS: dict[str, tuple[int | None, str]] = {
    # code: (HTTP status of the PUT -- None: the PUT is accepted and the operation fails, message)
    "SkuNotAvailable": (409, ("The requested VM size for resource 'Following SKUs have failed for Capacity "
                        "Restrictions: {size}' is currently not available in location '{location}'. Please try "
                        "another size or deploy to a different location or different zone. See "
                        "https://aka.ms/azureskunotavailable for details.")),
    "OperationNotAllowed": (409, ("Operation could not be completed as it results in exceeding approved "
                            "{size} Family Cores quota. Additional details - Deployment Model: Resource Manager, "
                            "Location: {location}, Current Limit: 0, Current Usage: 0, Additional Required: 6, "
                            "(Minimum) New Limit Required: 6.")),
    "QuotaExceeded": (409, ("Operation could not be completed as it results in exceeding approved "
                      "LowPriorityCores quota. Additional details - Deployment Model: Resource Manager, Location: "
                      "{location}, Current Limit: 0, Current Usage: 0, Additional Required: 6.")),
    "AllocationFailed": (None, ("Allocation failed. We do not have sufficient capacity for the requested VM size in "
                         "this region. Read more about improving likelihood of allocation success at "
                         "http://aka.ms/allocation-guidance")),
    "ZonalAllocationFailed": (None, ("Allocation failed. We do not have sufficient capacity for the requested VM "
                              "size in this zone. Read more about improving likelihood of allocation success at "
                              "http://aka.ms/allocation-guidance")),
    "OverconstrainedAllocationRequest": (None, ("Allocation failed. VM(s) with the following constraints cannot be "
                                         "allocated, because the condition is too restrictive. Please remove some "
                                         "constraints and try again. Constraints applied are: Priority (Spot), "
                                         "VM Size ({size}).")),
}

_VM_PATH = "/providers/microsoft.compute/virtualmachines"


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 / localhost: (cert.pem, key.pem), the key 0600."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"),
        ]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "arm-cert.pem", directory / "arm-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.touch(mode=0o600)
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ))
    return cert_path, key_path


def _now_iso(ts: float | None = None) -> str:
    return datetime.datetime.fromtimestamp(ts or time.time(), datetime.UTC).isoformat()


@dataclass
class _Vm:
    sub: str
    group: str
    name: str
    body: dict[str, Any]
    ready_at: float
    custom_data: str
    state: str = "Creating"  # Creating | Succeeded | Failed | Deleting
    failure: dict[str, str] | None = None
    gone_at: float | None = None
    evicted: bool = False
    created: float = field(default_factory=time.time)

    @property
    def id(self) -> str:
        return f"/subscriptions/{self.sub}/resourceGroups/{self.group}/providers/Microsoft.Compute/virtualMachines/{self.name}"


@dataclass
class _Op:
    id: str
    location: str
    done_at: float
    vm: _Vm
    kind: str  # create | delete
    error: dict[str, str] | None = None
    started: float = field(default_factory=time.time)


class _State:
    def __init__(self, op_s: float):
        self.lock = threading.RLock()
        self.op_s = op_s
        self.vms: dict[tuple[str, str, str], _Vm] = {}
        self.ops: dict[str, _Op] = {}
        self.fail_next: list[list[Any]] = []  # [code, message, creates to let through first]
        self.tokens: set[str] = set()
        self.identity_header = secrets.token_hex(16)
        self.requests: list[tuple[str, str]] = []
        self.deleted: list[str] = []  # ids of VMs gone (deleted or evicted), oldest first
        self.evictions: list[str] = []

    def tick(self) -> None:
        """Advance every VM whose time has come (called under the lock at each request)."""
        now = time.time()
        for key, vm in list(self.vms.items()):
            if vm.state == "Creating" and now >= vm.ready_at:
                vm.state = "Failed" if vm.failure else "Succeeded"
            if vm.gone_at is not None and now >= vm.gone_at:
                del self.vms[key]
                self.deleted.append(vm.id)


def _instance_view(vm: _Vm) -> dict[str, Any]:
    # Status codes and levels as in VirtualMachine_Get_InstanceView.json (see the module docstring).
    statuses: list[dict[str, Any]] = []
    if vm.state == "Failed" and vm.failure:
        statuses.append({"code": f"ProvisioningState/failed/{vm.failure['code']}", "level": "Error",
                         "displayStatus": "Provisioning failed", "message": vm.failure["message"]})
    else:
        statuses.append({"code": f"ProvisioningState/{vm.state.lower()}", "level": "Info",
                         "displayStatus": f"Provisioning {vm.state.lower()}", "time": _now_iso(vm.created)})
    power = {"Creating": ("starting", "VM starting"), "Succeeded": ("running", "VM running"),
             "Deleting": ("deallocating" if vm.evicted else "stopping",
                          "VM deallocating" if vm.evicted else "VM stopping")}.get(vm.state)
    if power:
        statuses.append({"code": f"PowerState/{power[0]}", "level": "Info", "displayStatus": power[1]})
    return {"computerName": vm.body["properties"].get("osProfile", {}).get("computerName", vm.name),
            "osName": "ubuntu", "statuses": statuses}


def _vm_body(vm: _Vm, *, view: bool) -> dict[str, Any]:
    body = json.loads(json.dumps(vm.body))
    body["properties"]["provisioningState"] = vm.state
    if view:
        body["properties"]["instanceView"] = _instance_view(vm)
    return body


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return

    # -- plumbing -------------------------------------------------------------------------
    def _reply(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("x-ms-request-id", str(uuid.uuid4()))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        self._reply(status, {"error": {"code": code, "message": message}}, headers)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def _base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"https://{host}:{port}"

    def _route(self) -> tuple[list[str], dict[str, list[str]]] | None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        state = self.server.state
        with state.lock:
            state.requests.append((self.command, parts.path))
        if parts.path.rstrip("/").lower() == "/msi/token":
            self._token(query)
            return None
        auth = self.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else ""
        with state.lock:
            known = token in state.tokens
        if not known:
            self._error(401, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing or invalid.",
                        {"WWW-Authenticate": 'Bearer authorization_uri="https://login.windows.net/", '
                                             'error="invalid_token", error_description="The access token is missing or invalid."'})
            return None
        if not query.get("api-version"):
            self._error(400, "MissingApiVersionParameter",
                        "The api-version query parameter (?api-version=) is required for all requests.")
            return None
        return [p for p in parts.path.split("/") if p], query

    def _token(self, query: dict[str, list[str]]) -> None:
        state = self.server.state
        if self.headers.get("X-IDENTITY-HEADER") != state.identity_header:
            return self._error(401, "Unauthorized", "X-IDENTITY-HEADER is missing or wrong")
        token = secrets.token_urlsafe(24)
        with state.lock:
            state.tokens.add(token)
        self._reply(200, {
            "access_token": token, "expires_on": str(int(time.time()) + 3600),
            "resource": query.get("resource", ["https://management.azure.com"])[0], "token_type": "Bearer",
            "client_id": "00000000-0000-0000-0000-000000000000",
        })

    def _vm_key(self, segs: list[str]) -> tuple[str, str, str] | None:
        # subscriptions/{s}/resourceGroups/{g}/providers/Microsoft.Compute/virtualMachines/{vm}[/instanceView]
        low = [s.lower() for s in segs]
        if len(segs) >= 8 and low[0] == "subscriptions" and low[2] == "resourcegroups" and low[4] == "providers" \
                and low[5] == "microsoft.compute" and low[6] == "virtualmachines":
            return segs[1], segs[3].lower(), segs[7].lower()
        return None

    # -- verbs ----------------------------------------------------------------------------
    def do_PUT(self) -> None:
        routed = self._route()
        if routed is None:
            return
        segs, _ = routed
        key = self._vm_key(segs)
        if key is None or len(segs) != 8:
            return self._error(404, "InvalidResourceType", f"The resource type could not be found: {self.path}")
        body = self._body() or {}
        props = body.get("properties") or {}
        location = body.get("location")
        size = (props.get("hardwareProfile") or {}).get("vmSize")
        problems = [what for what, ok in (
            ("location", location), ("properties.hardwareProfile.vmSize", size),
            ("properties.storageProfile.imageReference", (props.get("storageProfile") or {}).get("imageReference")),
            ("properties.osProfile.adminUsername", (props.get("osProfile") or {}).get("adminUsername")),
            ("properties.networkProfile", props.get("networkProfile")),
        ) if not ok]
        if problems:
            return self._error(400, "InvalidParameter", f"Required parameter '{problems[0]}' is missing (null).")
        try:
            custom = base64.b64decode((props.get("osProfile") or {}).get("customData") or "", validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return self._error(400, "InvalidParameter", "Custom data in OSProfile must be in Base64 encoding.")
        if props.get("priority") == "Spot" and props.get("evictionPolicy") not in ("Delete", "Deallocate"):
            return self._error(400, "InvalidParameter", "Eviction policy must be Delete or Deallocate for Spot VMs.")
        state = self.server.state
        with state.lock:
            state.tick()
            existing = state.vms.get(key)
            if existing is not None:
                if existing.state == "Deleting":
                    return self._error(409, "OperationNotAllowed", f"VM '{existing.name}' is being deleted.")
                return self._reply(200, _vm_body(existing, view=False))
            failure = None
            if state.fail_next and state.fail_next[0][2] > 0:
                state.fail_next[0][2] -= 1
            elif state.fail_next:
                code, message, _ = state.fail_next.pop(0)
                status, template = ARM_ERRORS[code]
                text = message or template.format(size=size, location=location)
                if status is not None:
                    return self._error(status, code, text)
                failure = {"code": code, "message": text}
            sub, _group, _name = key
            group_name, vm_name = segs[3], segs[7]
            nics = []
            for conf in (props.get("networkProfile") or {}).get("networkInterfaceConfigurations") or []:
                nics.append({"id": f"/subscriptions/{sub}/resourceGroups/{group_name}/providers/Microsoft.Network/"
                                   f"networkInterfaces/{conf.get('name', vm_name + '-nic')}",
                             "properties": {"primary": bool((conf.get("properties") or {}).get("primary"))}})
            stored = {
                "id": f"/subscriptions/{sub}/resourceGroups/{group_name}/providers/Microsoft.Compute/virtualMachines/{vm_name}",
                "name": vm_name, "type": "Microsoft.Compute/virtualMachines", "location": location,
                "tags": body.get("tags") or {}, **({"zones": body["zones"]} if body.get("zones") else {}),
                **({"identity": body["identity"]} if body.get("identity") else {}),
                "properties": {**json.loads(json.dumps(props)), "vmId": str(uuid.uuid4()),
                               "timeCreated": _now_iso()},
            }
            stored["properties"]["osProfile"].pop("customData", None)  # ARM never returns customData
            stored["properties"]["networkProfile"]["networkInterfaces"] = nics
            vm = _Vm(sub, group_name, vm_name, stored, ready_at=time.time() + state.op_s, custom_data=custom,
                     failure=failure)
            state.vms[key] = vm
            op = self._new_op(vm, "create", location, failure)
            reply = _vm_body(vm, view=False)
        self._reply(201, reply, {"Azure-AsyncOperation": self._op_url(op), "Retry-After": "0"})

    def _new_op(self, vm: _Vm, kind: str, location: str, error: dict[str, str] | None = None) -> _Op:
        state = self.server.state
        op = _Op(str(uuid.uuid4()), location, time.time() + state.op_s, vm, kind, error)
        state.ops[op.id] = op
        return op

    def _op_url(self, op: _Op, *, monitor: bool = False) -> str:
        extra = "&monitor=true" if monitor else ""
        return (f"{self._base()}/subscriptions/{op.vm.sub}/providers/Microsoft.Compute/locations/{op.location}/"
                f"operations/{op.id}?p={uuid.uuid4().hex[:8]}{extra}&api-version=2024-07-01")

    def do_GET(self) -> None:
        routed = self._route()
        if routed is None:
            return
        segs, query = routed
        low = [s.lower() for s in segs]
        state = self.server.state
        with state.lock:
            state.tick()
            if len(low) == 8 and low[0] == "subscriptions" and low[2] == "providers" and low[4] == "locations" \
                    and low[6] == "operations":
                return self._operation(segs[7], monitor=query.get("monitor", [""])[0] == "true")
            path = "/" + "/".join(low)
            if len(low) == 5 and path.endswith(_VM_PATH):  # list_all over the subscription
                return self._list(lambda vm: vm.sub == segs[1], query)
            if len(low) == 7 and low[2] == "resourcegroups" and path.endswith(_VM_PATH):
                return self._list(lambda vm: vm.sub == segs[1] and vm.group.lower() == low[3], query)
            key = self._vm_key(segs)
            if key is None:
                return self._error(404, "InvalidResourceType", f"The resource type could not be found: {self.path}")
            vm = state.vms.get(key)
            if vm is None:
                return self._error(404, "ResourceNotFound",
                                   f"The Resource 'Microsoft.Compute/virtualMachines/{segs[7]}' under resource group "
                                   f"'{segs[3]}' was not found. For more details please go to "
                                   "https://aka.ms/ARMResourceNotFoundFix")
            if len(segs) == 9 and low[8] == "instanceview":
                return self._reply(200, _instance_view(vm))
            if len(segs) != 8:
                return self._error(404, "InvalidResourceType", f"The resource type could not be found: {self.path}")
            view = "instanceview" in query.get("$expand", [""])[0].lower()
            self._reply(200, _vm_body(vm, view=view))

    def _list(self, keep: Any, query: dict[str, list[str]]) -> None:
        status_only = (query.get("statusOnly", [""])[0].lower() == "true"
                       or "instanceview" in query.get("$expand", [""])[0].lower())
        vms = [_vm_body(vm, view=status_only) for vm in self.server.state.vms.values() if keep(vm)]
        self._reply(200, {"value": vms})

    def _operation(self, op_id: str, *, monitor: bool) -> None:
        op = self.server.state.ops.get(op_id)
        if op is None:
            return self._error(404, "NotFound", f"The operation '{op_id}' was not found.")
        done = time.time() >= op.done_at
        status = ("Failed" if op.error else "Succeeded") if done else "InProgress"
        if monitor:
            # The Location URL: 202 until the operation ends, then the final answer.
            if not done:
                return self._reply(202, None, {"Location": self._op_url(op, monitor=True), "Retry-After": "0"})
            if op.error:
                return self._error(409, op.error["code"], op.error["message"])
            return self._reply(204) if op.kind == "delete" else self._reply(200, _vm_body(op.vm, view=False))
        body: dict[str, Any] = {"startTime": _now_iso(op.started), "status": status, "name": op.id}
        if done:
            body["endTime"] = _now_iso(op.done_at)
        if done and op.error:
            body["error"] = dict(op.error)
        self._reply(200, body)

    def do_DELETE(self) -> None:
        routed = self._route()
        if routed is None:
            return
        segs, _ = routed
        key = self._vm_key(segs)
        if key is None or len(segs) != 8:
            return self._error(404, "InvalidResourceType", f"The resource type could not be found: {self.path}")
        state = self.server.state
        with state.lock:
            state.tick()
            vm = state.vms.get(key)
            if vm is None:
                return self._reply(204)
            if vm.state != "Deleting":
                vm.state = "Deleting"
                vm.gone_at = time.time() + state.op_s
            op = self._new_op(vm, "delete", vm.body["location"])
            op.done_at = vm.gone_at or op.done_at
        self._reply(202, None, {"Azure-AsyncOperation": self._op_url(op), "Location": self._op_url(op, monitor=True),
                                "Retry-After": "0"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, state: _State, context: ssl.SSLContext):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state
        self.socket = context.wrap_socket(self.socket, server_side=True)


class ArmServer:
    """The local ARM (see the module docstring). ``op_s``: how long each create/delete takes."""

    SUBSCRIPTION = "00000000-0000-0000-0000-0000000000a2"

    def __init__(self, directory: Path, *, op_s: float = 0.3):
        self.cert_path, key_path = make_certificate(directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_path, key_path)
        self._state = _State(op_s)
        self._server = _Server(self._state, context)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="arm-server", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"https://{host}:{port}"

    def start(self) -> ArmServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def environment(self) -> dict[str, str]:
        """Env for a process whose ``DefaultAzureCredential`` + ARM client use this server (and only it)."""
        return {
            "IDENTITY_ENDPOINT": f"{self.url}/msi/token",
            "IDENTITY_HEADER": self._state.identity_header,
            # azure-identity >= 1.19: only this credential of the chain (no CLI, no IMDS probing).
            "AZURE_TOKEN_CREDENTIALS": "ManagedIdentityCredential",
            "REQUESTS_CA_BUNDLE": str(self.cert_path),
            "AZURE_SUBSCRIPTION_ID": self.SUBSCRIPTION,
            "DANLU_AZURE_MANAGEMENT_URL": self.url,
        }

    # -- hooks ----------------------------------------------------------------------------
    def fail_next_create(self, code: str, message: str | None = None, *, skip: int = 0) -> None:
        """The next VM PUT (after ``skip`` that succeed) fails with ``code`` (one of :data:`ARM_ERRORS`), as ARM
        answers it: on the PUT itself or in its long-running operation."""
        if code not in ARM_ERRORS:
            raise ValueError(f"unknown ARM error {code!r}; known: {', '.join(ARM_ERRORS)}")
        with self._state.lock:
            self._state.fail_next.append([code, message, skip])

    def evict(self, name: str, *, after_s: float | None = None) -> str:
        """Evict spot VM ``name`` (policy Delete): ``Deleting`` now, gone (NIC and disk too) ``after_s`` later."""
        with self._state.lock:
            self._state.tick()
            vm = next((v for v in self._state.vms.values() if v.name.lower() == name.lower()), None)
            if vm is None:
                raise KeyError(f"no VM named {name!r}")
            if (vm.body["properties"].get("priority") or "Regular") != "Spot":
                raise ValueError(f"VM {name!r} is not a Spot VM; only those are evicted")
            if vm.state != "Deleting":
                vm.state, vm.evicted = "Deleting", True
                vm.gone_at = time.time() + (self._state.op_s if after_s is None else after_s)
                self._state.evictions.append(vm.id)
            return vm.id

    def vms(self) -> list[dict[str, Any]]:
        """Every VM the server holds: id, name, state (provisioningState), tags, priority, custom_data (decoded)."""
        with self._state.lock:
            self._state.tick()
            return [{"id": vm.id, "name": vm.name, "state": vm.state, "tags": dict(vm.body.get("tags") or {}),
                     "priority": vm.body["properties"].get("priority", "Regular"), "custom_data": vm.custom_data,
                     "body": _vm_body(vm, view=True)}
                    for vm in self._state.vms.values()]

    def running(self) -> list[dict[str, Any]]:
        """The VMs whose provisioning succeeded and that are not going away."""
        return [vm for vm in self.vms() if vm["state"] == "Succeeded"]

    @property
    def deleted(self) -> list[str]:
        with self._state.lock:
            self._state.tick()
            return list(self._state.deleted)

    @property
    def requests(self) -> list[tuple[str, str]]:
        with self._state.lock:
            return list(self._state.requests)


def arm_server_fixture(tmp_path_factory: Any, monkeypatch: Any) -> Any:
    """Body of the tests' ``arm`` fixture: a started server, this process's Azure env pointed at it."""
    # The environment is set before the server's thread starts: setenv() while another thread
    # reads the environment in C (libfaketime does, in the clock-ahead suite) can crash glibc.
    server = ArmServer(tmp_path_factory.mktemp("arm"), op_s=0.2)
    for key, value in server.environment().items():
        monkeypatch.setenv(key, value)
    for key in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE", "MSI_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)
    return server.start()
