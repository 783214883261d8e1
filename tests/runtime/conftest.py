"""Fixtures for the runtime tests: a job launcher that always reaps what it started."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ddp_launch import Launcher


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    jobs = Launcher()
    try:
        yield jobs
    finally:
        jobs.reap()
