"""Optional extras: one clear line naming the ``pip install`` when one is missing."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["MissingExtra", "require", "require_installed"]


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
        raise _not_installed(missing.split(".")[0], extra, feature) from None
    except ImportError:
        pass
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(f"{feature}: importing {module} failed: {exc}. To fix: reinstall it with "
                           f"pip install --force-reinstall 'danlu[{extra}]'") from None


def require_installed(module: str, extra: str, *, feature: str) -> None:
    """Raise :class:`MissingExtra` naming ``pip install 'danlu[extra]'`` when ``module`` is not installed,
    without importing it: for a process that needs it only in the processes it starts (the controller's
    nodes import torch; the controller, which runs for the whole job, should not hold it)."""
    if importlib.util.find_spec(module) is None:
        raise _not_installed(module, extra, feature)


def _not_installed(module: str, extra: str, feature: str) -> MissingExtra:
    return MissingExtra(f"{feature} needs {module}, which is not installed. To fix: pip install 'danlu[{extra}]' "
                        f"(in a checkout of danlu: pip install -e '.[{extra}]')")
