"""The provider interface: how the controller gets nodes, runs torchrun on them and lets go.

A provider turns ``nodes`` instances of a :class:`pricing.pool.Pool` (one type, in one
place, bought one way) into :class:`Node` handles and runs one torchrun agent per node.
The local provider (:mod:`runtime.providers.local`) is the embedded default, the fake
one (:mod:`runtime.providers.fake`) plays a scripted cloud for tests; a cloud provider
implements the same methods in one module and registers itself under the
``danlu.providers`` entry-point group (:mod:`runtime.providers.registry`).

Faults (``--chaos``) are the provider's own business: it is built with a
:class:`ProviderContext` holding the fault plan and the clock, and reclaims nodes itself
when one is due; the controller only sees the notices and node states below.

Node lifecycle, as every provider reports it through :meth:`Provider.poll`::

    provision() -> PENDING --wait_ready()--> READY --run()--> RUNNING --> EXITED (agent ended)
                                                                  \\--> RECLAIMED (the cloud took it)
    terminate() -> TERMINATED, from any state; billing stops here

Timing rules the controller relies on:

* a node is billed from :meth:`provision` until :meth:`terminate` returns, whatever it
  did in between (the controller records that interval in the ledger);
* :meth:`interruption_notice` returns the cloud's warning as soon as the provider has
  seen it -- ahead of the reclaim by the cloud's lead time -- and keeps returning it;
* after a reclaim, the node's processes are gone; :meth:`terminate` still must be
  called to release what the provider holds for it;
* injected faults fire only after :meth:`Provider.training_started` (a reclaim during
  start-up tests nothing the checkpoint protocol does).
"""

from __future__ import annotations

import abc
import enum
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pricing.pool import TERM_YEARS, Pool
from runtime.accounting.mailer import PASSWORD_ENV, USER_ENV
from runtime.control.clock import Clock
from runtime.errors import RuntimeFailure
from runtime.providers.notices import Notice

if TYPE_CHECKING:
    from planner.job import HeldReservation, JobSpec
    from runtime.control.chaos import ChaosPlan

__all__ = [
    "CONTROLLER_SECRETS",
    "LaunchSpec",
    "Node",
    "NodeState",
    "NodeStatus",
    "Provider",
    "ProviderContext",
    "ProviderError",
    "child_environment",
    "refuse_terms",
]


CONTROLLER_SECRETS = (USER_ENV, PASSWORD_ENV)
"""Environment only the controller needs (its mailer's SMTP login): never handed to a node."""


def child_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the processes a provider starts: the controller's, less its secrets."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k not in CONTROLLER_SECRETS}


class ProviderError(RuntimeFailure):
    """A provider could not provision, launch or release nodes."""


class NodeState(enum.StrEnum):
    """Where a node is in its lifecycle (see the module docstring)."""

    PENDING = "pending"
    READY = "ready"
    RUNNING = "running"
    EXITED = "exited"
    RECLAIMED = "reclaimed"
    TERMINATED = "terminated"


@dataclass(frozen=True, slots=True)
class Node:
    """One provisioned instance. ``handle`` is the provider's own record (instance id,
    process ids, ...), JSON-serialisable so a resumed controller can release it."""

    id: str
    index: int
    pool: Pool
    provisioned_at: float
    handle: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "index": self.index, "pool": self.pool.to_dict(),
            "provisioned_at": self.provisioned_at, "handle": dict(self.handle),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Node:
        return cls(
            id=str(data["id"]), index=int(data["index"]), pool=Pool.from_dict(data["pool"]),
            provisioned_at=float(data["provisioned_at"]), handle=dict(data.get("handle", {})),
        )


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """One torchrun launch across all nodes of a pool.

    ``rdzv_id`` is fresh for every launch, so a late agent of an earlier launch can
    never join this one. ``env`` carries the controller contract
    (:class:`runtime.training.contract.LaunchContract`).
    """

    launch_id: str
    entrypoint: tuple[str, ...]
    nproc_per_node: int
    rdzv_id: str
    env: Mapping[str, str]
    cwd: str
    log_dir: Path
    rdzv_timeout_s: float = 60.0
    shutdown_timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """What :meth:`Provider.poll` says about one node."""

    node_id: str
    state: NodeState
    returncode: int | None = None
    detail: str = ""


def refuse_terms(job: JobSpec, provider: str) -> None:
    """Refuse a job that lets its plans buy a reservation term on a real cloud's provider.

    Launching instances is all such a provider does: a plan's new 1- or 3-year term would run as
    on-demand nodes the cloud bills by the hour while the ledger had charged the whole term, and
    a commitment that size is not bought from inside a training run.

    Raises:
        ProviderError: naming the key and the fix.
    """
    terms = [p for p in job.purchase.allow if p in TERM_YEARS]
    if terms:
        raise ProviderError(
            f"[purchase] allow: {', '.join(terms)}: provider {provider!r} launches instances and does not buy "
            "reservation terms (the nodes would run on demand, billed by the hour, while the plan paid for the "
            f"term). To fix: remove {', '.join(repr(t) for t in terms)} from allow (`planner quote` still prices "
            "them); a term the team has bought goes under [[purchase.held]], with its reservation_id where "
            "launches must target it."
        )


