"""Optional extras: one clear line naming the ``pip install`` when one is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtra", "require"]


class MissingExtra(RuntimeError):
    """A feature needs an optional extra that is not installed."""


def require(module: str, extra: str, *, feature: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtra` naming ``pip install 'danlu[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(
            f"{feature} needs {module.split('.')[0]}, which is not installed. To fix: pip install 'danlu[{extra}]' "
            f"(in a checkout of danlu: pip install -e '.[{extra}]')"
        ) from None
