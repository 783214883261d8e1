"""``provider = "auto"``: each pool on the registered provider of its cloud, so a plan that spans
clouds -- the team's cluster, then spot on AWS when the cluster's phase ends -- runs as one run.

The controller keeps one :class:`~runtime.providers.base.Provider`; this one hands every call
to the provider registered under the pool's ``cloud`` (a pool's cloud *is* its provider's name:
``kubernetes`` for a ``[[purchase.cluster]]`` pool, ``aws``, ``gcp``, ``azure``). Each is built
on first use from the run's context, with its own state directory (``provider/<name>``) and
its own options, and every node it provisions records ``provider`` in its handle: poll,
notices, terminate and a resumed controller's ``release_stale`` go to the provider that owns
the node. ``routes.json`` in the state directory lists the providers the run has used, so a
resumed controller has each of them sweep what carries the run's tag (a launch a dead
controller left on the cluster is released even when the run is on AWS by then).

Why a provider the job names rather than one chosen for it: the run state records one
provider name, which ``--resume``, ``planner cancel`` and the ledger's readers rebuild; the
pools of a run change with every re-plan, so a choice made from the first plan would be wrong
by the second; and ``local`` simulates every pool on this machine, which must never turn into
real instances because a plan happened to span clouds. ``auto`` says it once, in job.toml.

Options: ``[run.options]`` keys are shared by every provider the run uses; a table named after
a provider holds that provider's own (``[run.options.aws] image_id``, ``[run.options.kubernetes]
image``) and wins over a shared key of the same name. :meth:`AutoProvider.check_job` checks,
before anything is written, every table and, for each provider the job may use (``kubernetes``
with a cluster entry, each of ``[constraints] clouds``, or every cloud provider installed when
it names none), the shared keys with its table.

Every target is a remote provider, so the run's checkpoints are in an object store all of its
nodes reach (the remote-ness rule holds for the whole run, whichever cloud a phase is on).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from danlu import atomic_file
from pricing.pool import CLUSTER_CLOUD, Pool
from runtime.providers import registry
from runtime.providers.base import (
    LaunchSpec,
    Node,
    NodeStatus,
    Provider,
    ProviderContext,
    ProviderError,
    refuse_terms,
)
from runtime.providers.notices import Notice

if TYPE_CHECKING:
    from planner.job import JobSpec

__all__ = ["AutoProvider", "options_for", "targets"]

ROUTES = "routes.json"
OWNER = "provider"
"""The key of a node's handle that names the provider owning it."""


