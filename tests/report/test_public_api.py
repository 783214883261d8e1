"""The report modules export exactly their public names (as the `planner run` modules do)."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("name", ["runtime.reports.run_view", "runtime.reports.run_report"])
def test_all_lists_the_public_names(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        n for n, value in vars(module).items()
        if not n.startswith("_") and getattr(value, "__module__", None) == name
    }
    assert public == set(module.__all__)
