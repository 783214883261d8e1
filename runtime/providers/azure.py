"""Azure: spot / regular VMs through Azure Resource Manager (azure-mgmt-compute + azure-identity).

:class:`AzureCompute` is the :class:`~runtime.providers.cloud_api.ComputeAPI` of Azure:

* ``create``: one ``virtualMachines`` PUT (``begin_create_or_update``) per node, all started
  before any is waited for; a spot pool is ``priority = Spot``, ``evictionPolicy = Delete``,
  ``billingProfile.maxPrice = -1`` (pay up to the on-demand price: evicted for capacity,
  never for price), anything else ``Regular``; a held pool whose ``[[purchase.held]]`` names a
  capacity reservation group (its resource id) allocates from it (``capacityReservation``).
  The bootstrap is ``osProfile.customData``
  (base64; cloud-init runs a ``#!`` script as is). The NIC is not created separately: the
  VM's ``networkProfile.networkInterfaceConfigurations`` (``networkApiVersion``
  2020-11-01) makes ARM create one NIC per VM in the subnet named by ``subnet_id``, and
  ``deleteOption = Delete`` on it and on the OS disk makes deleting the VM delete both --
  so one VM delete releases everything a node holds, also after a spot eviction, and no
  azure-mgmt-network dependency is needed.
* capacity and quota refusals (``SkuNotAvailable``, ``AllocationFailed``,
  ``ZonalAllocationFailed``, ``OverconstrainedAllocationRequest``, ``QuotaExceeded``,
  ``OperationNotAllowed`` about a quota), whether ARM answers them on the PUT or in the
  long-running operation, are :class:`CapacityError`; the VMs of the request that were
  created (a VM whose allocation failed stays behind in ``provisioningState = Failed``)
  are deleted, and waited for, before it raises.
* ``describe``: ``GET`` with ``$expand=instanceView``; 404 is TERMINATED; the
  ``ProvisioningState/*`` and ``PowerState/*`` status codes give the state; a spot VM that
  goes away (``Deleting``, deallocating) without danlu having asked is an interruption.
* ``delete``: ``begin_delete`` (NIC and disk go with it, see above); does not wait.
* ``list_tagged``: the resource group's VMs (``list``, ``$expand=instanceView``) -- or, without a group,
  the subscription's (``list_all``, ``statusOnly=true``) -- filtered by tag.

:class:`AzureProvider` (the ``azure`` provider) is the common
:class:`~runtime.providers.cloud.CloudProvider` on this API; :class:`AzureOptions` are its
``[run.options]``. Credentials: ``DefaultAzureCredential`` (environment, workload identity,
managed identity, Azure CLI, ...). See docs/providers-azure.md.
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import Field, field_validator

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
)

__all__ = [
    "CAPACITY_CODES",
    "AzureCompute",
    "AzureOptions",
    "AzureProvider",
    "management_client",
]

log = logging.getLogger("runtime.providers.azure")

INSTALL_HINT = "pip install 'danlu[azure]'"
PUBLIC_MANAGEMENT_URL = "https://management.azure.com"
MANAGEMENT_URL_ENV = "DANLU_AZURE_MANAGEMENT_URL"
"""Overrides the ARM endpoint when the ``base_url`` option is unset (``planner gc`` has no job options)."""
SUBSCRIPTION_ENV = "AZURE_SUBSCRIPTION_ID"
NETWORK_API_VERSION = "2020-11-01"
"""The first network API version that lets a VM create its own NICs (networkInterfaceConfigurations)."""
MAX_CUSTOM_DATA = 65535
"""ARM refuses a decoded customData above 64 KiB."""

# The codes ARM answers when the size cannot be had now or the subscription's quota is spent
# (https://learn.microsoft.com/azure/azure-resource-manager/troubleshooting/error-codes,
#  https://learn.microsoft.com/troubleshoot/azure/virtual-machines/allocation-failure).
CAPACITY_CODES = frozenset({
    "SkuNotAvailable",
    "AllocationFailed",
    "ZonalAllocationFailed",
    "OverconstrainedAllocationRequest",
    "OverconstrainedZonalAllocationRequest",
    "QuotaExceeded",
    "ResourceQuotaExceeded",
})
QUOTA_ONLY_CODES = frozenset({"OperationNotAllowed"})
"""Capacity only when the message is about a quota ("Operation results in exceeding quota limits of Core"):
the same code also refuses e.g. an operation on a deallocated VM."""

_VM_ID = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/Microsoft\.Compute/"
    r"virtualMachines/(?P<name>[^/]+)$",
    re.IGNORECASE,
)
_SUBNET_ID = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+$",
    re.IGNORECASE,
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._()-]{0,89}$")


class AzureOptions(CloudOptions):
    """``[run.options]`` of ``provider = "azure"`` (see docs/providers-azure.md); ``resource_group`` and
    ``subnet_id`` are required to run (``planner gc`` builds the API without them)."""

    resource_group: str | None = Field(default=None, description="The resource group the VMs are created in (it must exist).")
    subnet_id: str | None = Field(
        default=None, description="Resource id of the subnet each VM's NIC is created in: "
        "/subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>"
    )
    subscription_id: str | None = Field(default=None, description=f"Default: ${SUBSCRIPTION_ENV}.")
    image: str = Field(
        default="microsoft-dsvm:ubuntu-hpc:2204:latest",
        description="publisher:offer:sku:version (a marketplace image, as `az vm create --image` takes it), "
        "or the resource id of a custom / gallery image.",
    )
    admin_username: str = "danlu"
    ssh_public_key: str | None = Field(
        default=None, description="An OpenSSH public key for admin_username; unset: a throwaway key, nobody can log in."
    )
    identity: str | None = Field(
        default=None, description="Resource id of a user-assigned managed identity the VMs run as (blob access)."
    )
    os_disk_type: str = "StandardSSD_LRS"
    os_disk_gb: int | None = Field(default=None, ge=30, le=4095)
    max_price: float = Field(default=-1.0, description="Spot max $/h; -1: up to the on-demand price.")
    base_url: str | None = Field(default=None, description=f"ARM endpoint (default {PUBLIC_MANAGEMENT_URL}).")
    poll_interval_s: float = Field(default=5.0, gt=0, le=60, description="How often long-running operations are polled.")

    @field_validator("subnet_id")
    @classmethod
    def _subnet(cls, value: str | None) -> str | None:
        if value is not None and not _SUBNET_ID.match(value):
            raise ValueError(
                "must be a subnet resource id: /subscriptions/<sub>/resourceGroups/<rg>/providers/"
                "Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>"
            )
        return value

    @field_validator("resource_group", "admin_username")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.match(value):
            raise ValueError("must be 1-90 letters, digits, '.', '_', '-', '(' or ')'")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if value.startswith("/subscriptions/") or len(value.split(":")) == 4 and all(value.split(":")):
            return value
        raise ValueError("must be publisher:offer:sku:version or an image resource id (/subscriptions/...)")

    @field_validator("ssh_public_key")
    @classmethod
    def _ssh(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(ssh-rsa|ssh-ed25519) [A-Za-z0-9+/=]+( .*)?$", value.strip()):
            raise ValueError("must be an OpenSSH public key line (ssh-rsa AAAA... or ssh-ed25519 AAAA...)")
        return value.strip() if value else value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("https://"):
            raise ValueError("must be an https:// URL (ARM sends bearer tokens over TLS only)")
        return value

    def subscription(self) -> str:
        sub = self.subscription_id or os.environ.get(SUBSCRIPTION_ENV, "")
        if not sub:
            raise ProviderError(
                f"no Azure subscription: ${SUBSCRIPTION_ENV} is empty and no subscription_id is set. To fix: export "
                f"{SUBSCRIPTION_ENV}=<subscription uuid> (a run may set subscription_id = \"<subscription uuid>\" "
                "in its [run.options] instead)."
            )
        return sub


def _sdk() -> tuple[Any, Any, Any]:
    """(azure.mgmt.compute, its models, azure.core.exceptions), or one line naming the extra."""
    try:
        from azure.core import exceptions
        from azure.mgmt import compute
        from azure.mgmt.compute import models
    except ImportError as exc:
        raise ProviderError(f"the azure provider needs the Azure SDK ({exc.name} is missing). To fix: {INSTALL_HINT}") from None
    return compute, models, exceptions


def management_client(
    subscription_id: str, *, base_url: str | None = None, poll_interval_s: float = 5.0, credential: Any = None
) -> Any:
    """A ``ComputeManagementClient`` on the default credential chain.

    ``base_url`` (else ``$DANLU_AZURE_MANAGEMENT_URL``, else the public cloud) is where ARM
    calls go; the TLS trust store is requests' own (``$REQUESTS_CA_BUNDLE`` honoured), which
    is how the tests trust their local server's self-signed certificate.
    """
    compute, _, _ = _sdk()
    if credential is None:
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError:
            raise ProviderError(f"the azure provider needs azure-identity. To fix: {INSTALL_HINT}") from None
        credential = DefaultAzureCredential()
    url = base_url or os.environ.get(MANAGEMENT_URL_ENV) or PUBLIC_MANAGEMENT_URL
    return compute.ComputeManagementClient(
        credential, subscription_id, base_url=url, polling_interval=poll_interval_s,
        # Retries are the SDK's (429/5xx with back-off); keep their total bounded for a controller loop.
        retry_total=4,
    )


def _error_code(exc: BaseException) -> tuple[str, str]:
    """ARM's (code, message) of an SDK error: from the parsed error model, else the body, else the text."""
    error = getattr(exc, "error", None)
    code = str(getattr(error, "code", "") or "")
    message = str(getattr(error, "message", "") or "")
    if not code:
        response = getattr(exc, "response", None)
        try:
            body = response.json() if response is not None else None
        except Exception:  # noqa: BLE001 -- any undecodable body: fall back to the text
            body = None
        if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
            code = str(body["error"].get("code") or "")
            message = str(body["error"].get("message") or "")
    if not code:
        match = re.search(r"\(([A-Za-z]+)\)", str(exc))
        code = match.group(1) if match else ""
    return code, message or str(getattr(exc, "message", "") or exc)