def _tables(options: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {k: v for k, v in options.items() if isinstance(v, Mapping)}


def options_for(options: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The options provider ``name`` gets: the shared keys, then its own table's."""
    shared = {k: v for k, v in options.items() if not isinstance(v, Mapping)}
    return {**shared, **dict(_tables(options).get(name, {}))}


def targets(job: JobSpec) -> list[str]:
    """The providers ``job`` may run on: ``kubernetes`` for its clusters, and its clouds (every
    installed cloud provider when it names none, since any catalog cloud may then be planned)."""
    names = [CLUSTER_CLOUD] if job.purchase.cluster else []
    if job.constraints.clouds:
        return list(dict.fromkeys([*names, *job.constraints.clouds]))
    for name in registry.names():
        try:
            cls = registry.load(name)
        except registry.ProviderUnavailable:
            continue  # an SDK not installed here: its pools fail when provisioned, with the hint
        if cls.remote and not cls.delegates:
            names.append(name)
    return list(dict.fromkeys(names))


def _target_class(name: str, why: str) -> type[Provider]:
    try:
        cls = registry.load(name)
    except registry.ProviderUnavailable as exc:
        raise ProviderError(f"{why}: {exc}") from None
    if not cls.remote or cls.delegates:
        raise ProviderError(
            f"{why}: provider {name!r} cannot run a pool for provider \"auto\" (its nodes are not cloud machines "
            f"of their own). To fix: take {name!r} out of the job's clouds."
        )
    return cls


class AutoProvider(Provider):
    """Routes each pool to its cloud's provider (see the module docstring)."""

    name = "auto"
    remote = True
    delegates = True

    def __init__(self, context: ProviderContext):
        self.context = context
        self._built: dict[str, Provider] = {}
        context.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    @classmethod
    def from_context(cls, context: ProviderContext) -> AutoProvider:
        return cls(context)

    # -- options ---------------------------------------------------------------------------
    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        _check(options, sorted(_tables(options)), {})

    @classmethod
    def check_job(cls, job: JobSpec) -> None:
        refuse_terms(job, cls.name)
        names = targets(job)
        where = {n: "[[purchase.cluster]]" if n == CLUSTER_CLOUD and n not in job.constraints.clouds
                 else "[constraints] clouds" for n in names}
        try:
            _check(job.run.options, list(dict.fromkeys([*names, *sorted(_tables(job.run.options))])), where)
        except ProviderError as exc:
            if job.constraints.clouds:
                raise
            raise ProviderError(f"{exc} ([constraints] clouds names none, so the run may use every cloud provider "
                                f"installed: {', '.join(names)}; name its clouds to narrow them.)") from None

    # -- routing ---------------------------------------------------------------------------
    def provider_for(self, name: str) -> Provider:
        """The provider registered as ``name``, built on first use (and remembered in ``routes.json``)."""
        if name not in self._built:
            _target_class(name, f"provider \"auto\": pools on {name!r}")
            self._record(name)
            self._built[name] = registry.create(name, ProviderContext(
                self.context.state_dir / name, self.context.clock, chaos=self.context.chaos,
                hold_nodes=self.context.hold_nodes, run_id=self.context.run_id, home=self.context.home,
                options=options_for(self.context.options, name), run_dir=self.context.run_root,
                held=self.context.held))
        return self._built[name]

    def _owner(self, node: Node) -> str:
        return str(node.handle.get(OWNER) or node.pool.cloud)

    def _mine(self, node: Node) -> Provider:
        return self.provider_for(self._owner(node))

    def _groups(self, nodes: Sequence[Node]) -> dict[str, list[int]]:
        """Positions of ``nodes`` per owning provider, in order."""
        groups: dict[str, list[int]] = {}
        for i, node in enumerate(nodes):
            groups.setdefault(self._owner(node), []).append(i)
        return groups

    def _record(self, name: str) -> None:
        used = self.used()
        if name not in used:
            atomic_file.write_text(self.context.state_dir / ROUTES, json.dumps(sorted({*used, name})) + "\n",
                                   mode=0o600)

    def used(self) -> list[str]:
        """The providers this run has built (in any controller), from ``routes.json``."""
        try:
            names = json.loads((self.context.state_dir / ROUTES).read_text())
        except (OSError, ValueError):
            return []
        return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    @staticmethod
    def _owned(name: str, nodes: Sequence[Node]) -> list[Node]:
        return [_with_owner(n, name) for n in nodes]

    # -- Provider ---------------------------------------------------------------------------
    def provision(self, pool: Pool, *, nodes: int, launch_id: str) -> list[Node]:
        return self._owned(pool.cloud, self.provider_for(pool.cloud).provision(pool, nodes=nodes, launch_id=launch_id))

    def wait_ready(self, nodes: Sequence[Node], *, timeout_s: float) -> None:
        for name, where in self._groups(nodes).items():
            self.provider_for(name).wait_ready([nodes[i] for i in where], timeout_s=timeout_s)

    def run(self, nodes: Sequence[Node], launch: LaunchSpec) -> list[Node]:
        groups = self._groups(nodes)
        if len(groups) != 1:  # one torchrun job spans one pool: one provider
            raise ProviderError(f"one launch spans providers {', '.join(sorted(groups))}; a launch runs on one pool")
        (name,) = groups
        return self._owned(name, self.provider_for(name).run(nodes, launch))

    def poll(self, nodes: Sequence[Node]) -> list[NodeStatus]:
        out: list[NodeStatus | None] = [None] * len(nodes)
        for name, where in self._groups(nodes).items():
            for i, status in zip(where, self.provider_for(name).poll([nodes[i] for i in where]), strict=True):
                out[i] = status
        return [s for s in out if s is not None]

    def training_started(self, nodes: Sequence[Node]) -> None:
        for name, where in self._groups(nodes).items():
            self.provider_for(name).training_started([nodes[i] for i in where])

    def interruption_notice(self, node: Node) -> Notice | None:
        return self._mine(node).interruption_notice(node)

    def acknowledge(self, node: Node, notice: Notice) -> None:
        self._mine(node).acknowledge(node, notice)

    def terminate(self, nodes: Sequence[Node], *, grace_s: float) -> None:
        for name, where in self._groups(nodes).items():
            self.provider_for(name).terminate([nodes[i] for i in where], grace_s=grace_s)

    def release_stale(self, nodes: Sequence[Node]) -> list[str]:
        """The recorded nodes by their owners, and every provider the run used sweeps the run's tag."""
        groups = self._groups(nodes)
        stale: list[str] = []
        for name in sorted({*self.used(), *groups}):
            stale += self.provider_for(name).release_stale([nodes[i] for i in groups.get(name, [])])
        return stale

    def close(self) -> None:
        """Close every provider built; the first error is raised once all have been asked."""
        error: Exception | None = None
        for provider in self._built.values():
            try:
                provider.close()
            except Exception as exc:  # the others must still release theirs
                error = error or exc
        if error is not None:
            raise error


def _with_owner(node: Node, name: str) -> Node:
    if node.handle.get(OWNER) == name:
        return node
    return replace(node, handle={**node.handle, OWNER: name})


def _check(options: Mapping[str, Any], names: Sequence[str], where: Mapping[str, str]) -> None:
    """Every provider in ``names`` takes its table and the shared keys; else one error naming each key and the fix."""
    tables = _tables(options)
    shared = {k: v for k, v in options.items() if not isinstance(v, Mapping)}
    classes = {n: _target_class(n, f"{where[n]}: {n!r}" if n in where else f"[run.options.{n}]") for n in names}
    problems: list[str] = []
    for name, cls in classes.items():
        own = dict(tables.get(name, {}))
        try:
            cls.check_options(own)
        except ProviderError as exc:  # a cloud's messages say "[run.options] KEY": here the key is in the table
            problems.append(str(exc).replace("[run.options] ", f"[run.options.{name}] "))
    for key, value in shared.items():
        users = [n for n in classes if key not in tables.get(n, {})]
        errors = {n: _refusal(classes[n], key, value) for n in users}
        refused = [n for n in users if errors[n]]
        takers = [n for n in users if not errors[n]]
        if refused and not takers:
            problems.append(errors[refused[0]])  # a bad value, or a key no provider takes: its own message
        elif refused:
            problems.append(
                f"[run.options] {key}: provider{'s' if len(refused) > 1 else ''} {', '.join(map(repr, refused))} "
                f"do{'' if len(refused) > 1 else 'es'} not take it, and the keys of [run.options] go to every "
                f"provider the run uses ({', '.join(classes)}). To fix: move it into "
                f"[run.options.{takers[0]}], the table of the provider it belongs to.")
    if not problems:
        for name, cls in classes.items():
            try:
                cls.check_options(options_for(options, name))
            except ProviderError as exc:
                problems.append(f"provider {name!r} with [run.options] and [run.options.{name}]: {exc}")
    if problems:
        raise ProviderError(" ".join(p if p.endswith(".") else f"{p}." for p in problems))


def _refusal(cls: type[Provider], key: str, value: Any) -> str | None:
    try:
        cls.check_options({key: value})
    except ProviderError as exc:
        return str(exc)
    return None
