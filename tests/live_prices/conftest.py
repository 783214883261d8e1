"""Fixtures for the live price fetcher tests: recorded responses, stubbed SDK clients, no network.

Every cloud call is served by the SDK's own stubbing (botocore Stubber, moto where it is
faithful, ``responses`` for the Azure and GCP REST transports) from the recorded-shape
JSON under ``fixtures/``.  The autouse guard refuses any socket connection or DNS
lookup that is not loopback, so a call that escapes its stub fails loudly instead of
reaching a cloud.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from pricing.retry import RetryPolicy

FIXTURES = Path(__file__).parent / "fixtures"
NOW = dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.timezone.utc)
SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"


def fixture(name: str) -> Any:
    """A recorded response body from ``fixtures/``."""
    return json.loads((FIXTURES / name).read_text())


def _is_loopback(host: object) -> bool:
    if host in (None, "localhost", b"localhost"):
        return True
    try:
        return ipaddress.ip_address(host.decode() if isinstance(host, bytes) else str(host)).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse non-loopback connects and name lookups for every test in this directory."""
    real_connect = socket.socket.connect
    real_create = socket.create_connection
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            raise ConnectionRefusedError(f"live_prices tests may only reach 127.0.0.1, not {address!r}")
        return real_connect(self, address)

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_loopback(address[0]):
            raise ConnectionRefusedError(f"live_prices tests may only reach 127.0.0.1, not {address!r}")
        return real_create(address, *args, **kwargs)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_loopback(host):
            raise socket.gaierror(socket.EAI_NONAME, f"live_prices tests resolve no names but localhost ({host!r})")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


class Sleeps(list):
    """A stand-in for ``time.sleep`` that records the waits instead of spending them."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def retry(sleeps: Sleeps) -> RetryPolicy:
    return RetryPolicy(attempts=3, base_delay=0.5, max_delay=2.0, sleep=sleeps)


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty danlu data directory, selected through $DANLU_DATA_DIR."""
    path = tmp_path / "data"
    monkeypatch.setenv("DANLU_DATA_DIR", str(path))
    return path


class FakeAzureCredential:
    """A TokenCredential for ARM clients in tests: a fixed bearer token, never a network call."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken("test-token", int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, options: Any = None) -> Any:
        from azure.core.credentials import AccessTokenInfo

        return AccessTokenInfo("test-token", int(time.time()) + 3600)


@pytest.fixture
def isolated_cloud_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials anywhere in the SDKs' standard chains (env, files, metadata servers)."""
    for var in (
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_SUBSCRIPTION_ID", "AZURE_USERNAME",
        "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "IDENTITY_ENDPOINT", "MSI_ENDPOINT",
    ):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