def _is_capacity(code: str, message: str) -> bool:
    return code in CAPACITY_CODES or (code in QUOTA_ONLY_CODES and "quota" in message.lower())


@functools.cache
def _throwaway_ssh_key() -> str:
    """An RSA public key whose private half is never kept: Azure wants a key, nobody gets to log in.
    (RSA: every Linux image takes it; one per process, generating one takes a while.)"""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    return key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode() + " danlu-no-login"


def _zone(zone: str | None) -> list[str] | None:
    """Azure zones are "1".."3"; a catalog may write "eastus-1"."""
    if not zone:
        return None
    return [zone.rsplit("-", 1)[-1]]


def _text(value: Any) -> str:
    """An SDK enum's wire value (``str()`` of a str-Enum is its Python name), or the string itself."""
    return str(getattr(value, "value", value) or "")


def _status_codes(vm: Any) -> list[str]:
    view = getattr(vm, "instance_view", None)
    return [str(s.code) for s in (getattr(view, "statuses", None) or []) if getattr(s, "code", None)]


def _state(vm: Any) -> tuple[InstanceState, bool]:
    """(state, going away without being asked to) from provisioningState and the instance view.

    Status codes as the instance view reports them: ``ProvisioningState/succeeded``,
    ``ProvisioningState/deleting``, ``PowerState/running``, ``PowerState/deallocating`` ...
    (azure-rest-api-specs, Microsoft.Compute virtualMachineExamples/VirtualMachine_Get_InstanceView.json).
    """
    provisioning = _text(getattr(vm, "provisioning_state", "")).lower()
    codes = [c.lower() for c in _status_codes(vm)]
    power = next((c.split("/", 1)[1] for c in codes if c.startswith("powerstate/")), "")
    for code in codes:
        if code.startswith("provisioningstate/") and not provisioning:
            provisioning = code.split("/", 1)[1].split("/")[0]
    if provisioning == "deleting" or power in ("stopping", "stopped", "deallocating", "deallocated"):
        return InstanceState.STOPPING, True
    if power == "running":
        return InstanceState.RUNNING, False
    if provisioning == "failed":
        return InstanceState.STOPPING, False  # an allocation that failed: exists, will never run
    if provisioning == "succeeded" and not power:
        return InstanceState.RUNNING, False  # no instance view (a create's answer): ARM starts a VM it created
    return InstanceState.PENDING, False


