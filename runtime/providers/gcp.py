"""Google Compute Engine: :class:`GcpCompute` (the :class:`ComputeAPI` over google-cloud-compute).

One create call inserts ``count`` VMs in one zone of the pool (``pool.zone``, else the
zones of ``pool.region`` that offer the machine type, in the catalog's order, or the
``zones`` option), spot as ``scheduling.provisioningModel = SPOT`` with an
``instanceTerminationAction``, on-demand as ``STANDARD``; a held pool whose ``[[purchase.held]]``
names its reservation consumes that one (``reservationAffinity``, ``SPECIFIC_RESERVATION``). The bootstrap is the
``startup-script`` metadata value: GCE's script runner executes it as a file, so its
``#!/usr/bin/env python3`` line picks the interpreter and no shell ever parses it.

Machine types: the A2/A3/A4/G2 families carry their GPUs; an N1 type gets them as
``guestAccelerators`` -- from the catalog's ``n1-highmem-8+T4:2`` spelling, or from the
pool's ``gpu``/``gpus_per_node``. A VM with GPUs cannot live-migrate, so
``onHostMaintenance`` is ``TERMINATE``.

Errors: GCE reports "no capacity" both as the HTTP status of the insert call and, more
often, in the error of the zone operation the insert returns (``status: DONE`` with
``error.errors[].code``); both are read, and ``ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS]``,
``QUOTA_EXCEEDED`` and RESOURCE_EXHAUSTED become :class:`CapacityError` after every VM of
the call is deleted again (all or nothing).

The clients are passed in, so tests point them at a local server; see
:meth:`GcpProvider.compute` for the real ones (default credentials).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from pricing.pool import Pool
from runtime.providers.base import ProviderError
from runtime.providers.cloud import CloudOptions, CloudProvider
from runtime.providers.cloud_api import (
    TAG_NODE,
    TAG_RUN,
    CapacityError,
    ComputeAPI,
    ComputeAPIError,
    Instance,
    InstanceRequest,
    InstanceState,
    fit_label,
)

if TYPE_CHECKING:
    from google.cloud import compute_v1

__all__ = [
    "CAPACITY_CODES",
    "GcpCompute",
    "GcpOptions",
    "GcpProvider",
    "accelerators_for",
    "build_compute",
    "label_value",
]

log = logging.getLogger("runtime.providers.gcp")

SDK_HINT = "pip install 'danlu[gcp]'"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"
"""The key of a specific reservation's affinity; its value is the reservation's name, or
``projects/PROJECT/reservations/NAME`` for one shared from another project."""
DEFAULT_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11-py310"

CAPACITY_CODES = frozenset({
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "QUOTA_EXCEEDED",
    "quotaExceeded",  # the same refusal as an HTTP error body's errors[].reason
    "RESOURCE_EXHAUSTED",
    "resourceExhausted",
})
"""Error codes that mean "not here, not now": block the pool and re-plan."""

# Families whose machine type includes its GPUs (a2-highgpu-1g has one A100, g2-standard-4 one L4).
BUILT_IN_GPU_FAMILIES = ("a2", "a3", "a4", "g2", "g4")
# Catalog GPU names -> GCE accelerator types (gcloud compute accelerator-types list).
ACCELERATOR_TYPES = {
    "T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
    "P4": "nvidia-tesla-p4", "K80": "nvidia-tesla-k80", "A100": "nvidia-tesla-a100", "L4": "nvidia-l4",
}
STATES = {
    "PROVISIONING": InstanceState.PENDING, "STAGING": InstanceState.PENDING, "REPAIRING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING, "SUSPENDING": InstanceState.STOPPING,
    "TERMINATED": InstanceState.TERMINATED, "STOPPED": InstanceState.TERMINATED,
    "SUSPENDED": InstanceState.TERMINATED,
}
_LABEL_BAD = re.compile(r"[^a-z0-9_-]")


class GcpOptions(CloudOptions):
    """``[run.options]`` for ``provider = "gcp"`` (besides those of every cloud, :class:`CloudOptions`)."""

    project: str | None = Field(None, min_length=1, description="project id; default: the credentials' project")
    zones: tuple[str, ...] = Field((), description="zones to try for a regional pool, in order")
    image: str = Field(DEFAULT_IMAGE, min_length=1, description="boot image (URL or family path) with python3")
    network: str = "global/networks/default"
    subnetwork: str | None = None
    external_ip: bool = Field(True, description="an ephemeral public IP (else: Cloud NAT or Private Google Access)")
    service_account: str = Field("default", min_length=1, description="the nodes' service account email")
    disk_size_gb: int = Field(100, ge=10, le=65536)
    disk_type: str = "pd-balanced"
    termination_action: Literal["DELETE", "STOP"] = "DELETE"
    api_endpoint: str | None = Field(None, description="Compute API endpoint (a local emulator in tests)")
    anonymous: bool = Field(False, description="no credentials: only with a 127.0.0.1/localhost api_endpoint")
    operation_timeout_s: float = Field(300.0, gt=0)

    @model_validator(mode="after")
    def _anonymous_only_locally(self) -> GcpOptions:
        if self.anonymous and not _is_local(self.api_endpoint):
            raise ValueError("anonymous = true needs api_endpoint on 127.0.0.1 or localhost (an emulator); "
                             "remove anonymous and let Application Default Credentials sign in")
        return self

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> GcpOptions:
        """Validate ``[run.options]``; raises ProviderError naming the key and the fix."""
        parsed = GcpProvider.parse_options(options)
        assert isinstance(parsed, GcpOptions)
        return parsed


def _is_local(endpoint: str | None) -> bool:
    return bool(endpoint) and re.match(r"^(https?://)?(127\.0\.0\.1|localhost)(:\d+)?/?$", endpoint or "") is not None


def label_value(text: str) -> str:
    """``text`` as a valid GCE label value: lower case, digits, ``-`` and ``_``, at most 63 characters."""
    return fit_label(text, _LABEL_BAD.sub("-", text.lower()))


def accelerators_for(pool: Pool) -> tuple[str, list[tuple[str, int]]]:
    """(machine type, [(accelerator type, count)]) for ``pool``; see the module docstring."""
    machine, _, attached = pool.instance_type.partition("+")
    family = machine.split("-", 1)[0]
    if family in BUILT_IN_GPU_FAMILIES:
        return machine, []
    gpu, count = pool.gpu, pool.gpus_per_node
    if attached:
        gpu, _, n = attached.partition(":")
        count = int(n) if n.isdigit() else count
    if not gpu or gpu.lower() in ("none", "cpu", "-"):
        return machine, []
    accelerator = ACCELERATOR_TYPES.get(gpu.upper(), gpu.lower() if gpu.startswith("nvidia-") else None)
    if accelerator is None:
        raise ComputeAPIError(
            f"GPU {gpu!r} of {pool.instance_type} has no known GCE accelerator type (known: "
            f"{', '.join(sorted(ACCELERATOR_TYPES))}). To fix: use a machine type that carries its GPUs.",
            code="UNKNOWN_ACCELERATOR",
        )
    return machine, [(accelerator, count)]


def _error_codes(exc: BaseException) -> list[str]:
    """Every code the SDK's exception carries: errors[].code/.reason (HTTP body or operation), the status."""
    codes: list[str] = []
    for item in getattr(exc, "errors", None) or ():
        for key in ("code", "reason"):
            value = item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)
            if isinstance(value, str) and value:
                codes.append(value)
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason:
        codes.append(reason)
    status = getattr(exc, "grpc_status_code", None)
    if status is not None:
        codes.append(getattr(status, "name", str(status)))
    message = str(getattr(exc, "message", "") or exc)
    codes += [code for code in CAPACITY_CODES if code in message]
    return codes


