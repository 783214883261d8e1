"""Each module of `planner run` exports exactly its public names."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "runtime.control.controller", "runtime.control.run_state", "runtime.control.events", "runtime.control.replan",
    "runtime.control.chaos", "runtime.control.clock", "runtime.providers.notices", "runtime.providers.metadata_server",
    "runtime.providers.base", "runtime.providers.local", "runtime.providers.fake", "runtime.providers.registry",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_lists_the_public_names(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        n for n, value in vars(module).items()
        if not n.startswith("_") and getattr(value, "__module__", None) == name
    }
    assert public <= set(module.__all__), f"public but not exported: {sorted(public - set(module.__all__))}"
    assert all(hasattr(module, n) for n in module.__all__)