class AzureCompute(ComputeAPI):
    """Azure VMs through a ``ComputeManagementClient`` (see the module docstring).

    ``client`` is the SDK client (tests build it against their local ARM server);
    ``resource_group`` the default group for creates (``request.options['resource_group']``
    wins); ``wait_s`` bounds the waits on ARM's long-running operations.
    """

    cloud = "azure"

    def __init__(self, client: Any, *, resource_group: str = "", wait_s: float = 600.0,
                 ssh_key: Callable[[], str] = _throwaway_ssh_key):
        self.client = client
        self.resource_group = resource_group
        self.wait_s = wait_s
        self._ssh_key = ssh_key
        self._deleting: set[str] = set()
        """VM ids danlu asked to delete: their going away is not an eviction."""

    # -- create ---------------------------------------------------------------------------
    def _vm(self, request: InstanceRequest, name: str, models: Any) -> Any:
        opts = request.options
        pool = request.pool
        image = str(opts.get("image") or AzureOptions.model_fields["image"].default)
        if image.startswith("/subscriptions/"):
            image_ref = models.ImageReference(id=image)
        else:
            publisher, offer, sku, version = image.split(":")
            image_ref = models.ImageReference(publisher=publisher, offer=offer, sku=sku, version=version)
        custom_data = request.user_data.encode("utf-8")
        if len(custom_data) > MAX_CUSTOM_DATA:
            raise ComputeAPIError(f"the bootstrap is {len(custom_data)} bytes; Azure customData takes at most {MAX_CUSTOM_DATA}")
        subnet = opts.get("subnet_id")
        if not subnet:
            raise ComputeAPIError("[run.options] subnet_id is required to create Azure VMs (each VM's NIC goes there)")
        admin = str(opts.get("admin_username") or "danlu")
        key = str(opts.get("ssh_public_key") or self._ssh_key())
        os_disk = models.OSDisk(
            create_option="FromImage", delete_option="Delete",
            managed_disk=models.ManagedDiskParameters(storage_account_type=str(opts.get("os_disk_type") or "StandardSSD_LRS")),
        )
        if opts.get("os_disk_gb"):
            os_disk.disk_size_gb = int(opts["os_disk_gb"])  # type: ignore[arg-type]
        spot = pool.purchase == "spot"
        tags = {**request.tags, TAG_NODE: name}
        vm = models.VirtualMachine(
            location=pool.region,
            tags=tags,
            zones=_zone(pool.zone),
            hardware_profile=models.HardwareProfile(vm_size=pool.instance_type),
            storage_profile=models.StorageProfile(image_reference=image_ref, os_disk=os_disk),
            os_profile=models.OSProfile(
                computer_name=name[:64], admin_username=admin,
                custom_data=base64.b64encode(custom_data).decode("ascii"),
                linux_configuration=models.LinuxConfiguration(
                    disable_password_authentication=True,
                    ssh=models.SshConfiguration(public_keys=[
                        models.SshPublicKey(path=f"/home/{admin}/.ssh/authorized_keys", key_data=key)
                    ]),
                ),
            ),
            network_profile=models.NetworkProfile(
                network_api_version=NETWORK_API_VERSION,
                network_interface_configurations=[models.VirtualMachineNetworkInterfaceConfiguration(
                    name=f"{name}-nic", primary=True, delete_option="Delete",
                    ip_configurations=[models.VirtualMachineNetworkInterfaceIPConfiguration(
                        name=f"{name}-ip", primary=True, subnet=models.SubResource(id=str(subnet)),
                    )],
                )],
            ),
            priority="Spot" if spot else "Regular",
        )
        if spot:
            vm.eviction_policy = "Delete"
            vm.billing_profile = models.BillingProfile(max_price=float(opts.get("max_price", -1.0)))  # type: ignore[arg-type]
        if request.reservation_id:  # the VM runs in the team's capacity reservation group
            vm.capacity_reservation = models.CapacityReservationProfile(
                capacity_reservation_group=models.SubResource(id=request.reservation_id))
        if opts.get("identity"):
            vm.identity = models.VirtualMachineIdentity(
                type="UserAssigned", user_assigned_identities={str(opts["identity"]): models.UserAssignedIdentitiesValue()}
            )
        return vm

    def create(self, request: InstanceRequest) -> list[Instance]:
        _, models, exceptions = _sdk()
        group = str(request.options.get("resource_group") or self.resource_group)
        if not group:
            raise ComputeAPIError("[run.options] resource_group is required to create Azure VMs")
        sub = self.client._config.subscription_id
        started: list[tuple[str, Any]] = []
        failure: tuple[str, str] | None = None
        for name in request.names:
            try:
                poller = self.client.virtual_machines.begin_create_or_update(group, name, self._vm(request, name, models))
            except exceptions.HttpResponseError as exc:
                failure = _error_code(exc)
                break
            except exceptions.AzureError as exc:
                failure = ("", str(exc))
                break
            started.append((name, poller))
        created: list[Instance] = []
        for name, poller in started:
            try:
                vm = poller.result(timeout=self.wait_s)
            except exceptions.HttpResponseError as exc:
                failure = failure or _error_code(exc)
                continue
            except exceptions.AzureError as exc:
                failure = failure or ("", str(exc))
                continue
            if not poller.done():
                failure = failure or ("Timeout", f"VM {name} was not created within {self.wait_s:.0f} s")
                continue
            created.append(self._instance(vm, name))
        if failure is None:
            return created
        # All or nothing: every VM of the request, created or left in provisioningState Failed, goes.
        ids = [f"/subscriptions/{sub}/resourceGroups/{group}/providers/Microsoft.Compute/virtualMachines/{name}"
               for name in request.names]
        self._delete_and_wait(ids)
        code, message = failure
        where = f"{request.count}x {request.pool.instance_type} {request.pool.purchase} in {request.pool.location}"
        text = f"Azure refused {where}: {code or 'error'}: {message}"
        if _is_capacity(code, message):
            raise CapacityError(text, code=code)
        raise ComputeAPIError(text, code=code)

    def _delete_and_wait(self, ids: Sequence[str]) -> None:
        self.delete(ids)
        deadline = time.monotonic() + self.wait_s
        pending = list(ids)
        while pending and time.monotonic() < deadline:
            pending = [i for i, inst in zip(pending, self.describe(pending), strict=True)
                       if inst.state is not InstanceState.TERMINATED]
            if pending:
                time.sleep(min(1.0, self.client._config.polling_interval))
        if pending:
            log.warning("Azure VMs still being deleted after %.0f s: %s", self.wait_s, ", ".join(pending))

    # -- describe -------------------------------------------------------------------------
    def _instance(self, vm: Any, name: str | None = None) -> Instance:
        state, going = _state(vm)
        spot = _text(getattr(vm, "priority", "")).lower() == "spot"
        vm_id = str(vm.id)
        return Instance(
            id=vm_id, name=str(getattr(vm, "name", None) or name or vm_id.rsplit("/", 1)[-1]), state=state,
            zone=",".join(getattr(vm, "zones", None) or []) or str(getattr(vm, "location", "") or ""),
            tags=dict(getattr(vm, "tags", None) or {}),
            interruption=spot and going and vm_id.lower() not in self._deleting,
        )

    def describe(self, ids: Sequence[str]) -> list[Instance]:
        _, _, exceptions = _sdk()
        result = []
        for vm_id in ids:
            _sub, group, name = _parse_id(vm_id)
            try:
                vm = self.client.virtual_machines.get(group, name, expand="instanceView")
            except exceptions.ResourceNotFoundError:
                result.append(Instance(id=vm_id, name=name, state=InstanceState.TERMINATED))
                continue
            except exceptions.HttpResponseError as exc:
                code, message = _error_code(exc)
                if exc.status_code == 404 or code in ("ResourceNotFound", "NotFound", "ResourceGroupNotFound"):
                    result.append(Instance(id=vm_id, name=name, state=InstanceState.TERMINATED))
                    continue
                raise ComputeAPIError(f"Azure GET {name}: {code}: {message}", code=code) from None
            except exceptions.AzureError as exc:
                raise ComputeAPIError(f"Azure GET {name}: {exc}") from None
            result.append(self._instance(vm, name))
        return result

    # -- delete ---------------------------------------------------------------------------
    def delete(self, ids: Sequence[str]) -> None:
        _, _, exceptions = _sdk()
        for vm_id in ids:
            _, group, name = _parse_id(vm_id)
            self._deleting.add(vm_id.lower())
            try:
                self.client.virtual_machines.begin_delete(group, name)
            except exceptions.ResourceNotFoundError:
                continue
            except exceptions.HttpResponseError as exc:
                code, message = _error_code(exc)
                if exc.status_code == 404 or code in ("ResourceNotFound", "NotFound"):
                    continue
                raise ComputeAPIError(f"Azure DELETE {name}: {code}: {message}", code=code) from None
            except exceptions.AzureError as exc:
                raise ComputeAPIError(f"Azure DELETE {name}: {exc}") from None

    # -- list -----------------------------------------------------------------------------
    def list_tagged(self, key: str = TAG_RUN, value: str | None = None) -> list[Instance]:
        _, _, exceptions = _sdk()
        found = []
        try:
            if self.resource_group:  # a role scoped to the group may not list the subscription
                vms = self.client.virtual_machines.list(self.resource_group, expand="instanceView")
            else:
                vms = self.client.virtual_machines.list_all(status_only="true")
            for vm in vms:
                tags = dict(getattr(vm, "tags", None) or {})
                if key not in tags or (value is not None and tags[key] != value):
                    continue
                instance = self._instance(vm)
                if instance.state is not InstanceState.TERMINATED:
                    found.append(instance)
        except exceptions.HttpResponseError as exc:
            code, message = _error_code(exc)
            raise ComputeAPIError(f"Azure list VMs: {code}: {message}", code=code) from None
        except exceptions.AzureError as exc:
            raise ComputeAPIError(f"Azure list VMs: {exc}") from None
        return found


