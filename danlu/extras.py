"""Optional extras: one clear line naming the ``pip install`` when one is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtra", "require"]


class MissingExtra(RuntimeError):
    """A feature needs an optional extra that is not installed (or that is installed and fails to import)."""


def require(module: str, extra: str, *, feature: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtra` naming ``pip install 'danlu[extra]'``.

    Only a module that is not there is "not installed". Any other ImportError is what the
    package itself raised, said as it is: the same module imported by two threads at once can
    raise one (a partially initialised module) that a second try, after the other thread
    finished, does not."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module
        raise MissingExtra(
            f"{feature} needs {missing.split('.')[0]}, which is not installed. To fix: pip install 'danlu[{extra}]' "
            f"(in a checkout of danlu: pip install -e '.[{extra}]')"
        ) from None
    except ImportError:
        pass
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(f"{feature}: importing {module} failed: {exc}. To fix: reinstall it with "
                           f"pip install --force-reinstall 'danlu[{extra}]'") from None
