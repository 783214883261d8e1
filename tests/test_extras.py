"""``danlu.extras.require``: "not installed" only for a module that is not there."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from danlu import extras
from danlu.extras import MissingExtra, require


def test_a_missing_module_names_the_pip_install() -> None:
    with pytest.raises(MissingExtra) as caught:
        require("danlu_no_such_module.sub", "mlflow", feature="[tracking.mlflow]")
    assert str(caught.value).startswith("[tracking.mlflow] needs danlu_no_such_module, which is not installed. "
                                        "To fix: pip install 'danlu[mlflow]'")


def test_an_import_that_fails_once_under_a_concurrent_import_is_tried_again(monkeypatch) -> None:
    calls: list[str] = []
    real_import = importlib.import_module

    def flaky(name: str):
        calls.append(name)
        if len(calls) == 1:
            raise ImportError("cannot import name 'X' from partially initialized module 'json' "
                              "(most likely due to a circular import)")
        return real_import(name)

    monkeypatch.setattr(extras.importlib, "import_module", flaky)
    assert require("json", "mlflow", feature="[tracking.mlflow]") is json
    assert calls == ["json", "json"]


def test_an_installed_module_that_keeps_failing_says_why_not_that_it_is_missing(monkeypatch) -> None:
    def broken(name: str):
        raise ImportError("libfoo.so: cannot open shared object file")

    monkeypatch.setattr(extras.importlib, "import_module", broken)
    with pytest.raises(MissingExtra) as caught:
        require("json", "mlflow", feature="[tracking.mlflow]")
    message = str(caught.value)
    assert "not installed" not in message
    assert message.startswith("[tracking.mlflow]: importing json failed: libfoo.so: cannot open shared object file")


def test_a_module_needed_only_by_the_processes_started_is_checked_without_importing_it(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "this", raising=False)  # the stdlib's Zen: importing it prints
    extras.require_installed("this", "train", feature="planner run")
    assert "this" not in sys.modules
    with pytest.raises(MissingExtra, match=r"^planner run needs danlu_no_such_module, which is not installed\. "
                                           r"To fix: pip install 'danlu\[train\]'"):
        extras.require_installed("danlu_no_such_module", "train", feature="planner run")
