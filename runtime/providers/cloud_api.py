"""What a cloud's compute API must do for danlu: the one seam each cloud module fills.

A cloud provider (``runtime/providers/aws.py``, ``gcp.py``, ``azure.py``) is a
:class:`runtime.providers.cloud.CloudProvider` built on one :class:`ComputeAPI` of its
cloud; the provider owns everything that is the same on every cloud (the bootstrap, the
node agent's heartbeats through the run's object store, billing times, release), the
``ComputeAPI`` only talks to the cloud's SDK. ``planner gc`` uses the same API to find
what danlu left behind.

Every instance danlu creates carries the :data:`TAG_RUN`, :data:`TAG_LAUNCH` and
:data:`TAG_NODE` tags (labels on GCP, tags on Azure); that is how a resumed controller
and ``planner gc`` find instances whose ids were never written down (a controller
SIGKILLed between the create call and its state file). :data:`TAG_HOME` names the runs
directory the run was started in (:mod:`runtime.control.run_home`).

Errors: a cloud's "no capacity here" and "over quota" answers are :class:`CapacityError`
(the controller blocks the pool and re-plans); anything else the SDK raises is turned
into :class:`ComputeAPIError` with the cloud's own code and message, never a traceback.
"""

from __future__ import annotations

import abc
import enum
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pricing.pool import Pool
from runtime.providers.base import ProviderError

__all__ = [
    "TAG_HOME",
    "TAG_LAUNCH",
    "TAG_NODE",
    "TAG_RUN",
    "CapacityError",
    "ComputeAPI",
    "ComputeAPIError",
    "Instance",
    "InstanceRequest",
    "InstanceState",
    "fit_label",
]

TAG_RUN = "danlu-run"
TAG_LAUNCH = "danlu-launch"
TAG_NODE = "danlu-node"
TAG_HOME = "danlu-home"
"""Tag keys (GCP label keys: lower case, dashes) on every instance danlu creates."""


def fit_label(text: str, cleaned: str, limit: int = 63) -> str:
    """``cleaned`` (``text`` with the characters a label refuses replaced) as a label value that still tells
    ``text`` apart: when cleaning changed or would cut it, the first characters and a digest of ``text``. Two
    run ids sharing their first 63 characters, or differing only in case or punctuation, would otherwise get
    one label, and a resume deletes every instance labelled with its id."""
    if cleaned == text and len(cleaned) <= limit:
        return cleaned
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    head = cleaned[: limit - len(digest) - 1]
    return f"{head}-{digest}" if head else digest


class ComputeAPIError(ProviderError):
    """The cloud refused or failed a call; ``code`` is the cloud's own error code."""

    def __init__(self, message: str, *, code: str = ""):
        super().__init__(message)
        self.code = code


class CapacityError(ComputeAPIError):
    """No capacity or no quota for the pool now (``InsufficientInstanceCapacity``,
    ``ZONE_RESOURCE_POOL_EXHAUSTED``, ``SkuNotAvailable``, quota codes ...): re-plan elsewhere."""


class InstanceState(enum.StrEnum):
    """An instance's state, the same words on every cloud."""

    PENDING = "pending"  # asked for, not running yet (AWS pending, GCP PROVISIONING/STAGING, Azure Creating)
    RUNNING = "running"
    STOPPING = "stopping"  # going away (AWS shutting-down, GCP STOPPING, Azure Deleting)
    TERMINATED = "terminated"  # gone: billing has ended (also: not found any more)


@dataclass(frozen=True, slots=True)
class InstanceRequest:
    """One create call: ``count`` instances of ``pool``, named ``names[i]``, each with its tags and user data.

    ``names`` are danlu's node ids (``<run>-<launch>-n<i>``, lower case, at most 63
    characters: a valid GCE instance and Azure VM name); ``tags`` are the same for all
    instances except :data:`TAG_NODE`, which the API sets to the instance's name.
    ``user_data`` is the bootstrap script (text; the API encodes it as its cloud wants).
    ``options`` are the provider's options from the job's ``[run.options]`` table,
    already validated by the provider (image, network, service account, ...).
    ``reservation_id`` is the held reservation the instances must run in (the cloud's name for it,
    ``[[purchase.held]] reservation_id``), ``capacity_block`` whether it is an AWS Capacity Block.
    """

    pool: Pool
    names: tuple[str, ...]
    tags: Mapping[str, str]
    user_data: str
    options: Mapping[str, object] = field(default_factory=dict)
    reservation_id: str | None = None
    capacity_block: bool = False

    @property
    def count(self) -> int:
        return len(self.names)


@dataclass(frozen=True, slots=True)
class Instance:
    """An instance as the cloud reports it.

    ``id`` is what :meth:`ComputeAPI.describe` and :meth:`ComputeAPI.delete` take (AWS
    instance id, GCE ``zone/name``, Azure VM resource id); ``name`` danlu's node id;
    ``interruption`` is True when the cloud's API (not the node) says it is about to
    reclaim the instance (AWS spot request ``marked-for-termination``, GCE
    ``PREEMPTED``/``scheduling`` status, Azure ``Evicting``).
    """

    id: str
    name: str
    state: InstanceState
    zone: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    address: str | None = None
    hourly_usd: float | None = None
    interruption: bool = False


class ComputeAPI(abc.ABC):
    """One cloud's instance calls (see the module docstring). Implementations take their
    SDK client (or a factory) in ``__init__`` so tests point it at a local server."""

    cloud: str

    @abc.abstractmethod
    def create(self, request: InstanceRequest) -> list[Instance]:
        """Create the instances of ``request`` (spot or on-demand as its pool says).

        All or nothing: when only some could be created, the API deletes those before it
        raises, so a failed create holds nothing.

        Raises:
            CapacityError: no capacity or no quota for the pool.
            ComputeAPIError: any other refusal (bad image, permissions, ...).
        """

    @abc.abstractmethod
    def describe(self, ids: Sequence[str]) -> list[Instance]:
        """The instances ``ids`` in that order; one the cloud no longer knows is TERMINATED."""

    @abc.abstractmethod
    def delete(self, ids: Sequence[str]) -> None:
        """Ask the cloud to terminate ``ids`` (idempotent: gone ones are fine); does not wait."""

    @abc.abstractmethod
    def list_tagged(self, key: str = TAG_RUN, value: str | None = None) -> list[Instance]:
        """Every instance not yet TERMINATED whose tag ``key`` is ``value`` (any value: None),
        in every region/zone the API covers."""

    def tag_value(self, value: str) -> str:
        """``value`` as this cloud stores a tag (a GCE or Kubernetes label has fewer characters): what
        :meth:`list_tagged` gives back in ``Instance.tags`` for an instance created with ``value``."""
        return value
