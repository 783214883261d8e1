"""Project-wide test fixtures: where ../shared is, and no network beyond 127.0.0.1."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DANLU_SHARED", REPO.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """A path under ../shared, skipping the calling test with a reason when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs {path} (the project's shared data, beside the checkout); not present here")
    return path


@pytest.fixture
def shared():
    return shared_path


def _loopback(address) -> bool:
    if isinstance(address, tuple):
        host = address[0]
    else:  # AF_UNIX paths are local by definition
        return True
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guarded_connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address):
        raise ConnectionRefusedError(f"tests may only reach 127.0.0.1, not {address!r}")
    return _real_connect(self, address)


def _guarded_connect_ex(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address):
        raise ConnectionRefusedError(f"tests may only reach 127.0.0.1, not {address!r}")
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True, scope="session")
def _no_network():
    """Every test in the session: sockets connect to loopback addresses only."""
    socket.socket.connect = _guarded_connect
    socket.socket.connect_ex = _guarded_connect_ex
    yield
    socket.socket.connect = _real_connect
    socket.socket.connect_ex = _real_connect_ex


@pytest.fixture(autouse=True)
def _own_data_dir(tmp_path_factory, monkeypatch):
    """A fresh danlu data dir for every test: no user's price cache, imports or learned
    interruption rates (pricing/learned.py), and no earlier test's, can change what a test
    sees; child processes inherit it."""
    monkeypatch.setenv("DANLU_DATA_DIR", str(tmp_path_factory.mktemp("danlu-data")))


@pytest.fixture(autouse=True)
def _default_width(monkeypatch):
    """Piped CLI output is 120 columns unless COLUMNS says otherwise (planner/cli.py), and some
    runners set it (pytest-xdist's workers say 80): a test asks for a width when it wants one."""
    monkeypatch.delenv("COLUMNS", raising=False)
