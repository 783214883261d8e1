"""Which providers exist: the ``danlu.providers`` entry-point group, plus the ones that ship here.

A new cloud is one module and one line in its package's ``pyproject.toml``::

    [project.entry-points."danlu.providers"]
    mycloud = "mypackage.mycloud:MyCloudProvider"

The class implements :class:`runtime.providers.base.Provider` and builds itself with
:meth:`~runtime.providers.base.Provider.from_context`. The providers that ship in
``runtime/providers`` are also known without their entry points, so an editable install
whose metadata predates one still finds it; an installed entry point of the same name
wins.
"""

from __future__ import annotations

import importlib
from importlib import metadata

from runtime.providers.base import Provider, ProviderContext, ProviderError

__all__ = [
    "BUILT_IN",
    "GROUP",
    "ProviderUnavailable",
    "create",
    "load",
    "names",
]

GROUP = "danlu.providers"
BUILT_IN = {
    "local": "runtime.providers.local:LocalProvider",
    "aws": "runtime.providers.aws:AwsProvider",
    "gcp": "runtime.providers.gcp:GcpProvider",
    "azure": "runtime.providers.azure:AzureProvider",
    "kubernetes": "runtime.providers.kubernetes:KubernetesProvider",
    "auto": "runtime.providers.auto:AutoProvider",
}
"""Providers shipped in this package (name -> ``module:Class``), as pyproject.toml registers them."""


class ProviderUnavailable(ProviderError):
    """No provider of that name is registered, or it cannot be loaded here (a missing SDK)."""


def _targets() -> dict[str, str]:
    found = dict(BUILT_IN)
    for entry in metadata.entry_points(group=GROUP):
        found[entry.name] = entry.value
    return found


def names() -> list[str]:
    """Every registered provider name, sorted."""
    return sorted(_targets())


def load(name: str) -> type[Provider]:
    """The provider class registered as ``name``.

    Raises:
        ProviderUnavailable: ``name`` is not registered, or its module does not import.
    """
    targets = _targets()
    target = targets.get(name)
    if target is None:
        raise ProviderUnavailable(
            f"provider {name!r} is not registered; registered providers: {', '.join(sorted(targets))}. To fix: "
            f"pass --provider with one of them, or install the package that registers {name!r} under the "
            f"{GROUP!r} entry points."
        )
    module_name, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ProviderUnavailable(
            f"provider {name!r} ({target}) cannot be loaded: {exc}. To fix: install what it needs, or pass "
            f"--provider with another of {', '.join(sorted(targets))}."
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise ProviderUnavailable(f"provider {name!r} ({target}) is not a runtime.providers.base.Provider subclass")
    return cls


def create(name: str, context: ProviderContext) -> Provider:
    """The provider ``name``, built for one run."""
    return load(name).from_context(context)
