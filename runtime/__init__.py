"""runtime: executes plans. One folder per concern, so a module's path says its job:

* ``runtime.training`` -- the training session a user's script imports (``runtime.session(...)``,
  an alias of ``runtime.training.session``): DDP, exact resume, asynchronous checkpoints,
  preemption, and the contract with the controller (``runtime.training.contract``:
  environment variables, exit codes, ``status.json`` and ``control.json``);
* ``runtime.control`` -- the controller behind ``planner run``, its durable state, re-planning
  and chaos;
* ``runtime.providers`` -- where nodes come from (a registry of providers) and the clouds'
  interruption notices;
* ``runtime.accounting`` -- the ledger, spend forecasts, budget alerts and their mail;
* ``runtime.reports`` -- ``planner status`` and ``planner report`` views of a run directory.

Importing this package is cheap: torch is imported only when the training session or
its checkpointer is first used; the controller, the store, the contract and accounting
never import torch. Dependencies point one way: runtime may import planner and pricing,
never the reverse.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"session": "runtime.training.session"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(_LAZY[name])
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")