def _raise_for(exc: BaseException, what: str) -> None:
    codes = _error_codes(exc)
    message = f"GCE {what}: {getattr(exc, 'message', None) or exc}"
    capacity = next((c for c in codes if c in CAPACITY_CODES), None)
    if capacity:
        raise CapacityError(message, code=capacity) from None
    raise ComputeAPIError(message, code=codes[0] if codes else type(exc).__name__) from None


class _OperationFailed(Exception):
    """A zone operation ended with an error; ``errors`` like the SDK's exceptions carry them."""

    def __init__(self, operation: Any):
        self.errors = list(operation.error.errors)
        self.message = "; ".join(f"{e.code}: {e.message}" for e in self.errors) or operation.http_error_message
        super().__init__(self.message)


class GcpCompute(ComputeAPI):
    """The four ComputeAPI calls on one project (see the module docstring)."""

    cloud = "gcp"

    def __init__(
        self, instances: compute_v1.InstancesClient, operations: compute_v1.ZoneOperationsClient, *,
        project: str, options: GcpOptions | None = None, sleep: Callable[[float], None] = time.sleep,
    ):
        self.instances = instances
        self.operations = operations
        self.project = project
        self.options = options or GcpOptions()
        self._sleep = sleep
        self._deleted: set[str] = set()  # ids this API deleted itself: their going away is no preemption
        self._spot: dict[str, bool] = {}
        self._good_zone: dict[tuple[str, str], str] = {}  # (region, type) -> the zone that last had capacity

    def tag_value(self, value: str) -> str:
        return label_value(value)

    # -- create ---------------------------------------------------------------------------

    def zones_for(self, pool: Pool, options: GcpOptions) -> list[str]:
        if pool.zone:
            return [pool.zone]
        if options.zones:
            return [z for z in options.zones if z.startswith(pool.region + "-")] or list(options.zones)
        from pricing.embedded_catalog import load_embedded_catalog

        zones = [o.zone for o in load_embedded_catalog()
                 if o.cloud == "gcp" and o.region == pool.region and o.instance_type == pool.instance_type and o.zone]
        zones = list(dict.fromkeys(sorted(zones)))
        if not zones:
            raise ComputeAPIError(
                f"no zone of {pool.region} is known to offer {pool.instance_type}. To fix: set "
                "[run.options] zones = [\"<region>-a\", ...].", code="NO_ZONE",
            )
        return zones

    def create(self, request: InstanceRequest) -> list[Instance]:
        options = GcpOptions.parse(request.options) if request.options else self.options
        last: CapacityError | None = None
        zones = self.zones_for(request.pool, options)
        key = (request.pool.region, request.pool.instance_type)
        if self._good_zone.get(key) in zones:  # the nodes of one launch one after another: keep them together
            zones.remove(self._good_zone[key])
            zones.insert(0, self._good_zone[key])
        for zone in zones:
            try:
                created = self._create_in(zone, request, options)
                self._good_zone[key] = zone
                return created
            except CapacityError as exc:
                log.info("gcp: %s has no capacity for %s (%s); next zone", zone, request.pool.instance_type, exc.code)
                last = exc
        assert last is not None
        raise last

    def _create_in(self, zone: str, request: InstanceRequest, options: GcpOptions) -> list[Instance]:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        created: list[str] = []
        try:
            pending = []
            for name in request.names:
                resource = self._resource(zone, name, request, options)
                try:
                    # A request id makes a retried insert idempotent on GCE's side.
                    operation = self.instances.insert(request=compute_v1.InsertInstanceRequest(
                        project=self.project, zone=zone, instance_resource=resource, request_id=str(uuid.uuid4()),
                    ), timeout=60.0)
                except gexc.GoogleAPICallError as exc:
                    _raise_for(exc, f"insert {zone}/{name}")
                created.append(f"{zone}/{name}")
                pending.append((name, operation.name))
            for name, op_name in pending:
                try:
                    self._wait(zone, op_name, options.operation_timeout_s)
                except (_OperationFailed, gexc.GoogleAPICallError) as exc:
                    _raise_for(exc, f"insert {zone}/{name}")
        except ComputeAPIError:
            if created:
                self.delete(created)  # all or nothing: a failed create holds nothing
            raise
        spot = request.pool.purchase == "spot"
        for instance_id in created:
            self._spot[instance_id] = spot
        return [Instance(id=i, name=i.split("/", 1)[1], state=InstanceState.PENDING, zone=zone,
                         tags=self._labels(request, i.split("/", 1)[1])) for i in created]

    def _wait(self, zone: str, op_name: str, timeout_s: float) -> None:
        """Until the zone operation is DONE; raises _OperationFailed when it ended in an error.

        ``zoneOperations.wait`` returns at DONE or after about two minutes, whichever first.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            operation = self.operations.wait(project=self.project, zone=zone, operation=op_name, timeout=150.0)
            if operation.status == type(operation).Status.DONE:
                if operation.error.errors:
                    raise _OperationFailed(operation)
                return
            if time.monotonic() > deadline:
                raise ComputeAPIError(f"GCE operation {zone}/{op_name} not done after {timeout_s:.0f}s",
                                      code="OPERATION_TIMEOUT")
            self._sleep(1.0)

    @staticmethod
    def _labels(request: InstanceRequest, name: str) -> dict[str, str]:
        labels = {label_value(k): label_value(v) for k, v in request.tags.items()}
        labels[TAG_NODE] = label_value(name)
        return labels

    def _resource(self, zone: str, name: str, request: InstanceRequest, options: GcpOptions) -> compute_v1.Instance:
        from google.cloud import compute_v1

        pool = request.pool
        machine, accelerators = accelerators_for(pool)
        spot = pool.purchase == "spot"
        scheduling = compute_v1.Scheduling(
            provisioning_model="SPOT" if spot else "STANDARD",
            automatic_restart=not spot,
            # VMs with GPUs cannot live-migrate; nor can spot VMs.
            on_host_maintenance="TERMINATE" if (spot or accelerators or machine.split("-")[0] in
                                                 BUILT_IN_GPU_FAMILIES) else "MIGRATE",
        )
        if spot:
            scheduling.instance_termination_action = options.termination_action
        interface = compute_v1.NetworkInterface(network=options.network)
        if options.subnetwork:
            interface.subnetwork = options.subnetwork
        if options.external_ip:
            interface.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
        instance = compute_v1.Instance(
            name=name,
            machine_type=f"zones/{zone}/machineTypes/{machine}",
            labels=self._labels(request, name),
            scheduling=scheduling,
            guest_accelerators=[
                compute_v1.AcceleratorConfig(
                    accelerator_type=f"zones/{zone}/acceleratorTypes/{kind}", accelerator_count=count)
                for kind, count in accelerators
            ],
            disks=[compute_v1.AttachedDisk(
                boot=True, auto_delete=True, type_="PERSISTENT",
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=options.image, disk_size_gb=options.disk_size_gb,
                    disk_type=f"zones/{zone}/diskTypes/{options.disk_type}"),
            )],
            network_interfaces=[interface],
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key="startup-script", value=request.user_data)]),
            service_accounts=[compute_v1.ServiceAccount(email=options.service_account, scopes=[CLOUD_PLATFORM_SCOPE])],
        )
        if request.reservation_id:  # the VM runs in the team's reservation, or not at all
            instance.reservation_affinity = compute_v1.ReservationAffinity(
                consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_NAME_KEY,
                values=[request.reservation_id])
        return instance

    # -- describe / delete / list ---------------------------------------------------------
    def _instance(self, vm: compute_v1.Instance, zone: str) -> Instance:
        instance_id = f"{zone}/{vm.name}"
        status = str(vm.status)
        state = STATES.get(status, InstanceState.PENDING)
        spot = vm.scheduling.provisioning_model == "SPOT" or bool(vm.scheduling.preemptible)
        self._spot[instance_id] = spot
        # A spot VM stopping (or stopped) that danlu did not delete was preempted by GCE.
        stopped = state in (InstanceState.STOPPING, InstanceState.TERMINATED) or bool(vm.last_stop_timestamp)
        address = vm.network_interfaces[0].network_i_p if vm.network_interfaces else None
        return Instance(
            id=instance_id, name=vm.name, state=state, zone=zone, tags=dict(vm.labels), address=address or None,
            interruption=spot and stopped and instance_id not in self._deleted,
        )

    def describe(self, ids: Sequence[str]) -> list[Instance]:
        from google.api_core import exceptions as gexc

        found = []
        for instance_id in ids:
            zone, name = _split(instance_id)
            try:
                vm = self.instances.get(project=self.project, zone=zone, instance=name, timeout=30.0)
            except gexc.NotFound:
                # Gone: deleted by danlu, or by GCE (a spot VM whose termination action is DELETE).
                preempted = self._spot.get(instance_id, False) and instance_id not in self._deleted
                found.append(Instance(id=instance_id, name=name, state=InstanceState.TERMINATED, zone=zone,
                                      interruption=preempted))
                continue
            except gexc.GoogleAPICallError as exc:
                _raise_for(exc, f"get {instance_id}")
            found.append(self._instance(vm, zone))
        return found

    def delete(self, ids: Sequence[str]) -> None:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        for instance_id in ids:
            zone, name = _split(instance_id)
            self._deleted.add(instance_id)
            try:
                self.instances.delete(request=compute_v1.DeleteInstanceRequest(
                    project=self.project, zone=zone, instance=name, request_id=str(uuid.uuid4())), timeout=60.0)
            except gexc.NotFound:
                continue
            except gexc.GoogleAPICallError as exc:
                _raise_for(exc, f"delete {instance_id}")

    def list_tagged(self, key: str = TAG_RUN, value: str | None = None) -> list[Instance]:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        key = label_value(key)
        flt = f"labels.{key}:*" if value is None else f'labels.{key} = "{label_value(value)}"'
        request = compute_v1.AggregatedListInstancesRequest(project=self.project, filter=flt)
        try:
            scopes: Iterable[tuple[str, Any]] = self.instances.aggregated_list(request=request, timeout=60.0)
            found = []
            for scope, scoped in scopes:
                zone = scope.rsplit("/", 1)[-1]
                for vm in scoped.instances:
                    instance = self._instance(vm, zone)
                    # Client-side check too: the filter is the server's, the promise is ours.
                    if key in instance.tags and (value is None or instance.tags[key] == label_value(value)):
                        found.append(instance)
        except gexc.GoogleAPICallError as exc:
            _raise_for(exc, "aggregatedList instances")
        # A stopped VM (termination action STOP) still holds its disk: it is listed for deletion.
        return found


def _split(instance_id: str) -> tuple[str, str]:
    zone, sep, name = instance_id.partition("/")
    if not sep or not zone or not name:
        raise ComputeAPIError(f"GCE instance id {instance_id!r} is not 'zone/name'", code="BAD_ID")
    return zone, name


def build_compute(options: GcpOptions) -> GcpCompute:
    """A :class:`GcpCompute` on the REST transport with Application Default Credentials.

    ``api_endpoint`` points both clients elsewhere (an emulator); ``anonymous`` sends no
    credentials at all, which only a local endpoint accepts (see :meth:`GcpOptions.parse`).

    Raises:
        ProviderError: the SDK is missing, or there are no credentials or no project.
    """
    try:
        import google.auth
        from google.api_core.client_options import ClientOptions
        from google.auth import exceptions as auth_exceptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import compute_v1
    except ImportError as exc:
        raise ProviderError(f"provider 'gcp' needs google-cloud-compute ({exc.name} is missing). To fix: {SDK_HINT}") \
            from None
    project = options.project
    if options.anonymous:
        credentials: Any = AnonymousCredentials()
    else:
        try:
            credentials, default_project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        except auth_exceptions.DefaultCredentialsError as exc:
            raise ProviderError(
                f"provider 'gcp' found no Google credentials ({exc}). To fix: run `gcloud auth application-default "
                "login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run on a VM with "
                "a service account."
            ) from None
        project = project or default_project
    if not project:
        raise ProviderError("provider 'gcp' needs a project. To fix: set [run.options] project = \"my-project\" "
                            "(or GOOGLE_CLOUD_PROJECT).")
    client_options = ClientOptions(api_endpoint=options.api_endpoint) if options.api_endpoint else None
    instances = compute_v1.InstancesClient(credentials=credentials, transport="rest", client_options=client_options)
    operations = compute_v1.ZoneOperationsClient(credentials=credentials, transport="rest",
                                                 client_options=client_options)
    return GcpCompute(instances, operations, project=project, options=options)


class GcpProvider(CloudProvider):
    """``provider = "gcp"``: spot or on-demand Compute Engine VMs, the stage and checkpoints in GCS."""

    name = "gcp"
    Options = GcpOptions

    @classmethod
    def compute(cls, options: CloudOptions) -> GcpCompute:
        try:
            import gcsfs  # noqa: F401 -- the stage and the checkpoints are gs:// URLs, on the nodes too
        except ImportError:
            raise ProviderError(f"provider 'gcp' needs gcsfs for gs:// checkpoints. To fix: {SDK_HINT}") from None
        gcp_options = options if isinstance(options, GcpOptions) else GcpOptions.parse(options.model_dump())
        return build_compute(gcp_options)
