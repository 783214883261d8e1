"""The cheap-import promise: ``import runtime`` and its pure modules never load torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ddp_launch import REPO_ROOT


@pytest.mark.parametrize(
    "statement",
    [
        "import runtime",
        "import runtime.training.interval, runtime.training.contract, runtime.training.store, runtime.training.batching, runtime.training.seeding",
    ],
)
def test_import_does_not_load_torch(statement: str) -> None:
    code = f"{statement}; import sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_session_is_resolved_lazily_and_callable() -> None:
    code = (
        "import runtime, sys; assert 'runtime.training.session' not in sys.modules; "
        "s = runtime.session; from runtime.training.session import Session; "
        "import runtime.training.session as m; print(callable(runtime.session), m is s, Session.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "Session"]


def test_unknown_attribute_is_an_attribute_error() -> None:
    import runtime

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        runtime.nope  # noqa: B018
