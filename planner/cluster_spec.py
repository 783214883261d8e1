"""``[[purchase.cluster]]``: a team's own Kubernetes cluster as a pool the planner may choose.

One entry is one GPU type of one cluster, picked by a node selector::

    [[purchase.cluster]]
    name = "a100"                        # names the pool: kubernetes:<context>/<namespace>:a100
    context = "lab"                      # kubeconfig context (default: the current one)
    namespace = "ml-team"
    gpu = "A100-80GB"                    # catalog GPU name: the throughput table's speed
    gpus_per_node = 4                    # GPUs one pod asks for (one pod = one node of the plan)
    max_gpus = 16                        # GPUs the team may use at once
    gpu_hour_usd = 0.9                   # internal price per GPU-hour (0 allowed)
    node_selector = { "nvidia.com/gpu.product" = "NVIDIA-A100-SXM4-80GB" }
    tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
    queue_wait_hours = 0.5               # a stated wait, or "pending_pods": measured at quote time

The planner treats it like held capacity (:mod:`planner.cluster`): used first, at its
internal price, by at most ``max_gpus // gpus_per_node`` nodes, after its queue wait.
The Kubernetes provider (``runtime/providers/kubernetes.py``) reads the same entry to
build the pods: the GPU resource, node selector, tolerations and priority class.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["PENDING_PODS", "ClusterPool", "Toleration"]

PENDING_PODS = "pending_pods"
"""``queue_wait_hours = "pending_pods"``: the wait is measured from the namespace's pending GPU pods."""

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# A label key: an optional DNS-subdomain prefix and a name of at most 63 characters.
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, str_max_length=4096)


class Toleration(_Model):
    """A pod toleration (core/v1 Toleration), so the pods may land on tainted GPU nodes."""

    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError('operator = "Exists" takes no value (remove value, or use operator = "Equal")')
        if self.operator == "Equal" and not self.key:
            raise ValueError('operator = "Equal" needs a key (or use operator = "Exists" to tolerate every taint)')
        return self

    def to_api(self) -> dict[str, str]:
        """The toleration as the Kubernetes API spells it (camelCase, no empty fields)."""
        return {k: v for k, v in (("key", self.key), ("operator", self.operator), ("value", self.value),
                                  ("effect", self.effect)) if v}


class ClusterPool(_Model):
    """One GPU type of a team's Kubernetes cluster (see the module docstring)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?$",
                      description="lower case, digits and '-', at most 30: the pool's name")
    context: str | None = Field(default=None, min_length=1, max_length=253,
                                description="kubeconfig context; default: the current context")
    namespace: str = Field(default="default", pattern=_DNS_LABEL)
    gpu: str = Field(min_length=1, max_length=64, description="catalog GPU name (A100, A100-80GB, H100, ...)")
    gpus_per_node: int = Field(ge=1, le=64, description="GPUs one pod asks for")
    max_gpus: int = Field(ge=1, le=65_536, description="GPUs the team may use at once")
    gpu_hour_usd: float = Field(default=0.0, ge=0, le=1_000, description="internal price per GPU-hour")
    node_selector: dict[str, str] = Field(default_factory=dict, max_length=32)
    tolerations: tuple[Toleration, ...] = Field(default=(), max_length=32)
    gpu_resource: str = Field(default="nvidia.com/gpu", description="the extended resource the GPUs are")
    priority_class: str | None = Field(default=None, pattern=_DNS_LABEL.replace("61", "251"),
                                       description="priorityClassName of the pods")
    queue_wait_hours: float | Literal["pending_pods"] = Field(
        default=0.0, description='hours before pods start: a stated figure, or "pending_pods" (measured)')
    max_hours: float | None = Field(default=None, gt=0, le=87_600,
                                    description="how long the team may hold the GPUs for one job")

    @field_validator("queue_wait_hours")
    @classmethod
    def _wait(cls, value: float | str) -> float | str:
        if isinstance(value, float | int) and not 0 <= value <= 8_760:
            raise ValueError('must be hours between 0 and 8760, or "pending_pods"')
        return value

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            if not _LABEL_KEY.match(key):
                raise ValueError(f"{key!r} is not a Kubernetes label key (e.g. \"nvidia.com/gpu.product\")")
            if not _LABEL_VALUE.match(label):
                raise ValueError(f"the value of {key!r} ({label!r}) is not a Kubernetes label value "
                                 "(at most 63 letters, digits, '-', '_', '.')")
        return value

    @field_validator("gpu_resource")
    @classmethod
    def _resource(cls, value: str) -> str:
        if not _LABEL_KEY.match(value) or "/" not in value:
            raise ValueError(f"{value!r} is not an extended resource name like \"nvidia.com/gpu\"")
        return value

    @model_validator(mode="after")
    def _fits(self) -> ClusterPool:
        if self.max_gpus < self.gpus_per_node:
            raise ValueError(f"max_gpus ({self.max_gpus}) is less than one pod's gpus_per_node "
                             f"({self.gpus_per_node}): the team could not run a single pod")
        return self

    @property
    def max_nodes(self) -> int:
        """Pods the team may run at once."""
        return self.max_gpus // self.gpus_per_node

    @property
    def region(self) -> str:
        """The pool's region: the context's name (``current`` for the kubeconfig's current context),
        with what would break a pool id (``:``, ``/``: an EKS context is an ARN) made ``-``."""
        return re.sub(r"[^A-Za-z0-9._@-]", "-", self.context) if self.context else "current"

    @property
    def hourly_usd(self) -> float:
        """Internal price of one pod-hour."""
        return self.gpu_hour_usd * self.gpus_per_node