@dataclass(frozen=True, slots=True)
class ProviderContext:
    """What every provider is built with (see :meth:`Provider.from_context`).

    ``state_dir`` is the provider's own folder inside the run directory; ``chaos`` the
    faults to inject (None: none); ``hold_nodes`` node indices whose agent never starts;
    ``run_id`` the run's name (cloud providers tag every resource with it), ``home`` its runs directory's
    home id (tagged too, "" for none: :mod:`runtime.control.run_home`); ``options``
    the job's ``[run.options]`` table, for the provider to validate
    (:meth:`Provider.check_options`); ``run_dir`` the run directory (default: the parent of
    ``state_dir``; a provider built by another one, :mod:`runtime.providers.auto`, sits deeper);
    ``held`` the job's ``[[purchase.held]]`` reservations, whose ``reservation_id`` a launch on
    a held pool targets.
    """

    state_dir: Path
    clock: Clock
    chaos: ChaosPlan | None = None
    hold_nodes: tuple[int, ...] = ()
    run_id: str = ""
    home: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    run_dir: Path | None = None
    held: tuple[HeldReservation, ...] = ()

    @property
    def run_root(self) -> Path:
        """The run directory (its ``state.json``)."""
        return self.run_dir if self.run_dir is not None else self.state_dir.parent


class Provider(abc.ABC):
    """Provision, run, watch and release nodes of one cloud (or of this machine)."""

    name: str
    remote: bool = False
    """True when the nodes are other machines: the checkpoint dir must then be an object-store URL."""
    host_startup: bool = False
    """True when the nodes start on this machine: a simulated run (time scale > 1) does not bill
    their start-up (see :mod:`runtime.control.clock`)."""
    delegates: bool = False
    """True for a provider that owns no instances but hands each pool to another registered
    provider (:mod:`runtime.providers.auto`): `planner gc` asks those instead."""
    runs_entrypoint: bool = True
    """True when the nodes run ``[run].entrypoint`` in the run's working directory (on this machine, or
    its code bundle): `planner run` then checks, before anything is billed, that its script is there."""

    @classmethod
    def check_job(cls, job: JobSpec) -> None:
        """Refuse a job this provider cannot run, before anything is written: by default, its
        ``[run.options]`` (:meth:`check_options`); a table per provider is for ``provider = "auto"``.

        Raises:
            ProviderError: naming the key and the fix.
        """
        tables = sorted(k for k, v in job.run.options.items() if isinstance(v, Mapping))
        if tables:
            raise ProviderError(
                f"[run.options.{tables[0]}]: a table of options per provider goes with provider = \"auto\", which "
                f"runs each pool on its cloud's provider; provider {cls.name!r} reads [run.options] itself. To fix: "
                f"move the keys of [run.options.{tables[0]}] up into [run.options], or set [run] provider = \"auto\"."
            )
        cls.check_options(job.run.options)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Refuse ``[run.options]`` this provider does not understand, before anything is written.

        Raises:
            ProviderError: naming the option and the fix.
        """
        if options:
            raise ProviderError(
                f"[run.options]: provider {cls.name!r} takes no options (got {', '.join(sorted(options))}). "
                "To fix: remove the [run.options] table."
            )

    @classmethod
    @abc.abstractmethod
    def from_context(cls, context: ProviderContext) -> Provider:
        """The provider of one run; the registry builds every provider this way.

        Raises:
            ProviderError: it cannot be built here (no credentials, say); the message says what to do.
        """

    @abc.abstractmethod
    def provision(self, pool: Pool, *, nodes: int, launch_id: str) -> list[Node]:
        """Ask for ``nodes`` instances of ``pool``; billing starts now.

        Raises:
            ProviderError: the cloud has no capacity (or refuses) -- nothing is held then.
        """

    @abc.abstractmethod
    def wait_ready(self, nodes: Sequence[Node], *, timeout_s: float) -> None:
        """Block until every node can run a command, or raise :class:`ProviderError`."""

    @abc.abstractmethod
    def run(self, nodes: Sequence[Node], launch: LaunchSpec) -> list[Node]:
        """Start one torchrun agent per node; returns the nodes with updated handles."""

    @abc.abstractmethod
    def poll(self, nodes: Sequence[Node]) -> list[NodeStatus]:
        """The state of each node, in the order given. Never blocks for long."""

    def training_started(self, nodes: Sequence[Node]) -> None:  # noqa: B027 -- a hook; most ignore it
        """The workers on ``nodes`` train now: faults the provider injects may fire from here on."""

    @abc.abstractmethod
    def interruption_notice(self, node: Node) -> Notice | None:
        """The cloud's interruption (or rebalance) notice for ``node``, once seen."""

    @abc.abstractmethod
    def acknowledge(self, node: Node, notice: Notice) -> None:
        """Tell the cloud the node is ready to go (Azure expedites the eviction)."""

    @abc.abstractmethod
    def terminate(self, nodes: Sequence[Node], *, grace_s: float) -> None:
        """Stop the nodes' processes (SIGTERM, then SIGKILL after ``grace_s``) and release them."""

    @abc.abstractmethod
    def release_stale(self, nodes: Sequence[Node]) -> list[str]:
        """Release nodes recorded by a controller that died; returns the ids still found running."""

    @abc.abstractmethod
    def close(self) -> None:
        """Terminate every node still held and release the provider's own resources."""
