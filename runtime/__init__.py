"""runtime: executes plans -- the training session, checkpoints, controller and providers.

Training scripts use ``runtime.session`` (DDP, exact resume, asynchronous incremental
checkpoints, preemption); the controller talks to them through ``runtime.contract``
(environment variables, exit codes, ``status.json`` and ``control.json``).

Importing this package is cheap: torch is imported only when ``runtime.session`` or
``runtime.checkpoint`` is first used. ``runtime.interval``, ``runtime.contract`` and
``runtime.store`` never import torch. Dependencies point one way: runtime may import planner
and pricing, never the reverse.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"session", "checkpoint", "data"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(f"runtime.{name}")
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")