def _parse_id(vm_id: str) -> tuple[str, str, str]:
    match = _VM_ID.match(vm_id)
    if not match:
        raise ComputeAPIError(f"not an Azure VM resource id: {vm_id!r}")
    return match["sub"], match["rg"], match["name"]


class AzureProvider(CloudProvider):
    """``provider = "azure"``: nodes are Azure VMs (see the module docstring and docs/providers-azure.md)."""

    name = "azure"
    Options = AzureOptions

    @classmethod
    def parse_options(cls, options: Mapping[str, Any]) -> AzureOptions:
        """What a run and `planner gc` both read; gc has no job, so no resource group or subnet (it lists the
        subscription and deletes by VM id), which only a run needs (:meth:`check_options`)."""
        parsed = super().parse_options(options)
        assert isinstance(parsed, AzureOptions)
        parsed.subscription()  # fails now, naming the fix, rather than at the first call
        return parsed

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        cls._placed(cls.parse_options(options))

    @staticmethod
    def _placed(parsed: AzureOptions) -> None:
        """A run creates VMs: it needs the group they go in and the subnet their NICs join."""
        missing = [key for key in ("resource_group", "subnet_id") if getattr(parsed, key) is None]
        if missing:
            raise ProviderError(
                "; ".join(f"[run.options] {key}: required by provider 'azure' "
                          f"({AzureOptions.model_fields[key].description})" for key in missing)
                + ". To fix: add them to the job's [run.options] table (docs/providers-azure.md)."
            )

    @classmethod
    def compute(cls, options: CloudOptions | Mapping[str, Any] | None = None) -> AzureCompute:
        if isinstance(options, AzureOptions):
            opts = options
        elif isinstance(options, CloudOptions):
            opts = AzureOptions.model_validate(options.model_dump())
        else:
            opts = AzureOptions.model_validate(dict(options or {}))
        client = management_client(opts.subscription(), base_url=opts.base_url, poll_interval_s=opts.poll_interval_s)
        return AzureCompute(client, resource_group=opts.resource_group or "", wait_s=opts.terminate_timeout_s)
